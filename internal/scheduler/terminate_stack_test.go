package scheduler_test

import (
	"context"
	"io"
	"net/http"
	"strings"
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

// brokerDuplicates is ingest's count of commands the broker dropped as
// duplicates of a message it held.
func brokerDuplicates(t *testing.T, s *devstack.Stack) string {
	t.Helper()
	resp, err := http.Get(s.URL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, resp.Body)
	require.NoError(t, err)
	for line := range strings.Lines(b.String()) {
		if strings.HasPrefix(line, `harvest_ingest_start_duplicates_total{layer="broker"}`) {
			return strings.TrimSpace(line)
		}
	}
	t.Fatal("no broker duplicates in /metrics")
	return ""
}

// TestTerminateClosesARunningExecution: POST
// /api/harvest/executions/{execution_id}/terminate closes a running
// execution as Terminated with one WorkflowTerminated event carrying the
// reason; its running activity's context is cancelled and its pending
// timer, when it fires, changes nothing. Terminating again, or a closed
// execution, answers as cancelling does: 200 with the status, nothing
// appended; an unknown execution is 404. A repeat carries the same
// Nats-Msg-Id, dropped by the broker.
func TestTerminateClosesARunningExecution(t *testing.T) {
	t.Parallel()
	running := make(chan struct{}, 1)
	stopped := make(chan error, 1)
	s := stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{DisableEagerActivities: true}, Register: func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "stuck_work", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			select {
			case running <- struct{}{}:
			default:
			}
			<-ctx.Done()
			select {
			case stopped <- ctx.Err():
			default:
			}
			return "", ctx.Err()
		}, harvest.ActivityOptions{StartToClose: time.Minute})
		harvest.RegisterWorkflow(w, "stuck", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			timer := harvest.NewTimer(ctx, 2*time.Second)
			var out string
			err := harvest.ExecuteActivity(ctx, "stuck_work", nil).Get(&out)
			_ = timer.Wait()
			return out, err
		})
	}})
	c, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)
	ctx := natstest.Context(t)
	id := stacktest.StartWorkflow(t, s, "stuck", "", `{"workflow_id": "stuck-1"}`).Body["execution_id"].(string)
	select {
	case <-running:
	case <-time.After(30 * time.Second):
		t.Fatal("the activity never started")
	}
	probe.Until(t, 30*time.Second, "the timer and the activity to be recorded", func() bool {
		return len(stacktest.HistoryTypes(t, s, id)) == 4
	})
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "TimerStarted", "ActivityScheduled"}, stacktest.HistoryTypes(t, s, id))
	terminate := func(target, body string) stacktest.Answer {
		return stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+target, nil, body)
	}

	// Refused requests change nothing.
	for _, tc := range []struct{ body, query, code string }{
		{`{"reason": "x", "force": true}`, "", "unknown_field"},
		{`{"reason": "stop\u0000"}`, "", "invalid_reason"},
		{`{"reason": `, "", "invalid_json"},
		{``, "?reason=x", "unknown_parameter"},
	} {
		r := terminate(id+"/terminate"+tc.query, tc.body)
		require.Equal(t, 400, r.Status, "%s%s: %v", tc.body, tc.query, r.Body)
		require.Equal(t, tc.code, r.Body["error"], r.Body)
	}
	require.Equal(t, "Running", stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "").Body["status"])

	r := terminate(id+"/terminate", `{"reason": "stuck on a bad deploy"}`)
	require.Equal(t, 200, r.Status, r.Body)
	require.Equal(t, map[string]any{"execution_id": id, "status": "Terminated", "workflow_id": "stuck-1", "workflow_name": "stuck"}, r.Body)
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("the activity's context was not cancelled")
	}
	exec := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "").Body
	require.Equal(t, "Terminated", exec["status"])
	require.NotNil(t, exec["closed_at"])
	require.Equal(t, map[string]any{"type": "Terminated", "message": "stuck on a bad deploy"}, exec["error"])
	want := []string{"WorkflowStarted", "WorkflowTaskCompleted", "TimerStarted", "ActivityScheduled", "WorkflowTerminated"}
	require.Equal(t, want, stacktest.HistoryTypes(t, s, id))
	h, err := c.History(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "stuck on a bad deploy", h[4].Attrs["reason"])

	// The timer fires, finds the execution closed, and is dropped; the
	// activity's late failure is ignored.
	probe.Until(t, 30*time.Second, "the abandoned timer to be dropped", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM timers WHERE execution_id = $1`, id) == 0
	})
	require.Equal(t, want, stacktest.HistoryTypes(t, s, id))

	// Again: the broker drops the repeat, and the answer is the first one's.
	before := brokerDuplicates(t, s)
	again := terminate(id+"/terminate", `{"reason": "once more"}`)
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, "Terminated", again.Body["status"])
	require.NotEqual(t, before, brokerDuplicates(t, s), "the repeat carried the same Nats-Msg-Id")
	// Cancelling it changes nothing either.
	cancelled, err := c.Cancel(ctx, id, "")
	require.NoError(t, err)
	require.Equal(t, client.StatusTerminated, cancelled.Status)
	require.Equal(t, want, stacktest.HistoryTypes(t, s, id))

	// A closed execution: terminating it answers how it closed.
	done, err := c.Start(ctx, "onboarding", map[string]any{"user_id": 9}, client.StartOptions{})
	require.NoError(t, err)
	_, err = c.WaitResult(ctx, done.ExecutionID, nil)
	require.NoError(t, err)
	closed, err := c.Terminate(ctx, done.ExecutionID, "too late")
	require.NoError(t, err)
	require.Equal(t, client.StatusCompleted, closed.Status)
	require.NotContains(t, stacktest.HistoryTypes(t, s, done.ExecutionID), "WorkflowTerminated")

	// Unknown executions.
	_, err = c.Terminate(ctx, "01a23712-0000-7000-8000-000000000000", "")
	require.ErrorIs(t, err, client.ErrExecutionNotFound)
	require.Equal(t, 400, terminate("not-a-uuid/terminate", ``).Status, "not an execution id")
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM history_events WHERE type = 'WorkflowTerminated'`))
}
