package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/tracing"
	"github.com/harvest-engine/harvest/internal/wire"
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

// Defaults for Config's zero values.
const (
	DefaultShards     = 16
	DefaultDuplicates = 2 * time.Minute
	DefaultOutcomeTTL = 24 * time.Hour
	// DefaultWorkerTTL is how long a worker's registration lasts unrenewed;
	// workers renew theirs every third of it.
	DefaultWorkerTTL = 30 * time.Second
	// DefaultRetention is the scheduler's default retention of a closed
	// execution (scheduler.DefaultRetention): 7 days.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultCommandMaxBytes and DefaultTaskMaxBytes bound the command and
	// task streams: 1 GiB each.
	DefaultCommandMaxBytes int64 = 1 << 30
	DefaultTaskMaxBytes    int64 = 1 << 30
	// MinStreamMaxBytes is the least max bytes a stream may be given: more
	// than the largest message NATS carries by default (1 MiB), so that a
	// large command is refused as too large, never as a full stream.
	MinStreamMaxBytes int64 = 4 << 20
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

// Config describes the topology. Zero values mean the documented defaults.
type Config struct {
	// Shards is the number of logical shards of the command stream,
	// default 16. It is fixed for a deployment's life.
	Shards int
	// Duplicates is the window in which JetStream drops a message whose
	// Nats-Msg-Id it has seen, default 2 minutes.
	Duplicates time.Duration
	// OutcomeTTL is how long command outcomes stay readable, default 24h;
	// at least Duplicates, since after the broker's window a redelivered
	// webhook is recognised by its outcome. Outcomes are PostgreSQL rows
	// (store.GetOutcome), deleted once expired; the accepted and cancelled
	// buckets keep their keys this long too.
	OutcomeTTL time.Duration
	// WorkerTTL is how long a worker's registration of the workflows and
	// activities it serves lasts unless renewed, default 30 s, at least
	// 1 s: the max age of the workers bucket. Workers read it from the
	// bucket and renew every third of it.
	WorkerTTL time.Duration
	// Replicas of each stream and bucket, default 1. A stream or bucket
	// declared with another count is changed in place; the consumers that
	// do not set their own follow their stream.
	Replicas int
	// Retention is the deployment's retention of closed executions,
	// default 7 days (DefaultRetention), at least 1 s: the max age of the
	// effect ledger's entries and of the task stream's messages. A
	// ledger entry is written again each time an activity attempt finds
	// it (harvest.Once), so it lives Retention after its last use:
	// attempts of one activity invocation come while its execution runs,
	// minutes apart under any usual retry policy, so an effect is
	// remembered for as long as anything can ask for it again, and no
	// longer than its closed execution is kept. A task older than
	// Retention is past any use (the scheduler has dispatched a lost
	// workflow task again at its deadline, and retried a lost activity
	// attempt at its start-to-close timeout) unless an activity's
	// start-to-close is longer; only a queue no worker serves, or
	// workers away that long, lets a task get so old.
	Retention time.Duration
	// CommandMaxBytes bounds the command stream, default 1 GiB, at least
	// MinStreamMaxBytes. The stream is a work queue that the schedulers
	// drain; it fills only while they do not apply commands (PostgreSQL
	// down, schedulers stopped). Full, it refuses new commands
	// (ErrStreamFull): ingest answers 503 and a worker keeps its result
	// and tries again, and nothing already accepted is dropped.
	CommandMaxBytes int64
	// TaskMaxBytes bounds the task stream, default 1 GiB, at least
	// MinStreamMaxBytes. It fills while workers do not take tasks (none
	// running, or a queue none serves). Full, it refuses new tasks: the
	// scheduler keeps them in its outbox and publishes them again.
	TaskMaxBytes int64
	// MemoryStorage keeps streams in memory (tests only); default file.
	MemoryStorage bool
	// Stores are the deployment's PostgreSQL stores, each with Shards
	// shards of the command stream (placement.Layout); nil is one store.
	Stores *placement.Set
}

func (c Config) withDefaults() Config {
	c.Shards = cmp.Or(c.Shards, DefaultShards)
	c.Duplicates = cmp.Or(c.Duplicates, DefaultDuplicates)
	c.OutcomeTTL = cmp.Or(c.OutcomeTTL, DefaultOutcomeTTL)
	c.WorkerTTL = cmp.Or(c.WorkerTTL, DefaultWorkerTTL)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.CommandMaxBytes = cmp.Or(c.CommandMaxBytes, DefaultCommandMaxBytes)
	c.TaskMaxBytes = cmp.Or(c.TaskMaxBytes, DefaultTaskMaxBytes)
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Shards < 1 || c.Shards > 4096:
		return fmt.Errorf("streams config: Shards %d: want 1..4096", c.Shards)
	case c.Duplicates < time.Second:
		return fmt.Errorf("streams config: Duplicates %s: want at least 1s", c.Duplicates)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("streams config: Replicas %d: want 1..5", c.Replicas)
	case c.WorkerTTL < time.Second:
		return fmt.Errorf("streams config: WorkerTTL %s: want at least 1s", c.WorkerTTL)
	case c.OutcomeTTL < c.Duplicates:
		return fmt.Errorf("streams config: OutcomeTTL %s: want at least the duplicate window (%s)", c.OutcomeTTL, c.Duplicates)
	case c.Retention < time.Second:
		return fmt.Errorf("streams config: Retention %s: want at least 1s", c.Retention)
	case c.Retention < c.Duplicates:
		// The task stream's duplicate window may not exceed its max age.
		return fmt.Errorf("streams config: Retention %s: want at least the duplicate window (%s)", c.Retention, c.Duplicates)
	case c.CommandMaxBytes < MinStreamMaxBytes:
		return fmt.Errorf("streams config: CommandMaxBytes %d: want at least %d", c.CommandMaxBytes, MinStreamMaxBytes)
	case c.TaskMaxBytes < MinStreamMaxBytes:
		return fmt.Errorf("streams config: TaskMaxBytes %d: want at least %d", c.TaskMaxBytes, MinStreamMaxBytes)
	}
	return nil
}

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
	_, err = ensureStream(ctx, js, jetstream.StreamConfig{
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
		Handbacks: buckets[5], Workers: buckets[6], shards: cfg.Shards, layout: layoutOf(cfg.Stores, cfg.Shards), outcomeTTL: cfg.OutcomeTTL, commands: commands}, nil
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
	if _, err := js.Stream(ctx, TaskStream); err != nil {
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
		Handbacks: buckets[5], Workers: buckets[6], shards: shards, layout: placement.Single(shards), outcomeTTL: status.TTL(), commands: commands}, nil
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

// CommandSubject is the subject of a command of kind for shard:
// harvest.cmd.<shard>.<kind>.
func CommandSubject(shard int, kind string) string {
	return "harvest.cmd." + strconv.Itoa(shard) + "." + kind
}

// CommandFilter matches every command of one shard.
func CommandFilter(shard int) string {
	return "harvest.cmd." + strconv.Itoa(shard) + ".>"
}

// TaskSubject is the subject tasks of kind on a task queue had before
// they were routed by name: harvest.task.<queue>.<kind>. Schedulers
// publish to NameTaskSubject; workers still drain this subject, for tasks
// an older scheduler wrote.
func TaskSubject(queue, kind string) string {
	return "harvest.task." + queue + "." + kind
}

// NameTaskSubject is the subject of a task of kind (wire.TaskWorkflow,
// wire.TaskActivity) for the workflow or activity name on a task queue:
// harvest.task.<queue>.<kind>.<name>. Only the workers that register name
// on queue consume it. Queue and names are validated by
// dedup.ValidateName, so they are safe subject tokens.
func NameTaskSubject(queue, kind, name string) string {
	return "harvest.task." + queue + "." + kind + "." + name
}

// TaskKind is the kind of task (wire.TaskWorkflow, wire.TaskActivity) a
// task subject, routed by name or not, carries; false for a subject that
// is no task's.
func TaskKind(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, "harvest.task.")
	if !ok {
		return "", false
	}
	tokens := strings.Split(rest, ".")
	if len(tokens) != 2 && len(tokens) != 3 {
		return "", false
	}
	return tokens[1], true
}

