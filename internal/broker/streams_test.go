package broker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDeclareIsIdempotentAndKeepsTheShardCount(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)

	n, err := broker.DeployedShards(ctx, js)
	require.NoError(t, err)
	require.Zero(t, n, "nothing deployed yet")
	top, err := broker.Declare(ctx, js, broker.Config{})
	require.NoError(t, err)
	require.Equal(t, broker.DefaultShards, top.Shards())
	n, err = broker.DeployedShards(ctx, js)
	require.NoError(t, err)
	require.Equal(t, broker.DefaultShards, n)
	_, err = broker.Declare(ctx, js, broker.Config{})
	require.NoError(t, err, "declaring again changes nothing")

	_, err = broker.Declare(ctx, js, broker.Config{Shards: 8})
	require.ErrorIs(t, err, broker.ErrShardMismatch)

	_, err = broker.Declare(ctx, js, broker.Config{Shards: -1})
	require.ErrorContains(t, err, "Shards")
}

func TestBindFindsWhatTheDeploymentDeclaredAndChangesNothing(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)

	_, err := broker.Bind(ctx, js)
	require.ErrorIs(t, err, broker.ErrNotDeclared)

	declared, err := broker.Declare(ctx, js, broker.Config{Shards: 4, OutcomeTTL: 3 * time.Hour})
	require.NoError(t, err)
	top, err := broker.Bind(ctx, js)
	require.NoError(t, err)
	require.Equal(t, 4, top.Shards())
	require.Equal(t, 3*time.Hour, top.OutcomeTTL())

	// What a bound topology publishes lands on the declared stream.
	cmd := &wire.Command{CommandID: "c-bound", Kind: wire.KindStart, Start: &wire.StartCommand{WorkflowName: "w", WorkflowID: "x", TaskQueue: "default"}}
	ack, err := top.PublishCommand(ctx, 3, cmd)
	require.NoError(t, err)
	again, err := declared.PublishCommand(ctx, 3, cmd)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, ack.Sequence, again.Sequence)

	// A bucket gone is reported, not re-created.
	require.NoError(t, js.DeleteKeyValue(ctx, broker.HandbackBucket))
	_, err = broker.Bind(ctx, js)
	require.ErrorIs(t, err, broker.ErrNotDeclared)
	_, err = js.KeyValue(ctx, broker.HandbackBucket)
	require.ErrorIs(t, err, jetstream.ErrBucketNotFound)
}

func TestPublishCommandIsDeduplicatedByTheBroker(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 4})
	require.NoError(t, err)

	cmd := &wire.Command{CommandID: "c-1", Kind: wire.KindStart, Start: &wire.StartCommand{WorkflowName: "w", WorkflowID: "x", TaskQueue: "default"}}
	first, err := top.PublishCommand(ctx, 2, cmd)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	again, err := top.PublishCommand(ctx, 2, cmd)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.Sequence, again.Sequence, "a duplicate reports the original's sequence")

	info, err := js.Stream(ctx, broker.CommandStream)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.CachedInfo().State.Msgs)
	require.Equal(t, "harvest.cmd.2.start", broker.CommandSubject(2, wire.KindStart))
	require.Equal(t, "harvest.task.default.activity", broker.TaskSubject("default", wire.TaskActivity))
	require.Equal(t, "c-1", broker.OutcomeCommandID(broker.OutcomeSubject("c-1")))
	// A build id may hold '.': its subject token is a hash of it.
	pinned := broker.PinnedTaskSubject("default", "charge", "v1.2.0+abc")
	require.Regexp(t, `^harvest\.task\.default\.workflow\.charge\.b[0-9a-f]{16}$`, pinned)
	require.NotEqual(t, pinned, broker.PinnedTaskSubject("default", "charge", "v1.2.1+abc"))
	kind, ok := broker.TaskKind(pinned)
	require.True(t, ok)
	require.Equal(t, wire.TaskWorkflow, kind)
}

func TestOutcomeTTLOutlivesTheDuplicateWindow(t *testing.T) {
	require.NoError(t, broker.Config{}.Validate())
	require.NoError(t, broker.Config{OutcomeTTL: broker.DefaultDuplicates}.Validate())
	require.ErrorContains(t, broker.Config{OutcomeTTL: time.Minute}.Validate(), "OutcomeTTL 1m0s")
	require.ErrorContains(t, broker.Config{OutcomeTTL: time.Hour, Duplicates: 2 * time.Hour}.Validate(), "duplicate window")
}

func TestDeclareSetsTheOutcomeTTL(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, OutcomeTTL: 10 * time.Minute})
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute, top.OutcomeTTL())
	st, err := top.Accepted.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute, st.TTL())
	// A later declaration with another TTL updates the bucket.
	top, err = broker.Declare(ctx, js, broker.Config{Shards: 1, OutcomeTTL: time.Hour})
	require.NoError(t, err)
	st, err = top.Accepted.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, time.Hour, st.TTL())
}

func TestDeclareDeletesTheRetiredOutcomeBucket(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "HARVEST_OUTCOMES"})
	require.NoError(t, err)
	_, err = broker.Declare(ctx, js, broker.Config{Shards: 1})
	require.NoError(t, err)
	_, err = js.KeyValue(ctx, "HARVEST_OUTCOMES")
	require.ErrorIs(t, err, jetstream.ErrBucketNotFound)
}

func TestAcceptedMarks(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1})
	require.NoError(t, err)
	ok, err := top.WasAccepted(ctx, "c-1")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, top.MarkAccepted(ctx, "c-1"))
	require.NoError(t, top.MarkAccepted(ctx, "c-1"), "marking twice is no error")
	ok, err = top.WasAccepted(ctx, "c-1")
	require.NoError(t, err)
	require.True(t, ok)
}

// TestACommandStreamKeepsItsCreationTimeAcrossRestarts: the scheduler
// tells a recreated command stream from a restarted one by its creation
// time (store.BindShardStream), so a restart must not change it.
func TestACommandStreamKeepsItsCreationTimeAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	ns := natstest.RunServer(t, natstest.Options{StoreDir: dir})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := broker.Declare(ctx, js, broker.Config{Shards: 1})
	require.NoError(t, err)
	s, err := js.Stream(ctx, broker.CommandStream)
	require.NoError(t, err)
	created := s.CachedInfo().Created
	ns.Shutdown()
	ns.WaitForShutdown()

	ns = natstest.RunServer(t, natstest.Options{StoreDir: dir})
	_, js = natstest.Connect(t, ns)
	_, err = broker.Declare(ctx, js, broker.Config{Shards: 1})
	require.NoError(t, err)
	s, err = js.Stream(ctx, broker.CommandStream)
	require.NoError(t, err)
	require.True(t, created.Equal(s.CachedInfo().Created), "created %s, after a restart %s", created, s.CachedInfo().Created)
}
