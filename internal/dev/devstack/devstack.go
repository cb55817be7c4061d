package devstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
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
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/tracing"
)

// DefaultShards is the shard count of a new stack whose Config leaves it
// zero. Shards let several scheduler processes share the work; one process
// on one machine does best with one, since each shard is a pipeline of
// transactions and fewer shards make larger batches. (harvest bench, W1 at
// concurrency 16 on a 2-core machine: about 1,290 completed workflows/s
// with 1 shard, 1,100 with 2, 780 with 4; at concurrency 64, 1 shard keeps
// e2e p99 under 100 ms where 2 shards reach 200-285 ms.)
const DefaultShards = 1

// Config configures a Stack. Zero values mean the documented defaults.
type Config struct {
	// StateDir holds the embedded NATS store (nats/) and the private
	// PostgreSQL cluster (postgres/), default ./.harvest, and what those
	// servers require of a client (credentials.json, mode 0600), made at
	// the first start and kept. Start makes it private to its owner (mode
	// 0700). One stack at a time runs on it: it holds the lock file
	// harvest.lock there.
	StateDir string
	// Addr is the HTTP listen address, default 127.0.0.1:8080; port 0
	// picks a free one.
	Addr string
	// NATSURL, when set, is used instead of an embedded NATS server. The
	// embedded server requires a user and password, which the stack's
	// NATSURL carries.
	NATSURL string
	// NATSOptions are added to the connection to NATSURL (credentials,
	// TLS).
	NATSOptions []nats.Option
	// NATSPort is the embedded server's client port; 0 picks a free one.
	NATSPort int
	// DatabaseURL, when set, is used instead of a private PostgreSQL. The
	// private PostgreSQL requires a password (scram-sha-256) of every
	// connection, which the URLs of the stack's pools carry.
	DatabaseURL string
	// DatabaseMaxConns caps the stack's PostgreSQL pool; zero keeps the
	// driver's default.
	DatabaseMaxConns int
	// DBTracer, when set, traces every query of the stack's pool (the
	// bench counts SQL statements with it).
	DBTracer pgx.QueryTracer
	// Streams configures the JetStream topology (shards and so on). Zero
	// Shards means the count the state dir's streams were created with,
	// or DefaultShards for a new one.
	Streams broker.Config
	// Scheduler and Worker tune those services; their DB, Topology and
	// Logger fields are filled in.
	Scheduler scheduler.Config
	Worker    harvest.WorkerConfig
	// Ingest tunes the HTTP API; its Topology, NC, DB and Logger fields
	// are filled in.
	Ingest ingest.Config
	// Bindings route messages of the caller's JetStream streams to
	// workflows; they run after the HTTP API is up. A binding whose stream
	// does not exist waits for it and does not hold up Start.
	Bindings []binding.Binding
	// Tracing, when set, traces every service of the stack with
	// OpenTelemetry: ingest's requests, the scheduler's applies, the
	// worker's tasks and activities, one trace per event.
	Tracing *tracing.Tracing
	// Register, if set, registers workflows and activities of the caller's
	// on the stack's worker, beside the examples.
	Register func(w *harvest.Worker)
	// NoWorker runs the stack without its worker (and the examples): the
	// caller's workers, connected to the stack's NATS, run the workflows.
	NoWorker bool
	// Stores, when set, spreads the stack's executions over several
	// PostgreSQL stores (internal/placement), with a scheduler for each: the
	// first is DatabaseURL's (or the private PostgreSQL's), and its own
	// DatabaseURL is ignored; each other has its own database (one of its
	// own on the private PostgreSQL, when its DatabaseURL is empty).
	Stores []StoreConfig
	Logger *slog.Logger
}

// StoreConfig is one PostgreSQL store of a stack with several.
type StoreConfig struct {
	Name        string
	DatabaseURL string
	Mode        placement.Mode
}

// ErrStateDirInUse is wrapped by Start's error when another stack, in
// this process or another, runs on the state dir.
var ErrStateDirInUse = errors.New("in use by another harvest dev")

// What a ListenError's address is for.
const (
	ServiceAPI  = "the HTTP API"
	ServiceNATS = "the embedded NATS server"
)

// ListenError is Start's error when an address the stack would listen on
// cannot be had (another process holds it); Start returns it before it
// starts NATS or PostgreSQL.
type ListenError struct {
	// Service is ServiceAPI or ServiceNATS.
	Service string
	Addr    string
	Err     error
}

