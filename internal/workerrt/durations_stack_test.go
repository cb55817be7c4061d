package workerrt_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestAnActivityRecordsWhenItsAttemptRan: an activity's close records
// when its attempt's code began and returned on its worker, run eagerly
// or dispatched, completed or failed for good, so that its duration is
// there to read, not the zero the scheduled and closed events' own times
// give an eager attempt.
func TestAnActivityRecordsWhenItsAttemptRan(t *testing.T) {
	t.Parallel()
	for _, eager := range []bool{true, false} {
		s := stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{DisableEagerActivities: !eager}, Register: func(w *harvest.Worker) {
			harvest.RegisterActivity(w, "nap", func(ctx *harvest.ActivityContext, ms int) (int, error) {
				time.Sleep(time.Duration(ms) * time.Millisecond) // the work whose duration is recorded
				if ms < 0 {
					return 0, harvest.NewNonRetryableError("Bad", "a negative nap")
				}
				return ms, nil
			})
			harvest.RegisterWorkflow(w, "napper", func(ctx *harvest.WorkflowContext, ms int) (int, error) {
				var out int
				if err := harvest.ExecuteActivity(ctx, "nap", ms).Get(&out); err != nil {
					return 0, err
				}
				err := harvest.ExecuteActivity(ctx, "nap", -1).Get(nil)
				return out, harvest.NonRetryable(err)
			})
		}})
		c, err := client.New(client.Config{BaseURL: s.URL()})
		require.NoError(t, err)
		id := stacktest.StartWorkflow(t, s, "napper", "", `{"input": 150}`).Body["execution_id"].(string)
		probe.Until(t, 30*time.Second, "the execution to close", func() bool {
			return stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "").Body["status"] == "Failed"
		})
		h, err := c.History(natstest.Context(t), id)
		require.NoError(t, err)
		var closes int
		for _, ev := range h {
			if ev.Type != "ActivityCompleted" && ev.Type != "ActivityFailed" {
				continue
			}
			closes++
			started, err := time.Parse(time.RFC3339Nano, ev.Attrs["started_at"].(string))
			require.NoError(t, err, "eager %v: %v", eager, ev.Attrs)
			ended, err := time.Parse(time.RFC3339Nano, ev.Attrs["ended_at"].(string))
			require.NoError(t, err, "eager %v: %v", eager, ev.Attrs)
			require.False(t, ended.Before(started), ev.Attrs)
			if ev.Type == "ActivityCompleted" {
				require.GreaterOrEqual(t, ended.Sub(started), 150*time.Millisecond, "eager %v: the nap's duration", eager)
			}
		}
		require.Equal(t, 2, closes, "eager %v", eager)
	}
}
