package workerrt_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// The replay check on a whole stack: v1 of a workflow runs executions
// that wait for a signal; v2 starts with WorkerConfig.ReplayCheck.

// orderV1 runs step a, waits for the signal "go", runs step b.
func orderV1(ctx *harvest.WorkflowContext, order string) (string, error) {
	var a, b string
	if err := harvest.ExecuteActivity(ctx, "rc_step", "a:"+order).Get(&a); err != nil {
		return "", err
	}
	if err := harvest.GetSignalChannel(ctx, "go").Receive(nil); err != nil {
		return "", err
	}
	if err := harvest.ExecuteActivity(ctx, "rc_step", "b:"+order).Get(&b); err != nil {
		return "", err
	}
	return a + " " + b, nil
}

// orderV2 checks the order before step a, a change outside GetVersion:
// the executions v1 started recorded step a as their first activity.
func orderV2(ctx *harvest.WorkflowContext, order string) (string, error) {
	if err := harvest.ExecuteActivity(ctx, "rc_step", "check:"+order).Get(nil); err != nil {
		return "", err
	}
	return orderV1(ctx, order)
}

// orderV2Patched makes the same change behind harvest.Patched: the
// executions that went past the point before it keep the old path.
func orderV2Patched(ctx *harvest.WorkflowContext, order string) (string, error) {
	if harvest.Patched(ctx, "check-first") {
		if err := harvest.ExecuteActivity(ctx, "rc_step", "check:"+order).Get(nil); err != nil {
			return "", err
		}
	}
	return orderV1(ctx, order)
}

// orderWorker starts a worker of build on its own connection to s,
// registering rc_order as wf and the activity rc_step, with check, its
// metrics on a registry of its own and its log in a LogTail; it is
// stopped at cleanup.
func orderWorker(t *testing.T, s *devstack.Stack, build string, wf func(*harvest.WorkflowContext, string) (string, error), check harvest.ReplayCheck) (*harvest.Worker, *prometheus.Registry, *stacktest.LogTail) {
	t.Helper()
	nc, err := nats.Connect(s.NATSURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	metrics, log := prometheus.NewRegistry(), &stacktest.LogTail{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker %s's log:\n%s", build, log)
		}
	})
	w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc, BuildID: build, ShutdownGrace: 5 * time.Second, ReplayCheck: check,
		Metrics: metrics, Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	require.NoError(t, err)
	harvest.RegisterWorkflow(w, "rc_order", wf)
	harvest.RegisterActivity(w, "rc_step", func(_ *harvest.ActivityContext, in string) (string, error) { return in + " done", nil })
	require.NoError(t, w.Start(natstest.Context(t)))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w, metrics, log
}

// startOrders starts n executions of rc_order and waits until each has
// run step a and waits for its signal.
func startOrders(t *testing.T, s *devstack.Stack, n int) []string {
	t.Helper()
	c, ctx := stacktest.Client(t, s)
	var ids []string
	for i := range n {
		res, err := c.Start(ctx, "rc_order", fmt.Sprintf("o-%d", i), client.StartOptions{})
		require.NoError(t, err)
		ids = append(ids, res.ExecutionID)
	}
	for _, id := range ids {
		probe.Until(t, 30*time.Second, "execution "+id+" to wait for its signal", func() bool {
			types := stacktest.HistoryTypes(t, s, id)
			return slices.Contains(types, wire.EventActivityCompleted) && types[len(types)-1] == wire.EventWorkflowTaskCompleted
		})
	}
	return ids
}

// workerOf is the live worker of build, as the workers route lists it.
func workerOf(t *testing.T, s *devstack.Stack, build string) client.Worker {
	t.Helper()
	c, ctx := stacktest.Client(t, s)
	var found *client.Worker
	probe.Until(t, 10*time.Second, "worker "+build+" on the workers route", func() bool {
		ws, err := c.Workers(ctx)
		require.NoError(t, err)
		for _, w := range ws {
			if w.BuildID == build {
				found = &w
				return true
			}
		}
		return false
	})
	return *found
}

