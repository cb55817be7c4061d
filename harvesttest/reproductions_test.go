package harvesttest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/harvesttest"
)

// The two reproductions of issue 29, written as a user's tests would be,
// against the kit: each gives the first run's result on every replay, and
// leaves no goroutine behind (goleak in TestMain).

// TestIsReadyTakesTheBranchTheRunTook: slow is started, the workflow
// sleeps 5 s, finds slow not ready, runs notify_slow and waits; slow
// finishes later. The result names the branch taken, on every replay.
func TestIsReadyTakesTheBranchTheRunTook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	notified := 0
	env, err := harvesttest.New(func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "slow_or_fast", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			slow := harvest.ExecuteActivity(ctx, "slow", nil, harvest.ActivityOptions{RetryPolicy: &harvest.RetryPolicy{
				MaximumAttempts: 2, InitialInterval: 10 * time.Second, BackoffCoefficient: 1}})
			_ = harvest.Sleep(ctx, 5*time.Second)
			branch := "fast"
			if !slow.IsReady() {
				branch = "slow"
				if err := harvest.ExecuteActivity(ctx, "notify_slow", nil).Get(nil); err != nil {
					return "", err
				}
			}
			return branch, slow.Get(nil)
		})
		// slow fails its first attempt and succeeds 10 s later.
		harvest.RegisterActivity(w, "slow", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			if ctx.Attempt() == 1 {
				return "", errors.New("not yet")
			}
			return "done", nil
		})
		harvest.RegisterActivity(w, "notify_slow", func(*harvest.ActivityContext, struct{}) (string, error) {
			notified++
			return "sent", nil
		})
	}, harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	x, err := env.Start(ctx, "slow_or_fast", nil)
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, 30*time.Second))
	var branch string
	require.NoError(t, x.Result(&branch))
	require.Equal(t, "slow", branch)
	require.Equal(t, 1, notified, "notify_slow ran, and the result says so")
	require.NoError(t, x.Replay(nil), "every replay takes the branch the run took")
	require.NoError(t, env.RestartWorker(ctx, nil))
	require.NoError(t, x.Replay(nil))
}

// TestADeferredWorkflowCallRunsOnce: the saga idiom, a deferred
// compensation that runs a workflow call when the workflow fails, runs
// once, when the workflow function returns, across a three-activity
// workflow's tasks, and parks no goroutine for good.
func TestADeferredWorkflowCallRunsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	compensations := 0
	env, err := harvesttest.New(func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "saga", func(ctx *harvest.WorkflowContext, _ struct{}) (out string, err error) {
			defer func() {
				if err != nil {
					_ = harvest.ExecuteActivity(ctx, "compensate", nil).Get(nil)
				}
			}()
			for _, step := range []string{"reserve", "charge", "ship"} {
				if err := harvest.ExecuteActivity(ctx, step, nil).Get(nil); err != nil {
					return "", err
				}
			}
			return "shipped", nil
		})
		for _, step := range []string{"reserve", "charge"} {
			harvest.RegisterActivity(w, step, func(*harvest.ActivityContext, struct{}) (string, error) { return "ok", nil })
		}
		harvest.RegisterActivity(w, "ship", func(*harvest.ActivityContext, struct{}) (string, error) {
			return "", harvest.NewNonRetryableError("NoCarrier", "no carrier today")
		})
		harvest.RegisterActivity(w, "compensate", func(*harvest.ActivityContext, struct{}) (string, error) {
			compensations++
			return "undone", nil
		})
	}, harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	x, err := env.Start(ctx, "saga", nil)
	require.NoError(t, err)
	var appErr *harvest.ApplicationError
	require.ErrorAs(t, x.Result(nil), &appErr)
	require.Equal(t, 1, compensations, "the deferred compensation ran once")
	history, err := x.History()
	require.NoError(t, err)
	scheduled := 0
	for _, ev := range history {
		if ev.Type == "ActivityScheduled" && ev.Attrs["activity_name"] == "compensate" {
			scheduled++
		}
	}
	require.Equal(t, 1, scheduled, "compensate is scheduled once")
	require.NoError(t, x.Replay(nil))
}