// TaskQueueFilter matches every task of a task queue, by name or not.
func TaskQueueFilter(queue string) string {
	return "harvest.task." + queue + ".>"
}

// OutcomeSubject is the core NATS subject on which the scheduler announces
// a command's outcome once the transaction that stored it has committed:
// harvest.outcome.<command_id>. Nothing stores these messages; a reader
// that missed one reads the outcome from PostgreSQL.
func OutcomeSubject(commandID string) string {
	return outcomePrefix + commandID
}

const outcomePrefix = "harvest.outcome."

// CancelledSubject is the put subject announcing a cancelled execution.
func CancelledSubject(executionID string) string {
	return "$KV." + CancelledBucket + "." + executionID
}

// OutcomeSubjects matches every outcome announcement.
const OutcomeSubjects = outcomePrefix + ">"

// OutcomeCommandID returns the command id of an outcome subject.
func OutcomeCommandID(subject string) string {
	if len(subject) > len(outcomePrefix) && subject[:len(outcomePrefix)] == outcomePrefix {
		return subject[len(outcomePrefix):]
	}
	return ""
}

// PruneSubject is the core NATS subject on which ingest asks every
// scheduler to prune now (POST /api/harvest/retention/prune): each one
// subscribes, wakes its pruner for the shards it holds, and answers the
// request, so that ingest knows at least one heard it. Nothing stores
// these messages: a scheduler that misses one prunes at its next interval.
const PruneSubject = "harvest.retention.prune"

