package devstack

import (
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
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