func (e *ListenError) Error() string {
	why := e.Err.Error()
	if op := (*net.OpError)(nil); errors.As(e.Err, &op) && op.Err != nil {
		why = op.Err.Error() // without the address again
	}
	return fmt.Sprintf("%s cannot listen on %s: %s", e.Service, e.Addr, why)
}

func (e *ListenError) Unwrap() error { return e.Err }

// ShardsError is Start's error when Streams.Shards differs from the count
// the stack's streams were created with, which is theirs for life.
type ShardsError struct {
	// StateDir holds the streams; empty when NATS is not embedded.
	StateDir string
	// Have is the streams' count, Want the configured one.
	Have, Want int
}

func (e *ShardsError) Error() string {
	if e.StateDir != "" {
		return fmt.Sprintf("state dir %s was created with %s, which it keeps for life; the stack is configured with %s",
			e.StateDir, shardCount(e.Have), shardCount(e.Want))
	}
	return fmt.Sprintf("the NATS server's streams were created with %s, which they keep for life; the stack is configured with %s",
		shardCount(e.Have), shardCount(e.Want))
}

// Unwrap makes errors.Is(err, broker.ErrShardMismatch) hold.
func (e *ShardsError) Unwrap() error { return broker.ErrShardMismatch }

func shardCount(n int) string {
	if n == 1 {
		return "1 shard"
	}
	return fmt.Sprintf("%d shards", n)
}

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

// natsHost is where the embedded NATS server listens.
const natsHost = "127.0.0.1"

func (s *Stack) startNATS(ctx context.Context) error {
	if s.cfg.NATSURL == "" {
		port := s.cfg.NATSPort
		if port == 0 {
			port = server.RANDOM_PORT
		}
		ns, err := server.NewServer(&server.Options{
			ServerName: "harvest-dev",
			Host:       natsHost,
			Port:       port,
			// Every client, the stack's own too, gives the state dir's
			// user and password: the port is open to every local user.
			Username:  natsUser,
			Password:  s.creds.NATSPassword,
			JetStream: true,
			StoreDir:  filepath.Join(s.cfg.StateDir, "nats"),
			NoSigs:    true,
			NoLog:     true,
		})
		if err != nil {
			return fmt.Errorf("embedded nats: %w", err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(30 * time.Second) {
			ns.Shutdown()
			return errors.New("embedded nats: not ready within 30s")
		}
		s.nats = ns
		s.cfg.NATSURL = natsClientURL(ns.Addr().(*net.TCPAddr).Port, s.creds)
	}
	nc, err := nats.Connect(s.cfg.NATSURL, append(broker.ClientOptions("harvest-dev", s.log), s.cfg.NATSOptions...)...)
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", redactURLs(s.cfg.NATSURL), err)
	}
	s.nc = nc
	return nil
}

func (s *Stack) startPostgres(ctx context.Context) error {
	url := s.cfg.DatabaseURL
	if url == "" {
		dataDir, err := filepath.Abs(filepath.Join(s.cfg.StateDir, "postgres"))
		if err != nil {
			return fmt.Errorf("postgres data dir: %w", err)
		}
		if err := s.adoptTempDirPostgres(dataDir); err != nil {
			return err
		}
		// As root, PostgreSQL runs as an unprivileged user and reaches
		// its data dir by descriptor (internal/dev/pglocal), so the data stays
		// in the state dir even under /root. It listens on 127.0.0.1,
		// where every local user reaches it: it requires the state dir's
		// password of every connection, and pglocal sets it at each start
		// (on a cluster from before there were credentials too).
		pg, err := pglocal.Start(ctx, pglocal.Config{DataDir: dataDir, Durable: true, Password: s.creds.PostgresPassword,
			Logger: s.log.With("service", "postgres")})
		if err != nil {
			if errors.Is(err, pglocal.ErrDataDirUnreachable) {
				return fmt.Errorf("start private postgres: %w; or set HARVEST_DATABASE_URL to a server of your own", err)
			}
			return fmt.Errorf("start private postgres: %w", err)
		}
		s.pg = pg
		if err := createDatabase(ctx, pg.URL("postgres"), "harvest"); err != nil {
			return err
		}
		url = pg.URL("harvest")
	}
	pcfg, err := store.PoolConfigWith(url, store.PoolOptions{MaxConns: s.cfg.DatabaseMaxConns})
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	pcfg.ConnConfig.Tracer = s.cfg.DBTracer
	db, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return fmt.Errorf("connect to postgres: %w", err)
	}
	s.DB = db
	return nil
}

