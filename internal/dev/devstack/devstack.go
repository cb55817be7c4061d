package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/dirlock"
	"github.com/harvest-engine/harvest/internal/dev/pglocal"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
)

// lockFile is the file in the state dir that a running stack holds.
const lockFile = "harvest.lock"

// Stack is a running Harvest.
type Stack struct {
	cfg  Config
	log  *slog.Logger
	lock *dirlock.Lock
	nats *server.Server
	pg   *pglocal.Server
	// creds are the state dir's, when the stack runs a server of its own.
	creds credentials
	nc    *nats.Conn
	DB    *pgxpool.Pool
	// Pools are the stores' pools when the stack has several (Config.Stores),
	// in their order: DB is the first.
	Pools    []*pgxpool.Pool
	Topology *broker.Topology
	sched    *scheduler.Scheduler
	worker   *harvest.Worker
	api      *ingest.Server
	bindings *binding.Runner
	http     *http.Server
	listener net.Listener
	// Services are the fake downstream systems of the example workflows.
	Services *examples.Services
	stops    []func(context.Context) error
}

// Start brings the stack up; on error everything started is stopped.
// Before it starts anything it takes the state dir (ErrStateDirInUse when
// another stack runs on it) and the addresses it listens on (*ListenError);
// a Streams.Shards other than the streams' is a *ShardsError.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.StateDir == "" {
		cfg.StateDir = ".harvest"
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:8080"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Stack{cfg: cfg, log: cfg.Logger, Services: examples.NewServices()}
	defer func() {
		if err != nil {
			_ = s.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err := makePrivate(cfg.StateDir, s.log); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	// First what another stack may hold, before anything starts: the
	// state dir, then the addresses.
	if s.lock, err = dirlock.Acquire(cfg.StateDir, lockFile); err != nil {
		var locked *dirlock.LockedError
		if errors.As(err, &locked) && locked.PID != 0 {
			return nil, fmt.Errorf("state dir %s is %w (pid %d)", cfg.StateDir, ErrStateDirInUse, locked.PID)
		}
		if errors.Is(err, dirlock.ErrLocked) {
			return nil, fmt.Errorf("state dir %s is %w", cfg.StateDir, ErrStateDirInUse)
		}
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	if cfg.NATSURL == "" || cfg.DatabaseURL == "" {
		if s.creds, err = loadCredentials(cfg.StateDir, s.log); err != nil {
			return nil, err
		}
	}
	if err := s.startNATS(ctx); err != nil {
		return nil, err
	}
	if err := s.startPostgres(ctx); err != nil {
		return nil, err
	}
	if _, err := store.Migrate(ctx, s.DB); err != nil {
		return nil, err
	}
	if err := s.openStores(ctx); err != nil {
		return nil, err
	}
	cfg.Streams.Stores = s.cfg.Streams.Stores
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	// A state dir (or a NATS server) keeps the count its streams were
	// created with.
	deployed, err := broker.DeployedShards(ctx, js)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Streams.Shards == 0 && deployed != 0:
		cfg.Streams.Shards = deployed
	case cfg.Streams.Shards == 0:
		cfg.Streams.Shards = DefaultShards
	case deployed != 0 && deployed != cfg.Streams.Shards:
		e := &ShardsError{Have: deployed, Want: cfg.Streams.Shards}
		if s.nats != nil {
			e.StateDir = cfg.StateDir
		}
		return nil, e
	}
	if s.Topology, err = broker.DeclareRetrying(ctx, js, cfg.Streams, func(err error) { s.log.Warn("waiting to declare the streams", "err", err) }); err != nil {
		return nil, err
	}
	s.Topology.Tracing = cfg.Tracing

	if cfg.Ingest.Metrics == nil {
		// Shared by ingest, the scheduler, the worker and the bindings,
		// so /metrics shows every metric of the stack, and the process's.
		cfg.Ingest.Metrics = prometheus.NewRegistry()
		cfg.Ingest.Metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for i, db := range s.pools() {
		scfg := cfg.Scheduler
		scfg.DB, scfg.Store, scfg.Topology, scfg.Logger = db, i, s.Topology, s.log.With("service", "scheduler")
		if scfg.Metrics == nil {
			scfg.Metrics = cfg.Ingest.Metrics
		}
		if len(cfg.Stores) > 0 {
			// One scheduler per store, their metrics told apart by the
			// store's name.
			scfg.Logger = scfg.Logger.With("store", cfg.Stores[i].Name)
			scfg.Metrics = prometheus.WrapRegistererWith(prometheus.Labels{"store": cfg.Stores[i].Name}, scfg.Metrics)
		}
		sched, err := scheduler.New(scfg)
		if err != nil {
			return nil, err
		}
		if err := sched.Start(ctx); err != nil {
			return nil, err
		}
		s.stops = append(s.stops, sched.Stop)
		if i == 0 {
			s.sched = sched
		}
	}

	if !cfg.NoWorker {
		if err := s.startWorker(ctx, cfg); err != nil {
			return nil, err
		}
	}

	icfg := cfg.Ingest
	icfg.Topology, icfg.NC, icfg.DB, icfg.Stores, icfg.Logger = s.Topology, s.nc, s.DB, s.Pools, s.log.With("service", "ingest")
	if icfg.Now == nil {
		// One clock for the stack: what ingest reports past retention is
		// what its scheduler prunes.
		icfg.Now = cfg.Scheduler.Now
	}
	// What the bindings start is declared, as the configuration has it.
	icfg.DeclaredWorkflows = append(slices.Clip(icfg.DeclaredWorkflows), binding.Workflows(cfg.Bindings)...)
	s.bindings, err = binding.New(binding.Config{Topology: s.Topology, Bindings: cfg.Bindings, StartPolicies: icfg.StartPolicies, TaskQueues: icfg.TaskQueues, Metrics: icfg.Metrics,
		Logger: s.log.With("service", "bindings")})
	if err != nil {
		return nil, err
	}
	icfg.Bindings = s.bindings
	if s.api, err = ingest.New(icfg); err != nil {
		return nil, err
	}
	if err := s.api.Start(ctx); err != nil {
		return nil, err
	}
	s.stops = append(s.stops, s.api.Stop)
	if err := s.bindings.Start(ctx); err != nil {
		return nil, err
	}
	s.stops = append(s.stops, s.bindings.Stop)
	s.http = s.api.HTTPServer(cfg.Addr)
	go func() {
		if err := s.http.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "err", err)
		}
	}()
	s.stops = append(s.stops, s.http.Shutdown)
	return s, nil
}

