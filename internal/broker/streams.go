package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/tracing"
)

// Names of the JetStream resources. They are persisted, so they never change.
const (
	CommandStream = "HARVEST_CMD"
	TaskStream    = "HARVEST_TASK"
	// AcceptedBucket marks the commands ingest answered 202 before their
	// outcome was known, so polling them answers "accepted" until the
	// scheduler stores the outcome in PostgreSQL, even while PostgreSQL
	// is unreachable.
	AcceptedBucket = "HARVEST_ACCEPTED"
	// retiredOutcomeBucket held every command's outcome before outcomes
	// moved to PostgreSQL (migration 010); Declare deletes it.
	retiredOutcomeBucket = "HARVEST_OUTCOMES"
	// AdmissionBucket holds the closed admission gates, by workflow name.
	AdmissionBucket = "HARVEST_ADMISSION"
	// SchemaBucket holds the input JSON Schemas workers register, by
	// workflow name.
	SchemaBucket = "HARVEST_SCHEMAS"
	// LedgerBucket records the effects activities ran once per key
	// (harvest.Once), shared by every worker. An entry expires the
	// deployment's retention after it was last written (Config.Retention).
	LedgerBucket = "HARVEST_LEDGER"
	// CancelledBucket announces cancelled executions to workers, which
	// cancel the contexts of their running activities.
	CancelledBucket = "HARVEST_CANCELLED"
	// HandbackBucket marks the task deliveries a worker handed back
	// without starting them (it was stopping, or lacks the workflow or
	// activity), so that the next delivery of the task knows that no
	// earlier one ran it.
	HandbackBucket = "HARVEST_HANDBACKS"
	// WorkersBucket holds the workflows and activities live workers
	// serve, one key per kind, name, task queue and worker
	// (internal/registry), each refreshed while its worker lives. Its
	// values expire after the registration TTL (the bucket's max age).
	WorkersBucket = "HARVEST_WORKERS"

	commandSubjects = "harvest.cmd.>"
	taskSubjects    = "harvest.task.>"

	// shardsMetadataKey records the shard count on the command stream, so a
	// process configured with another count refuses to start.
	shardsMetadataKey = "harvest_shards"
)

// Fixed limits of the buckets whose keys are names (of workflows), not
// executions: they never expire, and are bounded by size instead.
const (
	// AdmissionMaxBytes bounds the admission gates: hundreds of gates
	// with the longest reason the API takes (64 KiB), many thousands of
	// usual ones.
	AdmissionMaxBytes int64 = 16 << 20
	// SchemaMaxBytes bounds the input schemas workers register (each at
	// most one NATS message); ingest holds them all in memory.
	SchemaMaxBytes int64 = 64 << 20
)

// DeployedShards returns the shard count recorded on the command stream,
// or 0 when the stream does not exist yet (or predates the record).
func DeployedShards(ctx context.Context, js jetstream.JetStream) (int, error) {
	s, err := js.Stream(ctx, CommandStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up stream %s: %w", CommandStream, err)
	}
	have := s.CachedInfo().Config.Metadata[shardsMetadataKey]
	if have == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(have)
	if err != nil {
		return 0, fmt.Errorf("stream %s records shard count %q: %w", CommandStream, have, err)
	}
	return n, nil
}

// ErrShardMismatch is returned by Declare when the command stream was
// created with a different shard count. The shard count is fixed for a
// deployment's life.
var ErrShardMismatch = errors.New("shard count differs from the deployment's")

// Topology is the declared set of streams and buckets, with the
// configuration they were declared with.
type Topology struct {
	JS        jetstream.JetStream
	Accepted  jetstream.KeyValue
	Admission jetstream.KeyValue
	Schemas   jetstream.KeyValue
	Ledger    jetstream.KeyValue
	Cancelled jetstream.KeyValue
	Handbacks jetstream.KeyValue
	// Workers holds the live workers' registrations; nil on a topology a
	// worker bound before any declare created the bucket.
	Workers jetstream.KeyValue
	// Tracing, when set, carries the trace context of a publish's ctx in
	// the command's headers.
	Tracing    *tracing.Tracing
	shards     int
	layout     placement.Layout
	outcomeTTL time.Duration
	commands   jetstream.Stream
	tasks      jetstream.Stream
}

