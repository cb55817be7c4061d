package harvesttest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
)

// gated registers a workflow that runs activity "a", waits for the
// signal "go" and returns "done". before, if given, runs first in the
// workflow code (a change made without harvest.GetVersion, or one its
// recorded version does not support); the code panics after "a" while
// *panics is set.
func gated(before func(*harvest.WorkflowContext), panics *bool) func(*harvest.Worker) {
	return func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "gated", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if before != nil {
				before(ctx)
			}
			if err := harvest.ExecuteActivity(ctx, "a", nil).Get(nil); err != nil {
				return "", err
			}
			if *panics {
				panic("the code is broken")
			}
			if err := harvest.GetSignalChannel(ctx, "go").Receive(nil); err != nil {
				return "", err
			}
			return "done", nil
		})
		harvest.RegisterActivity(w, "a", func(*harvest.ActivityContext, struct{}) (string, error) { return "a", nil })
	}
}

// A workflow task that cannot complete on the code (its replay diverges,
// it meets a version the code does not support, the code panics) is not
// fatal, as in a deployment: the execution stays Running, Describe shows
// TaskFailing (reason, where the replay diverged, the task, the failures
// in a row), the task is dispatched again after the scheduler's backoff
// (1 s, then 2 s) on the test's clock, and once code that runs it is in
// place the execution completes and the mark is gone.
func TestAFailingWorkflowTaskShowsTaskFailingAndIsRetried(t *testing.T) {
	t.Parallel()
	pinned := func(ctx *harvest.WorkflowContext) { harvest.DeprecatePatch(ctx, "c") }
	divert := func(ctx *harvest.WorkflowContext) { harvest.ExecuteActivity(ctx, "b", nil) }
	for _, c := range []struct {
		name   string
		reason string
		// broken is the code the task fails on; fixed the code that runs
		// it. The execution starts on fixed.
		broken, fixed func(*harvest.Worker)
		panics        *bool
	}{
		{name: "nondeterminism", reason: "nondeterminism", broken: gated(divert, new(bool)), fixed: gated(nil, new(bool))},
		{name: "version unsupported", reason: "version_unsupported", broken: gated(pinned, new(bool)), fixed: gated(nil, new(bool))},
		{name: "panic", reason: "panic", panics: new(bool)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if c.panics != nil {
				c.broken, c.fixed = gated(nil, c.panics), gated(nil, c.panics)
			}
			env, err := harvesttest.New(c.fixed, harvesttest.Config{})
			require.NoError(t, err)
			t.Cleanup(env.Close)
			x, err := env.Start(ctx, "gated", nil)
			require.NoError(t, err)

			if c.panics != nil {
				*c.panics = true
			}
			require.NoError(t, env.RestartWorker(ctx, c.broken))
			_, err = x.Signal(ctx, "go", nil)
			require.Error(t, err, "the call that ran the task returns its failure")
			if c.reason == "nondeterminism" {
				require.ErrorIs(t, err, harvest.ErrNonDeterministic)
			}
			failedAt := env.Now()
			ex, err := x.Describe()
			require.NoError(t, err)
			require.Equal(t, client.StatusRunning, ex.Status, "the execution is not failed: it waits")
			f := ex.TaskFailing
			require.NotNil(t, f, "describe shows the failing task")
			require.Equal(t, c.reason, f.Reason)
			require.NotEmpty(t, f.Message)
			require.Equal(t, 1, f.Attempts)
			require.Equal(t, failedAt, f.Since)
			require.Equal(t, failedAt.Add(time.Second), f.NextAttemptAt, "the first retry is after 1 s")
			if c.reason == "nondeterminism" {
				require.Positive(t, f.EventSeq)
				require.Contains(t, f.History, "ActivityScheduled")
				require.Contains(t, f.Code, "schedule_activity")
			}

			// The retry fails again on the same code: one more in a row,
			// the backoff doubled.
			require.Error(t, env.Advance(ctx, time.Second))
			ex, err = x.Describe()
			require.NoError(t, err)
			require.Equal(t, 2, ex.TaskFailing.Attempts)
			require.Greater(t, ex.TaskFailing.TaskID, f.TaskID, "a new task was dispatched")
			require.Equal(t, failedAt, ex.TaskFailing.Since)
			require.Equal(t, env.Now().Add(2*time.Second), ex.TaskFailing.NextAttemptAt)

			// The fix: the next retry completes the task, and the
			// execution.
			if c.panics != nil {
				*c.panics = false
			}
			require.NoError(t, env.RestartWorker(ctx, c.fixed))
			require.NoError(t, env.Advance(ctx, 2*time.Second))
			var out string
			require.NoError(t, x.Result(&out))
			require.Equal(t, "done", out)
			ex, err = x.Describe()
			require.NoError(t, err)
			require.Nil(t, ex.TaskFailing, "a completed task clears the mark")
		})
	}
}