// listen takes the HTTP API's address, which the stack serves once it
// is up, and makes sure the embedded NATS server's port is free.
func (s *Stack) listen() error {
	l, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return &ListenError{Service: ServiceAPI, Addr: s.cfg.Addr, Err: err}
	}
	s.listener = l
	if s.cfg.NATSURL == "" && s.cfg.NATSPort != 0 {
		addr := net.JoinHostPort(natsHost, strconv.Itoa(s.cfg.NATSPort))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return &ListenError{Service: ServiceNATS, Addr: addr, Err: err}
		}
		// Closed again for the server, which binds it in a moment.
		if err := l.Close(); err != nil {
			return fmt.Errorf("free %s: %w", addr, err)
		}
	}
	return nil
}

// NC is the stack's NATS connection.
func (s *Stack) NC() *nats.Conn { return s.nc }

// URL is the HTTP API's base URL.
func (s *Stack) URL() string { return "http://" + s.listener.Addr().String() }

// NATSURL is the NATS server the stack uses; the embedded server's
// carries its user and password (nats://harvest:…@127.0.0.1:…), so a
// worker connects with it alone. Log [Stack.NATSURLRedacted] instead.
func (s *Stack) NATSURL() string { return s.cfg.NATSURL }

// NATSURLRedacted is NATSURL with its passwords masked, for logs.
func (s *Stack) NATSURLRedacted() string { return redactURLs(s.cfg.NATSURL) }

// Stop stops every service, newest first, then NATS and PostgreSQL. Safe
// to call twice.
func (s *Stack) Stop(ctx context.Context) error {
	var errs []error
	for i := len(s.stops) - 1; i >= 0; i-- {
		if err := s.stops[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.stops = nil
	for _, db := range s.Pools[min(1, len(s.Pools)):] {
		db.Close()
	}
	s.Pools = nil
	if s.DB != nil {
		s.DB.Close()
		s.DB = nil
	}
	if s.nc != nil {
		s.nc.Close()
		s.nc = nil
	}
	if s.nats != nil {
		s.nats.Shutdown()
		s.nats.WaitForShutdown()
		s.nats = nil
	}
	if s.pg != nil {
		if err := s.pg.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
		s.pg = nil
	}
	if s.http == nil && s.listener != nil {
		// Taken, never served: a Start that failed.
		if err := s.listener.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	// Last: the state dir is free once nothing of the stack runs on it.
	if err := s.lock.Release(); err != nil {
		errs = append(errs, err)
	}
	s.lock = nil
	return errors.Join(errs...)
}