// Declare creates or updates the command stream, the task stream and the
// buckets. It is idempotent; every process calls it at start-up. Each
// stream and bucket gets cfg.Replicas, changed in place on one declared
// with another count; replicas NATS cannot place (more than the cluster's
// servers) are an error matching ErrReplicasUnplaceable. Each gets its
// limits too (docs/architecture.md, "Limits"), set in place on a stream
// declared without them or with others: max bytes the server cannot
// reserve are an error matching ErrInsufficientStorage.
func Declare(ctx context.Context, js jetstream.JetStream, cfg Config) (*Topology, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	storage := jetstream.FileStorage
	if cfg.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	shards := strconv.Itoa(cfg.Shards)
	lookup, cancel := context.WithTimeout(ctx, declareRequestTimeout)
	s, err := js.Stream(lookup, CommandStream)
	cancel()
	if err == nil {
		if have := s.CachedInfo().Config.Metadata[shardsMetadataKey]; have != "" && have != shards {
			return nil, fmt.Errorf("declare %s: %w: configured %s, stream has %s", CommandStream, ErrShardMismatch, shards, have)
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("look up stream %s: %w", CommandStream, err)
	}
	// Both streams are work queues: a message is removed once acknowledged,
	// and the scheduler acknowledges a command only after the transaction
	// that applied it commits. Each is bounded in bytes, and refuses new
	// messages when full (DiscardNew): dropping old ones would lose
	// accepted commands and dispatched tasks. The command stream has no max
	// age, since an accepted command must be applied however long the
	// schedulers are away; the task stream's (cfg.Retention) clears tasks
	// that no worker took, such as a queue none serves any more.
	commands, err := ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        CommandStream,
		Description: "Harvest commands: starts, signals, workflow task and activity results, by shard",
		Subjects:    []string{commandSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		MaxBytes:    cfg.CommandMaxBytes,
		Discard:     jetstream.DiscardNew,
		Storage:     storage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.Duplicates,
		Metadata:    map[string]string{shardsMetadataKey: shards},
	})
	if err != nil {
		return nil, declareError(ctx, js, "stream "+CommandStream, CommandStream, cfg.Replicas, err)
	}
	tasks, err := ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        TaskStream,
		Description: "Harvest tasks for workers, by task queue",
		Subjects:    []string{taskSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		MaxAge:      cfg.Retention,
		MaxBytes:    cfg.TaskMaxBytes,
		Discard:     jetstream.DiscardNew,
		Storage:     storage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.Duplicates,
	})
	if err != nil {
		return nil, declareError(ctx, js, "stream "+TaskStream, TaskStream, cfg.Replicas, err)
	}
	// Outcomes live in PostgreSQL now; the bucket that held them goes.
	if err := js.DeleteKeyValue(ctx, retiredOutcomeBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("delete retired bucket %s: %w", retiredOutcomeBucket, err)
	}
	// Every bucket keeps one value a key. The buckets keyed by command,
	// execution or activity expire their keys (TTL, the stream's max age);
	// those keyed by workflow name never expire, and are bounded in size.
	buckets := make([]jetstream.KeyValue, 7)
	for i, b := range []jetstream.KeyValueConfig{
		{Bucket: AcceptedBucket, Description: "Harvest commands answered 202 whose outcome was not known yet", TTL: cfg.OutcomeTTL},
		{Bucket: AdmissionBucket, Description: "Harvest admission gates: closed workflows and why", MaxBytes: AdmissionMaxBytes},
		{Bucket: SchemaBucket, Description: "Harvest workflow input JSON Schemas, registered by workers", MaxBytes: SchemaMaxBytes},
		{Bucket: LedgerBucket, Description: "Harvest effect ledger: results of effects run once per key", TTL: cfg.Retention},
		{Bucket: CancelledBucket, Description: "Harvest cancelled executions, for workers to stop their activities", TTL: cfg.OutcomeTTL},
		{Bucket: HandbackBucket, Description: "Harvest task deliveries handed back unstarted by workers", TTL: cfg.OutcomeTTL},
		{Bucket: WorkersBucket, Description: "Harvest workflows and activities served by live workers", TTL: cfg.WorkerTTL},
	} {
		b.History, b.Storage, b.Replicas = 1, storage, cfg.Replicas
		if buckets[i], err = ensureBucket(ctx, js, b); err != nil {
			return nil, declareError(ctx, js, "bucket "+b.Bucket, "KV_"+b.Bucket, cfg.Replicas, err)
		}
	}
	return &Topology{JS: js, Accepted: buckets[0], Admission: buckets[1], Schemas: buckets[2], Ledger: buckets[3], Cancelled: buckets[4],
		Handbacks: buckets[5], Workers: buckets[6], shards: cfg.Shards, layout: layoutOf(cfg.Stores, cfg.Shards), outcomeTTL: cfg.OutcomeTTL, commands: commands, tasks: tasks}, nil
}

