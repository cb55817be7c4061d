package broker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// limits are what bounds one stream, as docs/architecture.md's "Streams
// and buckets" table documents them.
type limits struct {
	workQueue  bool
	maxAge     time.Duration
	maxBytes   int64 // -1: none
	perSubject int64 // -1: any number (the streams); 1: a bucket's history
}

// keyedByName are the buckets whose keys are workflow names, not
// commands, executions or activities: they never expire, and are bounded
// in bytes instead.
var keyedByName = map[string]bool{"KV_" + broker.AdmissionBucket: true, "KV_" + broker.SchemaBucket: true}

// wantLimits are the limits Declare gives each stream under cfg (with its
// defaults applied).
func wantLimits(cfg broker.Config) map[string]limits {
	return map[string]limits{
		broker.CommandStream:           {workQueue: true, maxBytes: cfg.CommandMaxBytes, perSubject: -1},
		broker.TaskStream:              {workQueue: true, maxAge: cfg.Retention, maxBytes: cfg.TaskMaxBytes, perSubject: -1},
		"KV_" + broker.AcceptedBucket:  {maxAge: cfg.OutcomeTTL, maxBytes: -1, perSubject: 1},
		"KV_" + broker.AdmissionBucket: {maxBytes: broker.AdmissionMaxBytes, perSubject: 1},
		"KV_" + broker.SchemaBucket:    {maxBytes: broker.SchemaMaxBytes, perSubject: 1},
		"KV_" + broker.LedgerBucket:    {maxAge: cfg.Retention, maxBytes: -1, perSubject: 1},
		"KV_" + broker.CancelledBucket: {maxAge: cfg.OutcomeTTL, maxBytes: -1, perSubject: 1},
		"KV_" + broker.HandbackBucket:  {maxAge: cfg.OutcomeTTL, maxBytes: -1, perSubject: 1},
		"KV_" + broker.WorkersBucket:   {maxAge: cfg.WorkerTTL, maxBytes: -1, perSubject: 1},
	}
}

// requireBounded lists the streams on the server, so that one added later
// is checked too, and requires of each that it be bounded: its messages
// leave when consumed (work-queue or interest retention) or expire (max
// age), or, for a bucket keyed by workflow name, it has max bytes; and
// that its limits be the documented ones, want.
func requireBounded(ctx context.Context, t *testing.T, js jetstream.JetStream, want map[string]limits) {
	t.Helper()
	seen := map[string]bool{}
	for info := range js.ListStreams(ctx).Info() {
		c := info.Config
		seen[c.Name] = true
		consumed := c.Retention == jetstream.WorkQueuePolicy || c.Retention == jetstream.InterestPolicy
		switch {
		case consumed || c.MaxAge > 0:
		case keyedByName[c.Name]:
			require.Positive(t, c.MaxBytes, "%s never expires its keys: it needs max bytes", c.Name)
			require.EqualValues(t, 1, c.MaxMsgsPerSubject, "%s keeps one value a key", c.Name)
		default:
			t.Errorf("stream %s is unbounded: no max age, and its messages do not leave when consumed (retention %s)", c.Name, c.Retention)
		}
		if c.MaxBytes > 0 {
			require.Equal(t, jetstream.DiscardNew, c.Discard, "%s: full, it must refuse new messages, never drop old ones", c.Name)
		}
		w, ok := want[c.Name]
		if !ok {
			t.Errorf("stream %s has no documented limits: add it to wantLimits and docs/architecture.md", c.Name)
			continue
		}
		got := limits{workQueue: c.Retention == jetstream.WorkQueuePolicy, maxAge: c.MaxAge, maxBytes: c.MaxBytes, perSubject: c.MaxMsgsPerSubject}
		require.Equal(t, w, got, "limits of %s", c.Name)
	}
	for name := range want {
		require.True(t, seen[name], "stream %s was not declared", name)
	}
}

// defaults is broker.Config's zero value with its documented defaults.
func defaults() broker.Config {
	return broker.Config{Shards: broker.DefaultShards, OutcomeTTL: broker.DefaultOutcomeTTL, WorkerTTL: broker.DefaultWorkerTTL,
		Retention: broker.DefaultRetention, CommandMaxBytes: broker.DefaultCommandMaxBytes, TaskMaxBytes: broker.DefaultTaskMaxBytes}
}

func TestEveryStreamAndBucketIsBounded(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)

	_, err := broker.Declare(ctx, js, broker.Config{})
	require.NoError(t, err)
	requireBounded(ctx, t, js, wantLimits(defaults()))

	// Declared again with other values, the limits change in place.
	cfg := broker.Config{Shards: broker.DefaultShards, OutcomeTTL: 3 * time.Hour, WorkerTTL: 10 * time.Second,
		Retention: 48 * time.Hour, CommandMaxBytes: 8 << 20, TaskMaxBytes: 16 << 20}
	_, err = broker.Declare(ctx, js, cfg)
	require.NoError(t, err)
	requireBounded(ctx, t, js, wantLimits(cfg))
}