// signalAndFinish signals each execution and waits for it to complete;
// it returns the build ids its workflow tasks recorded after the signal.
func signalAndFinish(t *testing.T, s *devstack.Stack, ids []string) map[string]bool {
	t.Helper()
	c, ctx := stacktest.Client(t, s)
	builds := map[string]bool{}
	for i, id := range ids {
		require.NoError(t, c.SendSignal(ctx, id, "go", nil))
		done := stacktest.WaitCompleted(t, s, id)
		require.Equal(t, fmt.Sprintf("a:o-%d done b:o-%d done", i, i), done["result"])
		hist, err := c.History(ctx, id)
		require.NoError(t, err)
		signalled := false
		for _, ev := range hist {
			switch {
			case ev.Type == wire.EventSignalReceived:
				signalled = true
			case ev.Type == wire.EventWorkflowTaskCompleted && signalled:
				builds[fmt.Sprint(ev.Attrs["build_id"])] = true
			}
		}
	}
	return builds
}

// TestAWorkerRefusesAWorkflowItsCodeCannotReplay: v2 changed the order
// of rc_order's activities without GetVersion. With ReplayCheck it
// replays the running executions' histories, finds they diverge, and
// does not take rc_order: the workers route shows the refusal (the
// execution, where it diverged), its metric counts it, its log says it at
// level error. The executions go on on v1, and complete there once
// signalled; none of them failed a task on v2.
func TestAWorkerRefusesAWorkflowItsCodeCannotReplay(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{NoWorker: true})
	orderWorker(t, s, "v1~rc", orderV1, harvest.ReplayCheck{})
	ids := startOrders(t, s, 3)

	_, metrics, log := orderWorker(t, s, "v2~rc", orderV2, harvest.ReplayCheck{Sample: 5})
	v2 := workerOf(t, s, "v2~rc")
	require.Empty(t, v2.Workflows, "v2 does not take rc_order")
	require.Equal(t, []string{"rc_step"}, v2.Activities)
	require.Len(t, v2.ReplayRefused, 1)
	r := v2.ReplayRefused[0]
	require.Equal(t, "rc_order", r.Workflow)
	require.Equal(t, "nondeterminism", r.Reason)
	require.Contains(t, ids, r.ExecutionID)
	require.Positive(t, r.EventSeq)
	require.Contains(t, r.Message, "not deterministic")
	require.Contains(t, r.Message, "check:o-")
	v1 := workerOf(t, s, "v1~rc")
	require.Equal(t, []string{"rc_order"}, v1.Workflows)
	require.Empty(t, v1.ReplayRefused)

	count := func(result string) float64 {
		return probe.Value(t, metrics, "harvest_worker_replay_check_total", "workflow", "rc_order", "result", result)
	}
	require.InDelta(t, 1, count("refused"), 0)
	require.InDelta(t, 0, count("skipped"), 0)
	lines := log.String()
	require.Contains(t, lines, "level=ERROR")
	require.Contains(t, lines, "replay check: this worker does not take the workflow")
	require.Contains(t, lines, "execution_id="+r.ExecutionID)

	builds := signalAndFinish(t, s, ids)
	require.Equal(t, map[string]bool{"v1~rc": true}, builds, "the executions finished on v1")
	c, ctx := stacktest.Client(t, s)
	for _, id := range ids {
		e, err := c.Describe(ctx, id)
		require.NoError(t, err)
		require.Nil(t, e.TaskFailing)
	}
}

// TestAWorkerWhoseChangeIsVersionedPassesTheReplayCheck: the same change
// behind harvest.Patched replays every running history (the executions
// that went past the point take the old path), so v2 takes rc_order;
// with v1 gone, the executions complete on v2.
func TestAWorkerWhoseChangeIsVersionedPassesTheReplayCheck(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{NoWorker: true})
	v1, _, _ := orderWorker(t, s, "v1~rc", orderV1, harvest.ReplayCheck{})
	ids := startOrders(t, s, 3)

	_, metrics, log := orderWorker(t, s, "v2~rc", orderV2Patched, harvest.ReplayCheck{Sample: 5})
	v2 := workerOf(t, s, "v2~rc")
	require.Equal(t, []string{"rc_order"}, v2.Workflows)
	require.Empty(t, v2.ReplayRefused)
	require.InDelta(t, 3, probe.Value(t, metrics, "harvest_worker_replay_check_total", "workflow", "rc_order", "result", "passed"), 0)
	require.InDelta(t, 0, probe.Value(t, metrics, "harvest_worker_replay_check_total", "workflow", "rc_order", "result", "refused"), 0)
	require.False(t, strings.Contains(log.String(), "level=ERROR"), log.String())
	require.Contains(t, log.String(), "replay check passed")

	require.NoError(t, v1.Stop(context.Background()))
	builds := signalAndFinish(t, s, ids)
	require.Equal(t, map[string]bool{"v2~rc": true}, builds, "the executions finished on v2")
}
