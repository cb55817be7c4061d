package registry_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// TestAWorkerSaysWhoItIsAndHowBusy: a started worker's record tells its
// id, host, pid, build, start, task queue, the names it registered, the
// workflows its replay check refused and the load its hook reports,
// renewed with the registrations (a new load and a later heartbeat); Stop
// removes it with them. The index passes the record by, and a reader of
// the name keys' values decodes it.
func TestAWorkerSaysWhoItIsAndHowBusy(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond
	js, top := declare(t, ttl)
	ctx := natstest.Context(t)
	x := registry.NewIndex(top.Workers, slog.New(slog.DiscardHandler))
	require.NoError(t, x.Start(ctx))
	t.Cleanup(x.Close)

	var used atomic.Int64
	used.Store(1)
	before := time.Now()
	r := registry.NewRegistrar(registry.RegistrarConfig{JS: js, Worker: "w1", TaskQueue: "billing",
		Workflows: []string{"wf_b", "wf_a"}, Activities: []string{"act_a"},
		ReplayRefused: []registry.Refusal{{Workflow: "wf_c", Reason: "nondeterminism", ExecutionID: "e-1", Message: "diverged", EventSeq: 3}},
		Load: func() registry.Load {
			return registry.Load{WorkflowSlots: 4, WorkflowSlotsUsed: int(used.Load()), ActivitySlots: 8, ActivitySlotsUsed: 2}
		}})
	r.Start(ctx)

	ws, err := registry.Workers(ctx, top.Workers, time.Now())
	require.NoError(t, err)
	require.Len(t, ws, 1, "listed right after Start")
	w := ws[0]
	host, _ := os.Hostname()
	require.Equal(t, "w1", w.Worker)
	require.Equal(t, host, w.Host)
	require.Equal(t, os.Getpid(), w.PID)
	require.NotEmpty(t, w.Build)
	require.WithinRange(t, w.StartedAt, before.Add(-time.Second), time.Now())
	require.Equal(t, "billing", w.TaskQueue)
	require.Equal(t, []string{"wf_a", "wf_b"}, w.Workflows, "sorted")
	require.Equal(t, []string{"act_a"}, w.Activities)
	require.Equal(t, []registry.Refusal{{Workflow: "wf_c", Reason: "nondeterminism", ExecutionID: "e-1", Message: "diverged", EventSeq: 3}}, w.ReplayRefused,
		"a workflow its replay check refused is in its record, and not registered")
	require.Equal(t, &registry.Load{WorkflowSlots: 4, WorkflowSlotsUsed: 1, ActivitySlots: 8, ActivitySlotsUsed: 2}, w.Load)
	require.WithinDuration(t, time.Now(), w.HeartbeatAt, 5*time.Second)
	require.False(t, w.Partial)

	// The renewal carries the load as it is then.
	used.Store(3)
	require.Eventually(t, func() bool {
		ws, err := registry.Workers(ctx, top.Workers, time.Now())
		return err == nil && len(ws) == 1 && ws[0].Load.WorkflowSlotsUsed == 3 && ws[0].HeartbeatAt.After(w.HeartbeatAt) &&
			ws[0].StartedAt.Equal(w.StartedAt)
	}, 10*time.Second, 20*time.Millisecond)

	// The index knows the names, and nothing of the record.
	require.Equal(t, map[string]int{"wf_a": 1, "wf_b": 1}, x.Names(registry.KindWorkflow, time.Now()))
	require.Empty(t, x.Names(registry.RecordPrefix, time.Now()))
	// A reader of entries (an older index) decodes the record as one.
	e, err := top.Workers.Get(ctx, registry.RecordKey("w1"))
	require.NoError(t, err)
	var ent registry.Entry
	require.NoError(t, json.Unmarshal(e.Value(), &ent))
	require.Equal(t, "w1", ent.Worker)
	require.True(t, ent.Live(time.Now()))

	require.NoError(t, r.Stop(ctx))
	ws, err = registry.Workers(ctx, top.Workers, time.Now())
	require.NoError(t, err)
	require.Empty(t, ws, "a graceful stop removes the record")
}