func TestTheLimitsAreValidated(t *testing.T) {
	require.ErrorContains(t, broker.Config{Retention: time.Second / 2}.Validate(), "Retention 500ms")
	require.ErrorContains(t, broker.Config{Retention: time.Minute}.Validate(), "duplicate window")
	require.ErrorContains(t, broker.Config{CommandMaxBytes: 1 << 20}.Validate(), "CommandMaxBytes 1048576")
	require.ErrorContains(t, broker.Config{TaskMaxBytes: 1 << 20}.Validate(), "TaskMaxBytes 1048576")
	require.NoError(t, broker.Config{Retention: time.Second, Duplicates: time.Second, OutcomeTTL: time.Second,
		CommandMaxBytes: broker.MinStreamMaxBytes, TaskMaxBytes: broker.MinStreamMaxBytes}.Validate())
}

// TestPerExecutionStateExpires: the buckets keyed by command, execution
// or activity, and the task stream, lose what they hold after their max
// age, with nobody deleting it.
func TestPerExecutionStateExpires(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	const ttl = 2 * time.Second
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, Duplicates: time.Second, OutcomeTTL: ttl, Retention: ttl, WorkerTTL: ttl})
	require.NoError(t, err)

	require.NoError(t, top.MarkAccepted(ctx, "c-1"))
	buckets := map[string]jetstream.KeyValue{
		broker.LedgerBucket: top.Ledger, broker.CancelledBucket: top.Cancelled,
		broker.HandbackBucket: top.Handbacks, broker.WorkersBucket: top.Workers,
	}
	for _, kv := range buckets {
		_, err := kv.Put(ctx, "k-1", []byte("x"))
		require.NoError(t, err)
	}
	buckets[broker.AcceptedBucket] = top.Accepted
	keys := map[string]string{broker.AcceptedBucket: "c-1"}
	// A task for a queue no worker serves.
	require.NoError(t, nc.Publish(broker.TaskSubject("abandoned", wire.TaskActivity), []byte(`{}`)))
	tasks, err := js.Stream(ctx, broker.TaskStream)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := tasks.Info(ctx)
		return err == nil && info.State.Msgs == 1
	}, 5*time.Second, 10*time.Millisecond, "the task is stored")

	// Admission gates and schemas are keyed by workflow name: they stay.
	_, err = top.Admission.Put(ctx, "wf", []byte(`{"state":"closed"}`))
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		for name, kv := range buckets {
			if _, err := kv.Get(ctx, cmp.Or(keys[name], "k-1")); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return false
			}
		}
		info, err := tasks.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, 10*ttl, 100*time.Millisecond, "every per-execution key and the task expire")
	ok, err := top.WasAccepted(ctx, "c-1")
	require.NoError(t, err)
	require.False(t, ok)
	_, err = top.Admission.Get(ctx, "wf")
	require.NoError(t, err, "an admission gate does not expire")
}

