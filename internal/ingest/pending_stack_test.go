package ingest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestDescribeShowsWhatPendingActivitiesAreDoing: describe's
// pending_activities say, of a running execution's activities not
// closed, which attempt runs (with its last heartbeat) and which waits
// to be tried again (when, and why the last attempt failed).
func TestDescribeShowsWhatPendingActivitiesAreDoing(t *testing.T) {
	t.Parallel()
	beating := make(chan struct{})
	s := stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{DisableEagerActivities: true}, Register: func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "flaky_call", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			return "", errors.New("provider timed out")
		}, harvest.ActivityOptions{RetryPolicy: &harvest.RetryPolicy{InitialInterval: time.Hour, MaximumAttempts: 3}})
		harvest.RegisterActivity(w, "long_export", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			ctx.Heartbeat(map[string]int{"page": 7})
			close(beating)
			<-ctx.Done()
			return "", ctx.Err()
		}, harvest.ActivityOptions{StartToClose: time.Minute})
		harvest.RegisterWorkflow(w, "pending_pair", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			a := harvest.ExecuteActivity(ctx, "flaky_call", nil)
			b := harvest.ExecuteActivity(ctx, "long_export", nil)
			_ = a.Get(nil)
			return "", b.Get(nil)
		})
	}})
	id := stacktest.StartWorkflow(t, s, "pending_pair", "", `{}`).Body["execution_id"].(string)
	select {
	case <-beating:
	case <-time.After(30 * time.Second):
		t.Fatal("the export never ran")
	}
	var pending []any
	probe.Until(t, 30*time.Second, "both activities to show what they do", func() bool {
		e := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "").Body
		pending, _ = e["pending_activities"].([]any)
		if len(pending) != 2 {
			return false
		}
		flaky, export := pending[0].(map[string]any), pending[1].(map[string]any)
		return flaky["state"] == "retrying" && export["heartbeat_details"] != nil
	})
	flaky, export := pending[0].(map[string]any), pending[1].(map[string]any)
	require.Equal(t, "flaky_call", flaky["activity_name"])
	require.Equal(t, float64(2), flaky["attempt"], "the next attempt's number")
	require.NotEmpty(t, flaky["next_attempt_at"])
	require.Equal(t, "provider timed out", flaky["last_failure"].(map[string]any)["message"])
	require.Equal(t, "long_export", export["activity_name"])
	require.Equal(t, "running", export["state"])
	require.Equal(t, map[string]any{"page": float64(7)}, export["heartbeat_details"])
	require.NotEmpty(t, export["last_heartbeat_at"])
	require.Nil(t, export["last_failure"])
	// Terminated, its running attempt's context is cancelled: the stack
	// stops without waiting for it.
	require.Equal(t, 200, stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+id+"/terminate", nil, "").Status)
}