// PublishCommand publishes cmd on its shard with Nats-Msg-Id set to its
// command id. After a lost PubAck it publishes again, with the same id,
// until an acknowledgement (duplicate or not) arrives or ctx ends. The
// returned PubAck says whether the broker had already seen the id
// (Duplicate), and its Sequence is the stream sequence of the message that
// holds the command.
func (t *Topology) PublishCommand(ctx context.Context, shard int, cmd *wire.Command) (*jetstream.PubAck, error) {
	return t.PublishCommandAs(ctx, shard, cmd, cmd.CommandID)
}

// ReportDuplicate publishes d, a duplicate caught outside the scheduler
// (a broker duplicate, a replay answered from a claim), on the shard of
// the command it duplicated, under a fresh id, so that the scheduler
// counts it after that command. A nil d publishes nothing.
func (t *Topology) ReportDuplicate(ctx context.Context, shard int, d *wire.DuplicateCommand) error {
	if d == nil {
		return nil
	}
	_, err := t.PublishCommand(ctx, shard, &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindDuplicate, Duplicate: d})
	return err
}

// PublishCommandAs is PublishCommand with an explicit Nats-Msg-Id, for
// publishing a command again when the broker's memory of its id outlives
// the command's meaning (a start whose idempotency claim has expired).
func (t *Topology) PublishCommandAs(ctx context.Context, shard int, cmd *wire.Command, msgID string) (*jetstream.PubAck, error) {
	data, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command %s: %w", cmd.CommandID, err)
	}
	subject := CommandSubject(shard, cmd.Kind)
	headroom := 128
	if t.Tracing.Enabled() {
		headroom += 128 // traceparent and tracestate
	}
	if limit := t.JS.Conn().MaxPayload(); limit > 0 && int64(len(data)+len(msgID)+headroom) > limit {
		// The server refuses it whatever we do.
		return nil, fmt.Errorf("publish command %s to %s: %w", cmd.CommandID, subject, &TooLargeError{Size: len(data), Limit: limit})
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	t.Tracing.Inject(ctx, msg.Header)
	backoff := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		ack, err := t.JS.PublishMsg(actx, msg, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(CommandStream))
		cancel()
		if err == nil {
			return ack, nil
		}
		if streamFull(err) {
			return nil, fmt.Errorf("publish command %s to %s: %w: %w", cmd.CommandID, subject, ErrStreamFull, err)
		}
		if ctx.Err() != nil || !retryablePublishError(err) {
			return nil, fmt.Errorf("publish command %s to %s: %w", cmd.CommandID, subject, err)
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("publish command %s to %s: %w", cmd.CommandID, subject, errors.Join(err, ctx.Err()))
		case <-timer.C:
		}
		backoff = min(backoff*2, time.Second)
	}
}

