package workerrt_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestAFailingTaskIsShownThenRecovers: workflow code that panics fails
// its task on the worker, which reports it: describe shows the execution
// Running with task_failing (the reason, the message, the build), the
// worker counts it, and the task is dispatched again after a backoff; once
// the code no longer panics (a fix deployed), the task completes, the
// execution finishes and the mark is gone.
func TestAFailingTaskIsShownThenRecovers(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	s := stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{BuildID: "v7~test"}, Register: func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "fragile", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if broken.Load() {
				panic("the new code has a bug")
			}
			return "fine", nil
		})
	}})
	c, ctx := stacktest.Client(t, s)
	res, err := c.Start(ctx, "fragile", struct{}{}, client.StartOptions{})
	require.NoError(t, err)

	var e *client.Execution
	probe.Until(t, 30*time.Second, "the execution to show its task failing", func() bool {
		e, err = c.Describe(ctx, res.ExecutionID)
		require.NoError(t, err)
		return e.TaskFailing != nil
	})
	require.Equal(t, "Running", e.Status)
	f := e.TaskFailing
	require.Equal(t, "panic", f.Reason)
	require.Contains(t, f.Message, "the new code has a bug")
	require.Equal(t, "v7~test", f.BuildID)
	require.GreaterOrEqual(t, f.Attempts, 1)
	require.False(t, f.NextAttemptAt.Before(f.Since))
	require.Contains(t, string(e.Raw), `"task_failing"`)

	// The one-process stack's services share a registry, which its
	// /metrics serves.
	probe.Until(t, 10*time.Second, "the worker to count the failure", func() bool {
		return probe.Value(t, probe.Scrape(t, s.URL()+"/metrics"), "harvest_worker_workflow_task_failures_total", "workflow", "fragile", "reason", "panic") >= 1
	})

	broken.Store(false)
	stacktest.WaitCompleted(t, s, res.ExecutionID)
	e, err = c.Describe(ctx, res.ExecutionID)
	require.NoError(t, err)
	require.Nil(t, e.TaskFailing)
	require.JSONEq(t, `"fine"`, string(e.Result))
}
