package harvesttest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
)

// loopInfo is what loop returns: the info of the task that saw the
// suggestion, and the steps it ran before.
type loopInfo struct {
	Steps         int `json:"steps"`
	HistoryLength int `json:"history_length"`
	HistorySize   int `json:"history_size"`
}

// registerLoop registers loop, which runs a step after another until its
// execution is told to continue as new (or, with forever, never stops).
func registerLoop(w *harvest.Worker) {
	harvest.RegisterActivity(w, "step", func(_ *harvest.ActivityContext, n int) (int, error) { return n + 1, nil })
	harvest.RegisterWorkflow(w, "loop", func(ctx *harvest.WorkflowContext, forever bool) (loopInfo, error) {
		steps := 0
		for forever || !harvest.GetInfo(ctx).ContinueAsNewSuggested {
			if err := harvest.ExecuteActivity(ctx, "step", steps).Get(&steps); err != nil {
				return loopInfo{}, err
			}
		}
		info := harvest.GetInfo(ctx)
		return loopInfo{Steps: steps, HistoryLength: info.HistoryLength, HistorySize: info.HistorySize}, nil
	})
}

// TestAWorkflowIsToldToContinueAsNew: past the suggestion threshold a
// workflow's info says to continue as new, with the history's length and
// size as the task saw them; the same on every replay, with the cache or
// without.
func TestAWorkflowIsToldToContinueAsNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	run := func(cacheSize int) loopInfo {
		env, err := harvesttest.New(registerLoop, harvesttest.Config{WorkflowCacheSize: cacheSize,
			HistoryLimits: harvesttest.HistoryLimits{SuggestEvents: 20}})
		require.NoError(t, err)
		defer env.Close()
		x, err := env.Start(ctx, "loop", false)
		require.NoError(t, err)
		var got loopInfo
		require.NoError(t, x.Result(&got))
		require.NoError(t, x.Replay(nil), "a replay reads what each task read")
		view, err := x.Describe()
		require.NoError(t, err)
		require.Greater(t, view.HistoryLength, got.HistoryLength)
		require.Greater(t, view.HistoryBytes, int64(got.HistorySize))
		require.Nil(t, view.HistoryWarning)
		return got
	}
	got := run(0)
	// Each step is its task's WorkflowTaskCompleted, ActivityScheduled
	// and ActivityCompleted: the task that first sees 20 events or more
	// is told, and stops.
	require.GreaterOrEqual(t, got.HistoryLength, 20)
	require.Less(t, got.HistoryLength, 23)
	require.Positive(t, got.HistorySize)
	require.Equal(t, (got.HistoryLength-1)/3, got.Steps)
	require.Equal(t, got, run(-1), "without the cache every task replays, and reads the same")
}

// TestAHistoryPastItsLimitFailsItsExecution: a workflow that never
// continues as new carries a warning past the warning threshold, and
// fails with HistoryLimitExceeded past the hard limit.
func TestAHistoryPastItsLimitFailsItsExecution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, err := harvesttest.New(registerLoop, harvesttest.Config{HistoryLimits: harvesttest.HistoryLimits{WarnEvents: 10, MaxEvents: 30}})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "loop", true)
	require.NoError(t, err)
	var ae *harvest.ApplicationError
	require.ErrorAs(t, x.Result(nil), &ae)
	require.Equal(t, client.FailureHistoryLimitExceeded, ae.Type)
	require.True(t, ae.NonRetryable)
	require.Contains(t, ae.Message, "31 events, more than its limit of 30 (history_max_events)")
	view, err := x.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusFailed, view.Status)
	require.Equal(t, 32, view.HistoryLength)
	require.NotNil(t, view.HistoryWarning)
	require.Equal(t, 10, view.HistoryWarning.WarnEvents)
	require.Equal(t, 30, view.HistoryWarning.MaxEvents)
	require.NoError(t, x.Replay(nil))

	_, err = harvesttest.New(registerLoop, harvesttest.Config{HistoryLimits: harvesttest.HistoryLimits{SuggestEvents: 40, MaxEvents: 30}})
	require.ErrorContains(t, err, "SuggestEvents 40 is above MaxEvents 30")
	require.False(t, errors.Is(err, context.Canceled))
}
