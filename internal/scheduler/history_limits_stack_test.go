package scheduler_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestHistoryLimitsOnAStack: with small history limits, a workflow that
// never stops carries a warning past the warning threshold and fails
// with HistoryLimitExceeded past the hard limit, each counted once in
// the scheduler's metric, while another execution on the same shard
// completes, and one that continues as new when told (its info says so
// past the suggestion threshold) completes too.
func TestHistoryLimitsOnAStack(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{
		Scheduler: scheduler.Config{HistoryLimits: scheduler.HistoryLimits{SuggestEvents: 12, WarnEvents: 20, MaxEvents: 40}},
		Register: func(w *harvest.Worker) {
			harvest.RegisterActivity(w, "limit_step", func(_ *harvest.ActivityContext, n int) (int, error) { return n + 1, nil })
			harvest.RegisterWorkflow(w, "limit_loop", func(ctx *harvest.WorkflowContext, in struct {
				Forever bool `json:"forever"`
			}) (map[string]int, error) {
				steps := 0
				for in.Forever || !harvest.GetInfo(ctx).ContinueAsNewSuggested {
					if err := harvest.ExecuteActivity(ctx, "limit_step", steps).Get(&steps); err != nil {
						return nil, err
					}
				}
				info := harvest.GetInfo(ctx)
				return map[string]int{"steps": steps, "history_length": info.HistoryLength, "history_size": info.HistorySize}, nil
			})
		},
	})
	start := func(body string) string {
		t.Helper()
		r := stacktest.StartWorkflow(t, s, "limit_loop", "", body)
		require.Equal(t, 201, r.Status, r.Body)
		return r.Body["execution_id"].(string)
	}
	forever := start(`{"input": {"forever": true}}`)
	told := start(`{"input": {}}`)

	failed := stacktest.WaitStatus(t, s, forever, "Failed")
	require.Equal(t, "HistoryLimitExceeded", failed["error"].(map[string]any)["type"], failed)
	require.Contains(t, failed["error"].(map[string]any)["message"], "more than its limit of 40 (history_max_events)")
	// The batch that took it past the limit (a task's events with an
	// eager attempt's and the next task's), then the failure.
	length := int(failed["history_length"].(float64))
	require.GreaterOrEqual(t, length, 42)
	require.LessOrEqual(t, length, 47)
	warning := failed["history_warning"].(map[string]any)
	require.EqualValues(t, 20, warning["warn_events"])
	require.EqualValues(t, 40, warning["max_events"])
	require.EqualValues(t, length, warning["events"])
	require.Equal(t, failed["history_bytes"], warning["bytes"])
	require.Positive(t, failed["history_bytes"])
	types := stacktest.HistoryTypes(t, s, forever)
	require.Len(t, types, length)
	require.Equal(t, "WorkflowFailed", types[length-1])

	done := stacktest.WaitCompleted(t, s, told)
	result := done["result"].(map[string]any)
	require.GreaterOrEqual(t, result["history_length"], float64(12), result)
	require.Less(t, result["history_length"], float64(20), result)
	require.Positive(t, result["history_size"])
	require.Nil(t, done["history_warning"])

	// The shard goes on: another execution runs to its end.
	after := stacktest.WaitCompleted(t, s, start(`{"input": {}}`))
	require.Equal(t, result["steps"], after["result"].(map[string]any)["steps"])

	metrics := probe.Scrape(t, s.URL()+"/metrics")
	require.InDelta(t, 1, probe.Value(t, metrics, "harvest_scheduler_history_limits_total", "kind", "warning"), 0)
	require.InDelta(t, 1, probe.Value(t, metrics, "harvest_scheduler_history_limits_total", "kind", "exceeded"), 0)
}