// ensureStream creates the stream, or updates it when it exists with
// another configuration. It does not use CreateOrUpdateStream, which asks
// for an update first: on a cluster, two processes doing so at once for a
// stream that does not exist yet may neither be answered (nats-server
// 2.15.3; TestConcurrentDeclaresOnAClusterAreAnswered). A create with the
// configuration the stream has is answered with the stream.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return createElseUpdate(ctx, jetstream.ErrStreamNameAlreadyInUse,
		func(ctx context.Context) (jetstream.Stream, error) { return js.CreateStream(ctx, cfg) },
		func(ctx context.Context) (jetstream.Stream, error) { return js.UpdateStream(ctx, cfg) })
}

// ensureBucket is ensureStream for a key-value bucket.
func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return createElseUpdate(ctx, jetstream.ErrBucketExists,
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateKeyValue(ctx, cfg) },
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.UpdateKeyValue(ctx, cfg) })
}

// createElseUpdate creates, and updates when the create fails with
// exists, within declareRequestTimeout.
func createElseUpdate[T any](ctx context.Context, exists error, create, update func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, declareRequestTimeout)
	defer cancel()
	v, err := create(ctx)
	if errors.Is(err, exists) {
		return update(ctx)
	}
	return v, err
}

// declareRequestTimeout bounds one stream or bucket of Declare: a cluster
// electing a leader may leave a JetStream request unanswered, and the
// caller (DeclareRetrying) does better asking again than waiting out its
// whole attempt.
const declareRequestTimeout = 5 * time.Second

// DeclaredStreams names the JetStream streams Declare creates: the command
// and task streams, and each bucket's KV_<bucket>.
func DeclaredStreams() []string {
	names := []string{CommandStream, TaskStream}
	for _, b := range bucketNames() {
		names = append(names, "KV_"+b)
	}
	return names
}

// bucketNames are the buckets Declare creates, in Topology's order.
func bucketNames() []string {
	return []string{AcceptedBucket, AdmissionBucket, SchemaBucket, LedgerBucket, CancelledBucket, HandbackBucket, WorkersBucket}
}

// ErrNotDeclared is returned by Bind when the deployment's streams and
// buckets are not on the NATS server yet: a scheduler or ingest declares
// them as it starts.
var ErrNotDeclared = errors.New("harvest's streams are not declared on this NATS server")

// Bind looks up the topology a deployment declared, without changing it:
// its shard count, outcome TTL, replicas and storage stay as the services
// that own them (the scheduler and ingest, configured alike) declared
// them. Workers bind; they never declare.
func Bind(ctx context.Context, js jetstream.JetStream) (*Topology, error) {
	commands, err := js.Stream(ctx, CommandStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("bind stream %s: %w", CommandStream, ErrNotDeclared)
	}
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", CommandStream, err)
	}
	have := commands.CachedInfo().Config.Metadata[shardsMetadataKey]
	shards, err := strconv.Atoi(have)
	if err != nil || shards < 1 {
		return nil, fmt.Errorf("bind stream %s: it records shard count %q: redeclare it with a current scheduler", CommandStream, have)
	}
	tasks, err := js.Stream(ctx, TaskStream)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			err = ErrNotDeclared
		}
		return nil, fmt.Errorf("bind stream %s: %w", TaskStream, err)
	}
	names := bucketNames()
	buckets := make([]jetstream.KeyValue, len(names))
	for i, name := range names {
		if buckets[i], err = js.KeyValue(ctx, name); err != nil {
			if name == WorkersBucket && errors.Is(err, jetstream.ErrBucketNotFound) {
				// Declared by schedulers and ingest older than this
				// worker: it registers once they are upgraded.
				continue
			}
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				err = ErrNotDeclared
			}
			return nil, fmt.Errorf("bind bucket %s: %w", name, err)
		}
	}
	status, err := buckets[0].Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w", AcceptedBucket, err)
	}
	return &Topology{JS: js, Accepted: buckets[0], Admission: buckets[1], Schemas: buckets[2], Ledger: buckets[3], Cancelled: buckets[4],
		Handbacks: buckets[5], Workers: buckets[6], shards: shards, layout: placement.Single(shards), outcomeTTL: status.TTL(), commands: commands, tasks: tasks}, nil
}

// Shards is the number of logical shards of each store.
func (t *Topology) Shards() int { return t.shards }

// Layout is how the deployment spreads executions over its stores and
// their shards. A topology Bind looked up has a single store's: workers,
// which bind, route nothing by store (a task names its shard).
func (t *Topology) Layout() placement.Layout {
	if t.layout.Set == nil {
		return placement.Single(max(t.shards, 1))
	}
	return t.layout
}

func layoutOf(set *placement.Set, shards int) placement.Layout {
	if set == nil {
		return placement.Single(shards)
	}
	return placement.Layout{Set: set, Shards: shards}
}

// OutcomeTTL is how long a command's outcome stays readable.
func (t *Topology) OutcomeTTL() time.Duration { return t.outcomeTTL }
