package workerrt_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestDescribeSaysWhichSignalAnExecutionWaitsFor: on the stack (the
// scheduler keeping it in PostgreSQL), describe says a running execution
// waits for the signal "approve" by name; once the signal came, for its
// activity, whose attempt fails and waits an hour to be tried again (the
// pending activity says so too, with the failure: an eager attempt 1
// that failed is recorded so); once terminated, for nothing.
func TestDescribeSaysWhichSignalAnExecutionWaitsFor(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Register: func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "refuse", func(ctx *harvest.ActivityContext, _ struct{}) (struct{}, error) {
			return struct{}{}, harvest.NewError("Refused", "not now")
		})
		harvest.RegisterWorkflow(w, "approval", func(ctx *harvest.WorkflowContext, _ struct{}) (struct{}, error) {
			if _, err := harvest.NewSignal[string]("approve").Receive(ctx); err != nil {
				return struct{}{}, err
			}
			return struct{}{}, harvest.ExecuteActivity(ctx, "refuse", struct{}{}, harvest.ActivityOptions{
				RetryPolicy: &harvest.RetryPolicy{InitialInterval: time.Hour, BackoffCoefficient: 1}}).Get(nil)
		})
	}})
	ctx := natstest.Context(t)
	c, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)
	id := stacktest.StartWorkflow(t, s, "approval", "", `{"input": {}}`).Body["execution_id"].(string)

	var e *client.Execution
	waitsFor := func(what string, ok func(w []client.Wait) bool) {
		t.Helper()
		probe.Until(t, 30*time.Second, what, func() bool {
			e, err = c.Describe(ctx, id)
			require.NoError(t, err)
			return e.WaitingOn != nil && ok(e.WaitingOn.Waits)
		})
	}
	waitsFor("the signal approve", func(w []client.Wait) bool {
		return len(w) == 1 && reflect.DeepEqual(w[0], client.Wait{Goroutine: "workflow function", WaitCase: client.WaitCase{Kind: api.WaitSignal, Name: "approve"}})
	})
	require.Positive(t, e.WaitingOn.Seq)
	stacktest.Signal(t, s, id, "approve", "", "", `"yes"`)
	waitsFor("the activity refuse", func(w []client.Wait) bool {
		return len(w) == 1 && reflect.DeepEqual(w[0], client.Wait{Goroutine: "workflow function", WaitCase: client.WaitCase{Kind: api.WaitActivity, Name: "refuse", ID: 1}})
	})
	probe.Until(t, 30*time.Second, "the activity's retry", func() bool {
		e, err = c.Describe(ctx, id)
		require.NoError(t, err)
		return len(e.PendingActivities) == 1 && e.PendingActivities[0].State == api.ActivityRetrying
	})
	// Its attempt 1 ran eagerly, on the worker that ran the task: the
	// activity is recorded waiting for attempt 2, with when and why.
	p := e.PendingActivities[0]
	require.Equal(t, 2, p.Attempt)
	require.NotNil(t, p.NextAttemptAt)
	require.WithinDuration(t, time.Now().Add(time.Hour), *p.NextAttemptAt, 5*time.Minute)
	require.Contains(t, string(p.LastFailure), "not now")
	require.NotNil(t, e.WaitingOn, "the retry changes nothing the code waits for")

	_, err = c.Terminate(ctx, id, "enough")
	require.NoError(t, err)
	e, err = c.Describe(ctx, id)
	require.NoError(t, err)
	require.Equal(t, client.StatusTerminated, e.Status)
	require.Nil(t, e.WaitingOn, "a closed execution waits for nothing")
}