// adoptTempDirPostgres moves into the state dir the PostgreSQL data that
// harvest dev kept, as root, in the temp dir when the PostgreSQL user could
// not reach the state dir (os.TempDir()/harvest-dev-<hash of dataDir>, up to
// issue 19), so that a stack made then keeps its executions.
func (s *Stack) adoptTempDirPostgres(dataDir string) error {
	sum := sha256.Sum256([]byte(dataDir))
	old := filepath.Join(os.TempDir(), "harvest-dev-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(old, "postgres", "PG_VERSION")); err != nil {
		return nil
	}
	if _, err := os.Lstat(dataDir); err == nil {
		s.log.Warn("the state dir has PostgreSQL data of its own; the data an older harvest dev kept for it in the temp dir is left alone",
			"data_dir", dataDir, "old_data_dir", filepath.Join(old, "postgres"))
		return nil
	}
	if err := os.Rename(filepath.Join(old, "postgres"), dataDir); err != nil {
		return fmt.Errorf("move this state dir's PostgreSQL data from %s, where an older harvest dev kept it, to %s: %w; "+
			"move it yourself, or remove it to start afresh", filepath.Join(old, "postgres"), dataDir, err)
	}
	s.log.Info("moved the PostgreSQL data an older harvest dev kept in the temp dir into the state dir",
		"data_dir", dataDir, "old_data_dir", filepath.Join(old, "postgres"))
	if err := os.RemoveAll(old); err != nil {
		s.log.Warn("remove the old PostgreSQL folder", "dir", old, "err", err)
	}
	return nil
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return nil
}

// startWorker starts the stack's worker, with the examples and what
// cfg.Register registers.
func (s *Stack) startWorker(ctx context.Context, cfg Config) error {
	wcfg := cfg.Worker
	wcfg.NATS, wcfg.Logger = s.nc, s.log.With("service", "worker")
	if wcfg.TracerProvider == nil {
		wcfg.TracerProvider = cfg.Tracing.Provider()
	}
	if wcfg.Metrics == nil {
		wcfg.Metrics = cfg.Ingest.Metrics
	}
	var err error
	if s.worker, err = harvest.NewWorker(wcfg); err != nil {
		return err
	}
	examples.Register(s.worker, s.Services)
	if cfg.Register != nil {
		cfg.Register(s.worker)
	}
	if err := s.worker.Start(ctx); err != nil {
		return err
	}
	s.stops = append(s.stops, s.worker.Stop)
	return nil
}

// Worker is the stack's worker, nil with NoWorker.
func (s *Stack) Worker() *harvest.Worker { return s.worker }

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

// openStores opens, migrates and sets in the streams' configuration the
// stack's stores, when it has several: the first is DB.
func (s *Stack) openStores(ctx context.Context) error {
	if len(s.cfg.Stores) == 0 {
		return nil
	}
	list := make([]placement.Store, len(s.cfg.Stores))
	for i, st := range s.cfg.Stores {
		list[i] = placement.Store{Name: st.Name, Mode: st.Mode}
	}
	set, err := placement.New(list)
	if err != nil {
		return err
	}
	s.cfg.Streams.Stores = set
	s.Pools = []*pgxpool.Pool{s.DB}
	for _, st := range s.cfg.Stores[1:] {
		url := st.DatabaseURL
		if url == "" && s.pg != nil {
			// A database of its own on the private PostgreSQL.
			name := "harvest_" + st.Name
			if err := createDatabase(ctx, s.pg.URL("postgres"), name); err != nil {
				return fmt.Errorf("store %s: %w", st.Name, err)
			}
			url = s.pg.URL(name)
		}
		pcfg, err := store.PoolConfigWith(url, store.PoolOptions{MaxConns: s.cfg.DatabaseMaxConns})
		if err != nil {
			return fmt.Errorf("store %s: %w", st.Name, err)
		}
		pcfg.ConnConfig.Tracer = s.cfg.DBTracer
		db, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return fmt.Errorf("store %s: %w", st.Name, err)
		}
		s.Pools = append(s.Pools, db)
		if _, err := store.Migrate(ctx, db); err != nil {
			return fmt.Errorf("store %s: %w", st.Name, err)
		}
	}
	return nil
}

// pools are the stores the stack's schedulers apply: Pools, or DB alone.
func (s *Stack) pools() []*pgxpool.Pool {
	if len(s.Pools) > 0 {
		return s.Pools
	}
	return []*pgxpool.Pool{s.DB}
}
