package workerrt_test

import (
	"testing"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestTimeoutsInALiveStack: a start's run_timeout closes a checkout
// waiting for its "ship" signal TimedOut on PostgreSQL's timers, at once
// without a cancel_grace, and after its compensations with one; bad
// timeouts are refused 400 invalid_timeout and start nothing.
func TestTimeoutsInALiveStack(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Scheduler: scheduler.Config{
		CancelGraceByWorkflow: map[string]time.Duration{examples.WorkflowCheckout: time.Minute},
	}})
	bare := stacktest.StartWorkflow(t, s, examples.WorkflowCollect, "", `{"input": {"count": 2}, "run_timeout": "1s"}`)
	require.Equal(t, 201, bare.Status, bare.Body)
	id := bare.Body["execution_id"].(string)
	e := stacktest.WaitStatus(t, s, id, "TimedOut")
	require.Equal(t, "TimedOut", e["error"].(map[string]any)["type"])
	require.NotEmpty(t, e["run_deadline"])
	types := stacktest.HistoryTypes(t, s, id)
	require.Equal(t, "WorkflowTimedOut", types[len(types)-1])
	require.NotContains(t, types, "WorkflowCancelRequested", "collect has no cancel_grace: closed at once")

	// An execution timeout bounds the chain: tally continues as new on
	// each signal, and its chain closes TimedOut when the timeout ends.
	chain := stacktest.StartWorkflow(t, s, examples.WorkflowTally, "", `{"input": {"every": 1}, "execution_timeout": "3s"}`)
	require.Equal(t, 201, chain.Status, chain.Body)
	first := chain.Body["execution_id"].(string)
	require.Equal(t, 202, stacktest.Signal(t, s, first, "add", "", "", `1`).Status)
	var newest string
	probe.Until(t, 30*time.Second, "tally's second run", func() bool {
		newest, _ = stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+first, nil, "").Body["continued_as"].(string)
		return newest != ""
	})
	n := stacktest.WaitStatus(t, s, newest, "TimedOut")
	require.Contains(t, n["error"].(map[string]any)["message"], "execution_timeout of 3s passed")
	require.Equal(t, stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+first, nil, "").Body["execution_deadline"], n["execution_deadline"],
		"the chain's deadline, carried to its next run")

	graced := stacktest.StartWorkflow(t, s, examples.WorkflowCheckout, "", `{"input": {"order_id": "o-1"}, "run_timeout": "2s", "execution_timeout": "1h"}`)
	require.Equal(t, 201, graced.Status, graced.Body)
	id = graced.Body["execution_id"].(string)
	e = stacktest.WaitStatus(t, s, id, "TimedOut")
	require.Equal(t, map[string]any{"done": []any{"checkout_reserve", "checkout_charge"}, "undone": []any{"checkout_refund", "checkout_release"}}, e["result"],
		"its grace let it undo what it did")
	types = stacktest.HistoryTypes(t, s, id)
	require.Contains(t, types, "WorkflowCancelRequested")
	require.Equal(t, "WorkflowTimedOut", types[len(types)-1])

	for _, body := range []string{
		`{"run_timeout": "0s"}`, `{"run_timeout": "-1s"}`, `{"execution_timeout": "87601h"}`, `{"run_timeout": "soon"}`,
		`{"run_timeout": "2h", "execution_timeout": "1h"}`,
	} {
		r := stacktest.StartWorkflow(t, s, examples.WorkflowCheckout, "", body)
		require.Equal(t, 400, r.Status, body)
		require.Equal(t, "invalid_timeout", r.Body["error"], body)
	}
}

// TestTenParallelCancelsAskOnce: ten cancels of a waiting checkout sent
// at once each answer 200 with the execution asked to cancel (or closed
// by then), and its history holds one WorkflowCancelRequested; the saga
// undoes its two steps once.
func TestTenParallelCancelsAskOnce(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	r := stacktest.StartWorkflow(t, s, examples.WorkflowCheckout, "", `{"input": {"order_id": "o-9"}}`)
	require.Equal(t, 201, r.Status, r.Body)
	id := r.Body["execution_id"].(string)
	probe.Until(t, 30*time.Second, "checkout waiting to ship", func() bool {
		return count(stacktest.HistoryTypes(t, s, id), "ActivityCompleted") == 2
	})
	var wg conc.WaitGroup
	answers := make([]stacktest.Answer, 10)
	for i := range answers {
		wg.Go(func() {
			answers[i] = stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+id+"/cancel", nil, `{"reason": "ten at once"}`)
		})
	}
	wg.Wait()
	for _, a := range answers {
		require.Equal(t, 200, a.Status, a.Body)
		require.Contains(t, []any{"Running", "Cancelled"}, a.Body["status"], a.Body)
	}
	e := stacktest.WaitStatus(t, s, id, "Cancelled")
	require.Equal(t, map[string]any{"done": []any{"checkout_reserve", "checkout_charge"}, "undone": []any{"checkout_refund", "checkout_release"}}, e["result"])
	types := stacktest.HistoryTypes(t, s, id)
	require.Equal(t, 1, count(types, "WorkflowCancelRequested"))
	require.Equal(t, 4, count(types, "ActivityCompleted"), "two steps, two compensations, once each")
}