// ErrStreamFull is matched (errors.Is) by the error of a publish the
// stream refused because it holds its max bytes (Config.CommandMaxBytes):
// the schedulers have not been applying commands for a while. Nothing was
// stored; the same publish succeeds once they drain the stream. It is
// returned at once, not tried again until the context ends: ingest
// answers 503 at once, and a worker waits on its own terms.
var ErrStreamFull = errors.New("the stream is full: it holds its max bytes")

// errCodeStoreFailed is JetStream's answer to a message it did not store;
// its description says why ("maximum bytes exceeded").
const errCodeStoreFailed jetstream.ErrorCode = 10077

// streamFull says whether err is a stream's refusal of a message for its
// max bytes or max messages (DiscardNew).
func streamFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed &&
		(strings.Contains(apiErr.Description, "maximum bytes exceeded") || strings.Contains(apiErr.Description, "maximum messages exceeded"))
}

// TooLargeError says a message is larger than the NATS server carries
// (its max_payload, 1 MiB by default). It matches nats.ErrMaxPayload.
type TooLargeError struct {
	Size  int
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("message of %d bytes exceeds the server's max payload of %d", e.Size, e.Limit)
}

func (e *TooLargeError) Is(target error) bool { return target == nats.ErrMaxPayload }

// ClientOptions are the options every Harvest connection to NATS uses:
// reconnect forever, and hold no publishes while disconnected. A publish
// then fails at once and PublishCommand tries it again until its context
// ends, so a caller that gives up (ingest answering 503) has published
// nothing that a buffer could still send after its answer.
//
// Disconnections, reconnections and asynchronous errors (a slow consumer
// whose messages were dropped) go to log: each can delay work by a
// consumer's ack wait, and would otherwise leave no trace.
func ClientOptions(name string, log *slog.Logger) []nats.Option {
	log = log.With("nats_connection", name)
	return []nats.Option{
		nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats: disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Warn("nats: reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("nats: asynchronous error", "subject", subject, "err", err)
		}),
	}
}

// publishAttemptTimeout bounds one publish attempt, so a lost PubAck is
// retried instead of using up the caller's whole deadline.
const publishAttemptTimeout = 2 * time.Second

// retryablePublishError says whether publishing again with the same message
// id may succeed: a lost or late acknowledgement, no JetStream responder
// yet, or a replicated stream's "duplicate message id is in process".
func retryablePublishError(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == 10158
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoStreamResponse) || isTimeout(err) ||
		// Disconnected: the connection holds no publishes while it
		// reconnects (see ClientOptions), so the publish is tried again.
		errors.Is(err, nats.ErrReconnectBufExceeded)
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// CommandGone says whether the command stream no longer holds its
// message at seq. The streams are work queues: a command leaves its stream
// when the scheduler acknowledges it, after the transaction that applied
// it (and stored its outcome) committed. A message gone without an
// outcome was lost unapplied.
func (t *Topology) CommandGone(ctx context.Context, seq uint64) (bool, error) {
	_, err := t.commands.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up command %d in %s: %w", seq, CommandStream, err)
	}
	return false, nil
}

// MarkAccepted records that a command was accepted and answered before its
// outcome was known. It never fails the caller's request: the mark only
// lets a poll answer "accepted" rather than "unknown" until the outcome is
// stored.
func (t *Topology) MarkAccepted(ctx context.Context, commandID string) error {
	if _, err := t.Accepted.Create(ctx, commandID, nil); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("mark command %s accepted: %w", commandID, err)
	}
	return nil
}

// WasAccepted says whether MarkAccepted recorded commandID (within the
// outcome TTL).
func (t *Topology) WasAccepted(ctx context.Context, commandID string) (bool, error) {
	_, err := t.Accepted.Get(ctx, commandID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read accepted mark of command %s: %w", commandID, err)
	}
	return true, nil
}
