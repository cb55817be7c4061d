package workerrt_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// registerBuildFlow registers pinned_flow and moving_flow: each waits for
// the signal "go", then returns build, the build whose code ran the
// task that finished it.
func registerBuildFlow(build string) func(*harvest.Worker) {
	return func(w *harvest.Worker) {
		flow := func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if err := harvest.GetSignalChannel(ctx, "go").Receive(nil); err != nil {
				return "", err
			}
			return build, nil
		}
		harvest.RegisterWorkflow(w, "pinned_flow", flow)
		harvest.RegisterWorkflow(w, "moving_flow", flow)
	}
}

// TestAPinnedWorkflowStaysOnItsBuild: with pinned_flow configured
// versioning: pinned, an execution started while only build 1 runs stays
// on build 1 after build 2 deploys, while a start pinned to build 2 runs
// there, and an auto-upgrading one moves to build 2; once build 1's
// worker is gone, its pinned execution waits for it, visibly. Bad
// versioning and unknown builds are refused.
func TestAPinnedWorkflowStaysOnItsBuild(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{
		Worker:    harvest.WorkerConfig{BuildID: "shop-1"},
		Register:  registerBuildFlow("shop-1"),
		Scheduler: scheduler.Config{PinnedWorkflows: map[string]bool{"pinned_flow": true}},
	})
	c, ctx := stacktest.Client(t, s)
	start := func(workflow string, opts client.StartOptions) string {
		t.Helper()
		res, err := c.Start(ctx, workflow, struct{}{}, opts)
		require.NoError(t, err)
		return res.ExecutionID
	}
	// waitFirstTask waits for the execution's first task to complete: it
	// then waits for the signal.
	waitFirstTask := func(id string) *client.Execution {
		t.Helper()
		var e *client.Execution
		probe.Until(t, 30*time.Second, "execution "+id+" to run its first task", func() bool {
			n := stacktest.DBCount(t, s, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = $2`, id, wire.EventWorkflowTaskCompleted)
			var err error
			e, err = c.Describe(ctx, id)
			require.NoError(t, err)
			return n >= 1
		})
		return e
	}

	old := start("pinned_flow", client.StartOptions{})
	e := waitFirstTask(old)
	require.Equal(t, "pinned", e.Versioning)
	require.Equal(t, "shop-1", e.PinnedBuild)
	moving := start("moving_flow", client.StartOptions{})
	e = waitFirstTask(moving)
	require.Empty(t, e.Versioning, "auto_upgrade is not shown")
	require.Empty(t, e.PinnedBuild)

	// Bad input changes nothing.
	_, err := c.Start(ctx, "pinned_flow", struct{}{}, client.StartOptions{BuildID: "shop-9"})
	stacktest.RequireAPIError(t, err, 400, api.CodeInvalidBuild)
	_, err = c.Start(ctx, "pinned_flow", struct{}{}, client.StartOptions{Versioning: "sideways"})
	stacktest.RequireAPIError(t, err, 400, api.CodeInvalidVersioning)
	_, err = c.Start(ctx, "pinned_flow", struct{}{}, client.StartOptions{Versioning: client.VersioningAutoUpgrade, BuildID: "shop-1"})
	stacktest.RequireAPIError(t, err, 400, api.CodeInvalidBuild)
	_, err = c.Start(ctx, "pinned_flow", struct{}{}, client.StartOptions{BuildID: "shop 1"})
	stacktest.RequireAPIError(t, err, 400, api.CodeInvalidBuild)

	// Build 2 deploys beside build 1.
	second, err := harvest.NewWorker(harvest.WorkerConfig{NATS: s.NC(), BuildID: "shop-2"})
	require.NoError(t, err)
	registerBuildFlow("shop-2")(second)
	require.NoError(t, second.Start(t.Context()))
	t.Cleanup(func() { _ = second.Stop(context.Background()) })
	// Build 1's worker leaves the shared tasks of moving_flow to build 2.
	probe.Until(t, 30*time.Second, "build 1 to see build 2 as the newest", func() bool {
		return probe.Value(t, probe.Scrape(t, s.URL()+"/metrics"), "harvest_worker_workflow_newest_build", "workflow", "moving_flow") == 0
	})

	pinnedNew := start("pinned_flow", client.StartOptions{BuildID: "shop-2"})
	e = waitFirstTask(pinnedNew)
	require.Equal(t, "shop-2", e.PinnedBuild)

	for _, id := range []string{old, moving, pinnedNew} {
		require.NoError(t, c.SendSignal(ctx, id, "go", nil))
	}
	require.Equal(t, "shop-1", stacktest.WaitCompleted(t, s, old)["result"], "pinned to the build that started it")
	require.Equal(t, "shop-2", stacktest.WaitCompleted(t, s, pinnedNew)["result"], "pinned to the build it named")
	require.Equal(t, "shop-2", stacktest.WaitCompleted(t, s, moving)["result"], "moved to the newest build")
	buildsOf := func(id string) map[string]bool {
		hist, err := c.History(ctx, id)
		require.NoError(t, err)
		out := map[string]bool{}
		for _, ev := range hist {
			if ev.Type == wire.EventWorkflowTaskCompleted {
				out[ev.Attrs["build_id"].(string)] = true
			}
		}
		return out
	}
	require.Equal(t, map[string]bool{"shop-1": true}, buildsOf(old))
	require.Equal(t, map[string]bool{"shop-2": true}, buildsOf(pinnedNew))

	// A pinned execution whose build has no live worker waits, visibly.
	waiting := start("pinned_flow", client.StartOptions{BuildID: "shop-1"})
	waitFirstTask(waiting)
	require.NoError(t, s.Worker().Stop(ctx))
	probe.Until(t, 30*time.Second, "the pinned execution to show that it waits for its build", func() bool {
		e, err = c.Describe(ctx, waiting)
		require.NoError(t, err)
		return e.WaitingForWorker
	})
	require.Equal(t, []client.WaitingFor{{Kind: "workflow", Name: "pinned_flow", TaskQueue: "default", BuildID: "shop-1"}}, e.WaitingForWorkers)
	_, err = c.Start(ctx, "pinned_flow", struct{}{}, client.StartOptions{BuildID: "shop-1"})
	stacktest.RequireAPIError(t, err, 400, api.CodeInvalidBuild)
	// An auto-upgrading execution runs on what is left.
	after := start("moving_flow", client.StartOptions{})
	waitFirstTask(after)
	require.NoError(t, c.SendSignal(ctx, after, "go", nil))
	require.Equal(t, "shop-2", stacktest.WaitCompleted(t, s, after)["result"])
}