// oldDeclare declares the topology as Declare did before the streams had
// limits: the command and task streams unbounded but for their work-queue
// retention, the ledger, admission and schema buckets without limits.
func oldDeclare(ctx context.Context, t *testing.T, js jetstream.JetStream) {
	t.Helper()
	for _, c := range []jetstream.StreamConfig{
		{Name: broker.CommandStream, Subjects: []string{"harvest.cmd.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
			Replicas: 1, Duplicates: broker.DefaultDuplicates, Metadata: map[string]string{"harvest_shards": "2"}},
		{Name: broker.TaskStream, Subjects: []string{"harvest.task.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
			Replicas: 1, Duplicates: broker.DefaultDuplicates},
	} {
		_, err := js.CreateStream(ctx, c)
		require.NoError(t, err)
	}
	for _, b := range []jetstream.KeyValueConfig{
		{Bucket: broker.AcceptedBucket, TTL: broker.DefaultOutcomeTTL},
		{Bucket: broker.AdmissionBucket},
		{Bucket: broker.SchemaBucket},
		{Bucket: broker.LedgerBucket},
		{Bucket: broker.CancelledBucket, TTL: broker.DefaultOutcomeTTL},
		{Bucket: broker.HandbackBucket, TTL: broker.DefaultOutcomeTTL},
		{Bucket: broker.WorkersBucket, TTL: broker.DefaultWorkerTTL},
	} {
		b.History, b.Storage, b.Replicas = 1, jetstream.FileStorage, 1
		_, err := js.CreateKeyValue(ctx, b)
		require.NoError(t, err)
	}
}

// TestDeclareBoundsAnExistingDeploymentInPlace: a deployment declared
// before the limits gets them from the next Declare, which keeps what its
// streams and buckets hold (except what is older than its new max age)
// and the command stream itself (the scheduler tells a recreated one by
// its creation time).
func TestDeclareBoundsAnExistingDeploymentInPlace(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	oldDeclare(ctx, t, js)
	old, err := broker.Bind(ctx, js)
	require.NoError(t, err)
	cmd := &wire.Command{CommandID: "c-old", Kind: wire.KindStart, Start: &wire.StartCommand{WorkflowName: "w", WorkflowID: "x", TaskQueue: "default"}}
	_, err = old.PublishCommand(ctx, 1, cmd)
	require.NoError(t, err)
	require.NoError(t, nc.Publish(broker.TaskSubject("default", wire.TaskActivity), []byte(`{}`)))
	_, err = old.Ledger.Put(ctx, "effect", []byte(`{"state":"done"}`))
	require.NoError(t, err)
	_, err = old.Admission.Put(ctx, "wf", []byte(`{"state":"closed"}`))
	require.NoError(t, err)
	st, err := js.Stream(ctx, broker.CommandStream)
	require.NoError(t, err)
	created := st.CachedInfo().Created

	cfg := broker.Config{Shards: 2}
	top, err := broker.Declare(ctx, js, cfg)
	require.NoError(t, err)
	want := defaults()
	want.Shards = 2
	requireBounded(ctx, t, js, wantLimits(want))

	st, err = js.Stream(ctx, broker.CommandStream)
	require.NoError(t, err)
	require.True(t, created.Equal(st.CachedInfo().Created), "the command stream is updated, not recreated")
	require.EqualValues(t, 1, st.CachedInfo().State.Msgs, "the command it held is kept")
	tasks, err := js.Stream(ctx, broker.TaskStream)
	require.NoError(t, err)
	require.EqualValues(t, 1, tasks.CachedInfo().State.Msgs, "the task it held is kept")
	_, err = top.Ledger.Get(ctx, "effect")
	require.NoError(t, err, "a recent ledger entry is kept")
	_, err = top.Admission.Get(ctx, "wf")
	require.NoError(t, err)
	// And the upgraded deployment still deduplicates within the window.
	ack, err := top.PublishCommand(ctx, 1, cmd)
	require.NoError(t, err)
	require.True(t, ack.Duplicate)
}

// TestAFullCommandStreamRefusesNewCommandsAndKeepsTheOthers: past its max
// bytes the command stream refuses a publish at once (ErrStreamFull,
// which ingest answers 503), keeps every command it accepted, and takes
// commands again once the scheduler has consumed some.
func TestAFullCommandStreamRefusesNewCommandsAndKeepsTheOthers(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, CommandMaxBytes: broker.MinStreamMaxBytes, MemoryStorage: true})
	require.NoError(t, err)

	input, err := json.Marshal(strings.Repeat("x", 256<<10))
	require.NoError(t, err)
	command := func(i int) *wire.Command {
		return &wire.Command{CommandID: fmt.Sprintf("c-%d", i), Kind: wire.KindStart,
			Start: &wire.StartCommand{WorkflowName: "w", WorkflowID: fmt.Sprintf("x-%d", i), TaskQueue: "default", Input: input}}
	}
	accepted := 0
	var full error
	for i := range 100 {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		began := time.Now()
		_, err := top.PublishCommand(pctx, 0, command(i))
		cancel()
		if err != nil {
			full = err
			require.Less(t, time.Since(began), 10*time.Second, "a full stream is not waited on")
			break
		}
		accepted++
	}
	require.ErrorIs(t, full, broker.ErrStreamFull)
	require.ErrorContains(t, full, "maximum bytes exceeded", "JetStream's own answer")
	require.Positive(t, accepted)
	st, err := js.Stream(ctx, broker.CommandStream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, accepted, info.State.Msgs, "no accepted command was dropped")
	require.EqualValues(t, 1, info.State.FirstSeq)
	require.LessOrEqual(t, info.State.Bytes, uint64(broker.MinStreamMaxBytes))

	// The scheduler consumes (acknowledges) the oldest: room again.
	cons, err := js.CreateConsumer(ctx, broker.CommandStream, jetstream.ConsumerConfig{Durable: "drain", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err := cons.Fetch(2)
	require.NoError(t, err)
	for m := range batch.Messages() {
		require.NoError(t, m.DoubleAck(ctx))
	}
	require.NoError(t, batch.Error())
	_, err = top.PublishCommand(ctx, 0, command(accepted))
	require.NoError(t, err)
}

// TestDeclareSaysWhichMaxBytesDoNotFit: a NATS server whose JetStream
// cannot reserve the streams' max bytes refuses the declaration, and
// DeclareRetrying gives up at once, naming the key to lower.
func TestDeclareSaysWhichMaxBytesDoNotFit(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{Configure: func(o *server.Options) { o.JetStreamMaxStore = 256 << 20 }})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)

	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := broker.DeclareRetrying(rctx, js, broker.Config{Shards: 1}, nil)
	require.ErrorIs(t, err, broker.ErrInsufficientStorage)
	require.NoError(t, rctx.Err(), "not retried until the context ends")
	require.ErrorContains(t, err, "stream HARVEST_CMD")
	require.ErrorContains(t, err, "lower nats_command_stream_max_bytes")
	require.ErrorContains(t, err, "insufficient storage resources", "JetStream's own answer")
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr))

	_, err = broker.Declare(ctx, js, broker.Config{Shards: 1, CommandMaxBytes: 64 << 20, TaskMaxBytes: 64 << 20})
	require.NoError(t, err, "smaller streams fit")
}