// TestWorkersListsLiveWorkersOnly: workers are listed by task queue, host
// and id; a worker of an older version, which puts name keys and no
// record, is told from its keys (Partial); a worker whose values are past
// their expiry is not listed, record or not; a worker without a load hook
// has no load.
func TestWorkersListsLiveWorkersOnly(t *testing.T) {
	t.Parallel()
	js, top := declare(t, 0)
	ctx := natstest.Context(t)
	put := func(key string, v any) {
		t.Helper()
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		_, err = top.Workers.Put(ctx, key, raw)
		require.NoError(t, err)
	}
	live, past := time.Now().Add(time.Minute), time.Now().Add(-time.Second)
	// An older worker: name keys only.
	put(registry.Key(registry.KindWorkflow, "wf_old", "default", "old1"), registry.Entry{Worker: "old1", Host: "h-old", ExpiresAt: live})
	put(registry.Key(registry.KindActivity, "act_old", "default", "old1"), registry.Entry{Worker: "old1", Host: "h-old", ExpiresAt: live})
	// A vanished worker, record and key past their expiry.
	put(registry.Key(registry.KindWorkflow, "wf_gone", "default", "gone"), registry.Entry{Worker: "gone", ExpiresAt: past})
	put(registry.RecordKey("gone"), registry.Record{Entry: registry.Entry{Worker: "gone", Host: "a", ExpiresAt: past}, TaskQueue: "default"})
	// A record that does not decode is passed by.
	_, err := top.Workers.Put(ctx, registry.RecordKey("junk"), []byte("{"))
	require.NoError(t, err)

	r1 := registry.NewRegistrar(registry.RegistrarConfig{JS: js, Worker: "b2", TaskQueue: "default", Workflows: []string{"wf_new"}})
	r1.Start(ctx)
	t.Cleanup(func() { require.NoError(t, r1.Stop(ctx)) })
	r2 := registry.NewRegistrar(registry.RegistrarConfig{KV: top.Workers, Worker: "a1", TaskQueue: "another", Activities: []string{"act_x"}})
	r2.Start(ctx)
	t.Cleanup(func() { require.NoError(t, r2.Stop(ctx)) })

	ws, err := registry.Workers(ctx, top.Workers, time.Now())
	require.NoError(t, err)
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.TaskQueue+"/"+w.Worker)
	}
	host, _ := os.Hostname()
	want := []string{"another/a1", "default/b2", "default/old1"}
	if host > "h-old" {
		want = []string{"another/a1", "default/old1", "default/b2"}
	}
	require.Equal(t, want, ids, "by task queue, host and id")
	for _, w := range ws {
		switch w.Worker {
		case "old1":
			require.True(t, w.Partial)
			require.Equal(t, "h-old", w.Host)
			require.Equal(t, []string{"wf_old"}, w.Workflows)
			require.Equal(t, []string{"act_old"}, w.Activities)
			require.Zero(t, w.PID)
			require.False(t, w.HeartbeatAt.IsZero())
		case "a1":
			require.Equal(t, []string{}, w.Workflows, "empty, not null")
			require.Equal(t, []string{"act_x"}, w.Activities)
			require.Nil(t, w.Load, "no hook, no load")
		}
	}
}

// TestBuildOfTellsVersionAndRevision: a release, a checkout with changes,
// a version the go command stamped from the checkout, and a build that
// recorded nothing; always one token.
func TestBuildOfTellsVersionAndRevision(t *testing.T) {
	t.Parallel()
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{nil, "(devel)"},
		{&debug.BuildInfo{}, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: vcs("75549c2a1b3c4d5e6f", "false")}, "v1.4.0+75549c2a1b3c"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("75549c2a1b3c4d5e6f", "true")}, "(devel)+75549c2a1b3c.dirty"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260304050607-75549c2a1b3c+dirty"}, Settings: vcs("75549c2a1b3c4d5e6f", "true")},
			"v0.0.0-20260304050607-75549c2a1b3c+dirty"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0+meta"}, Settings: vcs("75549c2", "true")}, "v1.4.0+meta.75549c2.dirty"},
	} {
		require.Equal(t, tc.want, registry.BuildOf(tc.info))
	}
}

// TestABuildKeepsItsArrivalAcrossRestarts: a worker of a build that
// starts while another of its build runs takes that one's arrival, so
// that a build restarted worker by worker does not look newer than a
// build that came after it; a worker of a build none of which runs
// arrives as it starts.
func TestABuildKeepsItsArrivalAcrossRestarts(t *testing.T) {
	t.Parallel()
	js, top := declare(t, 30*time.Second)
	ctx := natstest.Context(t)
	start := func(worker, build string) *registry.Registrar {
		r := registry.NewRegistrar(registry.RegistrarConfig{JS: js, Worker: worker, TaskQueue: "default", BuildID: build,
			Workflows: []string{"order"}, Log: slog.New(slog.DiscardHandler)})
		r.Start(ctx)
		t.Cleanup(func() { _ = r.Stop(context.Background()) })
		return r
	}
	arrivals := func() map[string]time.Time {
		ws, err := registry.Workers(ctx, top.Workers, time.Now())
		require.NoError(t, err)
		out := map[string]time.Time{}
		for _, w := range ws {
			out[w.Worker] = w.Arrived
		}
		return out
	}
	a1 := start("a1", "v1")
	first := arrivals()["a1"]
	require.False(t, first.IsZero())
	start("b1", "v2")
	start("a2", "v1") // a v1 worker restarted after v2 came
	require.NoError(t, a1.Stop(ctx))
	got := arrivals()
	require.True(t, got["a2"].Equal(first), "a2 took the arrival of v1's live worker: %s, not %s", got["a2"], first)
	require.True(t, got["b1"].After(first))
	x := registry.NewIndex(top.Workers, slog.New(slog.DiscardHandler))
	require.NoError(t, x.Start(ctx))
	t.Cleanup(x.Close)
	require.Equal(t, "v2", x.NewestBuild("order", "default", time.Now()))
}
