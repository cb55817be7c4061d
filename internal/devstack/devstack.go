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
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/pglocal"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/streams"
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
	// StateDir holds the embedded NATS store and the private PostgreSQL
	// cluster, default ./.harvest.
	StateDir string
	// Addr is the HTTP listen address, default 127.0.0.1:8080; port 0
	// picks a free one.
	Addr string
	// NATSURL, when set, is used instead of an embedded NATS server.
	NATSURL string
	// NATSOptions are added to the connection to NATSURL (credentials,
	// TLS).
	NATSOptions []nats.Option
	// NATSPort is the embedded server's client port; 0 picks a free one.
	NATSPort int
	// DatabaseURL, when set, is used instead of a private PostgreSQL.
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
	Streams streams.Config
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
	// Register, if set, registers workflows and activities of the caller's
	// on the stack's worker, beside the examples.
	Register func(w *harvest.Worker)
	Logger   *slog.Logger
}

// Stack is a running Harvest.
type Stack struct {
	cfg      Config
	log      *slog.Logger
	nats     *server.Server
	pg       *pglocal.Server
	nc       *nats.Conn
	DB       *pgxpool.Pool
	Topology *streams.Topology
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
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
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
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if cfg.Streams.Shards == 0 {
		// A state dir keeps the count it was created with.
		if cfg.Streams.Shards, err = streams.DeployedShards(ctx, js); err != nil {
			return nil, err
		}
		if cfg.Streams.Shards == 0 {
			cfg.Streams.Shards = DefaultShards
		}
	}
	if s.Topology, err = streams.DeclareRetrying(ctx, js, cfg.Streams, func(err error) { s.log.Warn("waiting to declare the streams", "err", err) }); err != nil {
		return nil, err
	}

	if cfg.Ingest.Metrics == nil {
		// Shared by ingest, the scheduler, the worker and the bindings,
		// so /metrics shows every metric of the stack, and the process's.
		cfg.Ingest.Metrics = prometheus.NewRegistry()
		cfg.Ingest.Metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	scfg := cfg.Scheduler
	scfg.DB, scfg.Topology, scfg.Logger = s.DB, s.Topology, s.log.With("service", "scheduler")
	if scfg.Metrics == nil {
		scfg.Metrics = cfg.Ingest.Metrics
	}
	if s.sched, err = scheduler.New(scfg); err != nil {
		return nil, err
	}
	if err := s.sched.Start(ctx); err != nil {
		return nil, err
	}
	s.stops = append(s.stops, s.sched.Stop)

	wcfg := cfg.Worker
	wcfg.NATS, wcfg.Logger = s.nc, s.log.With("service", "worker")
	if wcfg.Metrics == nil {
		wcfg.Metrics = cfg.Ingest.Metrics
	}
	if s.worker, err = harvest.NewWorker(wcfg); err != nil {
		return nil, err
	}
	examples.Register(s.worker, s.Services)
	if cfg.Register != nil {
		cfg.Register(s.worker)
	}
	if err := s.worker.Start(ctx); err != nil {
		return nil, err
	}
	s.stops = append(s.stops, s.worker.Stop)

	icfg := cfg.Ingest
	icfg.Topology, icfg.NC, icfg.DB, icfg.Logger = s.Topology, s.nc, s.DB, s.log.With("service", "ingest")
	// What the bindings start is declared, as the configuration has it.
	icfg.DeclaredWorkflows = append(slices.Clip(icfg.DeclaredWorkflows), binding.Workflows(cfg.Bindings)...)
	if s.api, err = ingest.New(icfg); err != nil {
		return nil, err
	}
	if err := s.api.Start(ctx); err != nil {
		return nil, err
	}
	s.stops = append(s.stops, s.api.Stop)
	s.bindings, err = binding.New(binding.Config{Topology: s.Topology, Bindings: cfg.Bindings, Metrics: icfg.Metrics,
		Logger: s.log.With("service", "bindings")})
	if err != nil {
		return nil, err
	}
	if err := s.bindings.Start(ctx); err != nil {
		return nil, err
	}
	s.stops = append(s.stops, s.bindings.Stop)
	if s.listener, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	s.http = s.api.HTTPServer(cfg.Addr)
	go func() {
		if err := s.http.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "err", err)
		}
	}()
	s.stops = append(s.stops, s.http.Shutdown)
	return s, nil
}

func (s *Stack) startNATS(ctx context.Context) error {
	if s.cfg.NATSURL == "" {
		port := s.cfg.NATSPort
		if port == 0 {
			port = server.RANDOM_PORT
		}
		ns, err := server.NewServer(&server.Options{
			ServerName: "harvest-dev",
			Host:       "127.0.0.1",
			Port:       port,
			JetStream:  true,
			StoreDir:   filepath.Join(s.cfg.StateDir, "nats"),
			NoSigs:     true,
			NoLog:      true,
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
		s.cfg.NATSURL = ns.ClientURL()
	}
	nc, err := nats.Connect(s.cfg.NATSURL, append(streams.ClientOptions("harvest-dev", s.log), s.cfg.NATSOptions...)...)
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", s.cfg.NATSURL, err)
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
		pgcfg := pglocal.Config{DataDir: dataDir, Durable: true, Logger: s.log.With("service", "postgres")}
		pg, err := pglocal.Start(ctx, pgcfg)
		if errors.Is(err, pglocal.ErrDataDirUnreachable) {
			// As root, PostgreSQL runs as an unprivileged user that cannot
			// reach a state dir under, say, /root: keep its cluster in a
			// folder of the temp dir named after the state dir instead.
			sum := sha256.Sum256([]byte(dataDir))
			pgcfg.DataDir = filepath.Join(os.TempDir(), "harvest-dev-"+hex.EncodeToString(sum[:6]), "postgres")
			s.log.Warn("state dir unreachable for the PostgreSQL user; keeping its data in the temp dir", "data_dir", pgcfg.DataDir, "err", err)
			if err = os.MkdirAll(filepath.Dir(pgcfg.DataDir), 0o755); err == nil {
				pg, err = pglocal.Start(ctx, pgcfg)
			}
		}
		if err != nil {
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

// Worker is the stack's worker.
func (s *Stack) Worker() *harvest.Worker { return s.worker }

// NC is the stack's NATS connection.
func (s *Stack) NC() *nats.Conn { return s.nc }

// URL is the HTTP API's base URL.
func (s *Stack) URL() string { return "http://" + s.listener.Addr().String() }

// NATSURL is the NATS server the stack uses.
func (s *Stack) NATSURL() string { return s.cfg.NATSURL }

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
	return errors.Join(errs...)
}
