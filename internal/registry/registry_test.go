package registry_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// declare declares a deployment whose registrations last ttl.
func declare(t *testing.T, ttl time.Duration) (jetstream.JetStream, *broker.Topology) {
	t.Helper()
	_, js := natstest.Connect(t, natstest.RunServer(t, natstest.Options{}))
	top, err := broker.Declare(natstest.Context(t), js, broker.Config{Shards: 1, WorkerTTL: ttl, MemoryStorage: true})
	require.NoError(t, err)
	return js, top
}

func serves(t *testing.T, x *registry.Index, name string) bool {
	t.Helper()
	ok, err := x.Serves(natstest.Context(t), registry.KindWorkflow, name, "default", time.Now())
	require.NoError(t, err)
	return ok
}

func lookup(t *testing.T, kv jetstream.KeyValue, kind, name, queue string) bool {
	t.Helper()
	ok, err := registry.Lookup(natstest.Context(t), kv, kind, name, queue, time.Now())
	require.NoError(t, err)
	return ok
}

// TestARegistrationHoldsWhileItsWorkerLivesAndGoesWhenItStops: Start
// registers at once (a look-up right after it finds the names, whatever
// the index has seen), per kind and task queue; Stop removes the keys,
// and the index follows.
func TestARegistrationHoldsWhileItsWorkerLivesAndGoesWhenItStops(t *testing.T) {
	t.Parallel()
	js, top := declare(t, 0)
	ctx := natstest.Context(t)
	x := registry.NewIndex(top.Workers, slog.New(slog.DiscardHandler))
	require.NoError(t, x.Start(ctx))
	t.Cleanup(x.Close)
	require.False(t, serves(t, x, "wf_a"))

	// Bound without the bucket: the registrar finds it by name.
	r := registry.NewRegistrar(registry.RegistrarConfig{JS: js, Worker: "w1", TaskQueue: "default",
		Workflows: []string{"wf_a"}, Activities: []string{"act_a"}})
	r.Start(ctx)
	require.True(t, serves(t, x, "wf_a"), "a start right after the worker started is not refused")
	require.True(t, lookup(t, top.Workers, registry.KindActivity, "act_a", "default"))
	require.False(t, lookup(t, top.Workers, registry.KindWorkflow, "act_a", "default"), "kinds are apart")
	require.False(t, lookup(t, top.Workers, registry.KindWorkflow, "wf_a", "other"), "task queues are apart")
	require.False(t, serves(t, x, "wf_b"))
	e, err := top.Workers.Get(ctx, registry.Key(registry.KindWorkflow, "wf_a", "default", "w1"))
	require.NoError(t, err)
	var ent registry.Entry
	require.NoError(t, json.Unmarshal(e.Value(), &ent))
	require.Equal(t, "w1", ent.Worker)
	require.WithinDuration(t, time.Now().Add(broker.DefaultWorkerTTL), ent.ExpiresAt, 5*time.Second)

	// A second worker of the same workflow: one stopping leaves it served.
	r2 := registry.NewRegistrar(registry.RegistrarConfig{KV: top.Workers, Worker: "w2", TaskQueue: "default", Workflows: []string{"wf_a"}})
	r2.Start(ctx)
	require.NoError(t, r.Stop(ctx))
	require.NoError(t, r.Stop(ctx), "safe twice")
	require.False(t, lookup(t, top.Workers, registry.KindActivity, "act_a", "default"), "a graceful stop removes the keys at once")
	require.True(t, lookup(t, top.Workers, registry.KindWorkflow, "wf_a", "default"))
	require.NoError(t, r2.Stop(ctx))
	require.False(t, lookup(t, top.Workers, registry.KindWorkflow, "wf_a", "default"))
	require.Eventually(t, func() bool { return !serves(t, x, "wf_a") }, 10*time.Second, 10*time.Millisecond,
		"the index follows the removal")
}

// TestARegistrationRenewsAndLapsesWhenItsWorkerVanishes: a live worker
// renews its keys every third of the TTL, so they outlive it; a worker
// that vanishes without stopping leaves keys that read as absent once
// their expiry passes, and age out of the bucket.
func TestARegistrationRenewsAndLapsesWhenItsWorkerVanishes(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond
	js, top := declare(t, ttl)
	ctx := natstest.Context(t)
	x := registry.NewIndex(top.Workers, slog.New(slog.DiscardHandler))
	require.NoError(t, x.Start(ctx))
	t.Cleanup(x.Close)
	key := registry.Key(registry.KindWorkflow, "wf_r", "default", "w1")

	r := registry.NewRegistrar(registry.RegistrarConfig{JS: js, KV: top.Workers, Worker: "w1", TaskQueue: "default", Workflows: []string{"wf_r"}})
	r.Start(ctx)
	first, err := top.Workers.Get(ctx, key)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := top.Workers.Get(ctx, key)
		return err == nil && e.Revision() > first.Revision()
	}, 10*time.Second, 20*time.Millisecond, "renewed within the TTL")
	require.NoError(t, r.Stop(ctx))

	// A vanished worker: its key is put, and never renewed nor removed.
	value, err := json.Marshal(registry.Entry{Worker: "w2", ExpiresAt: time.Now().Add(ttl)})
	require.NoError(t, err)
	_, err = top.Workers.Put(ctx, registry.Key(registry.KindWorkflow, "wf_v", "default", "w2"), value)
	require.NoError(t, err)
	require.True(t, serves(t, x, "wf_v"))
	require.Eventually(t, func() bool { return !serves(t, x, "wf_v") }, 10*time.Second, 20*time.Millisecond,
		"an expired registration reads as absent")
	require.Eventually(t, func() bool {
		_, err := top.Workers.Get(ctx, registry.Key(registry.KindWorkflow, "wf_v", "default", "w2"))
		return err != nil
	}, 10*time.Second, 50*time.Millisecond, "and ages out of the bucket")
}

// TestARegistrarWithoutItsBucketKeepsTrying: a worker bound to a
// deployment whose services do not declare the workers bucket yet runs,
// and registers once the bucket appears.
func TestARegistrarWithoutItsBucketKeepsTrying(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t, natstest.Options{}))
	ctx := natstest.Context(t)
	r := registry.NewRegistrar(registry.RegistrarConfig{JS: js, Worker: "w1", TaskQueue: "default", Workflows: []string{"wf_l"}})
	r.Start(ctx)
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return lookup(t, top.Workers, registry.KindWorkflow, "wf_l", "default") },
		10*time.Second, 20*time.Millisecond)
}
