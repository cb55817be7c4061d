package workerrt_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// registerKin registers the workflows of the children stack tests.
func registerKin(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, "kin_square", func(ctx *harvest.WorkflowContext, n int) (int, error) { return n * n, nil })
	harvest.RegisterWorkflow(w, "kin_sum", func(ctx *harvest.WorkflowContext, n int) (int, error) {
		futures := make([]*harvest.Future, n)
		for i := range n {
			futures[i] = harvest.ExecuteChildWorkflow(ctx, "kin_square", i+1)
		}
		sum := 0
		for _, f := range futures {
			var v int
			if err := f.Get(&v); err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	})
	harvest.RegisterWorkflow(w, "kin_waiter", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
		_, err := harvest.NewSignal[string]("go").Receive(ctx)
		if harvest.IsCanceled(err) {
			return "cleaned up", nil
		}
		return "went", err
	})
	harvest.RegisterWorkflow(w, "kin_parent", func(ctx *harvest.WorkflowContext, policy string) (string, error) {
		waiter := harvest.ExecuteChildWorkflow(ctx, "kin_waiter", struct{}{}, harvest.ChildOptions{ParentClosePolicy: policy})
		missing := harvest.ExecuteChildWorkflow(ctx, "kin_nobody_serves", struct{}{})
		err := missing.Get(nil)
		if err := harvest.Await(ctx, func() bool { _, ok := waiter.ChildExecutionID(); return ok }); err != nil {
			return "", err
		}
		return fmt.Sprint(err), nil
	})
}

// TestChildWorkflowsInALiveStack: on PostgreSQL, with the children's
// starts and their reports going between shards through the command
// stream (and between stores, run by TestTheContractHoldsOnTwoStores), a
// parent that starts 40 children gets their 40 results, each started
// once; a child of a workflow no worker serves fails its Future with
// unknown_workflow and not the parent; the children list and
// parent_execution_id link both ways; and each parent-close policy holds
// when the parent completes while its child waits.
func TestChildWorkflowsInALiveStack(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Register: registerKin})
	sum := stacktest.StartWorkflow(t, s, "kin_sum", "", `{"input": 40}`)
	require.Equal(t, 201, sum.Status, sum.Body)
	id := sum.Body["execution_id"].(string)
	e := stacktest.WaitCompleted(t, s, id)
	require.EqualValues(t, 40*41*81/6, e["result"])
	types := stacktest.HistoryTypes(t, s, id)
	require.Equal(t, 40, count(types, "ChildWorkflowInitiated"))
	require.Equal(t, 40, count(types, "ChildWorkflowStarted"))
	require.Equal(t, 40, count(types, "ChildWorkflowCompleted"))
	kids := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id+"/children", nil, "")
	require.Equal(t, 200, kids.Status, kids.Body)
	list := kids.Body["children"].([]any)
	require.Len(t, list, 40)
	first := list[0].(map[string]any)
	require.Equal(t, "Completed", first["status"])
	require.Equal(t, id+"/child-1", first["workflow_id"])
	child := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+first["execution_id"].(string), nil, "")
	require.Equal(t, id, child.Body["parent_execution_id"])

	for policy, want := range map[string]string{"terminate": "Terminated", "request_cancel": "Cancelled", "abandon": "Running"} {
		p := stacktest.StartWorkflow(t, s, "kin_parent", "", fmt.Sprintf(`{"input": %q}`, policy))
		require.Equal(t, 201, p.Status, p.Body)
		pid := p.Body["execution_id"].(string)
		done := stacktest.WaitCompleted(t, s, pid)
		require.Contains(t, done["result"], "unknown_workflow", "the missing child failed its Future, not the parent")
		var waiter string
		probe.Until(t, 30*time.Second, "the waiter child listed", func() bool {
			r := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+pid+"/children", nil, "")
			for _, c := range r.Body["children"].([]any) {
				if c := c.(map[string]any); c["workflow_name"] == "kin_waiter" && c["execution_id"] != nil {
					waiter = c["execution_id"].(string)
				}
			}
			return waiter != ""
		})
		if want == "Running" {
			// Read on this goroutine (require.Never's condition runs on
			// one of its own, which could call the stack once the test
			// has stopped it): ten reads over two seconds.
			tick := time.NewTicker(200 * time.Millisecond)
			for range 10 {
				<-tick.C
				require.Equal(t, "Running", stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+waiter, nil, "").Body["status"],
					"an abandoned child runs on")
			}
			tick.Stop()
			continue
		}
		w := stacktest.WaitStatus(t, s, waiter, want)
		if want == "Cancelled" {
			require.Equal(t, "cleaned up", w["result"], "asked to cancel, its code cleaned up")
		}
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
