package scheduler_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// startTally starts a tally that completes on its first signal, under a
// concurrency policy of limit 2 keyed by /customer.
func startTally(t *testing.T, s *devstack.Stack, customer, key string) stacktest.Answer {
	t.Helper()
	return stacktest.StartWorkflow(t, s, "tally", key, fmt.Sprintf(
		`{"input": {"every": 100, "until": 1, "customer": %q}, "start_policy": {"concurrency": {"limit": 2, "key": "/customer"}}}`, customer))
}

func concurrencyOf(t *testing.T, s *devstack.Stack, key string) map[string]any {
	t.Helper()
	a := stacktest.Call(t, "GET", s.URL()+"/api/harvest/workflows/tally/concurrency?key="+key, nil, "")
	require.Equal(t, 200, a.Status, a.Body)
	return a.Body
}

func TestAConcurrencyPolicyRunsAtMostItsLimitPerKeyAndTheRestInOrder(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	var ids []string
	for i := range 4 {
		a := startTally(t, s, "c1", "")
		require.Equal(t, 201, a.Status, a.Body)
		want := "Running"
		if i >= 2 {
			want = "Pending"
		}
		require.Equal(t, want, a.Body["status"], "start %d", i)
		if want == "Pending" {
			require.Equal(t, "concurrency", a.Body["waiting_for"])
		}
		ids = append(ids, a.Body["execution_id"].(string))
	}
	other := startTally(t, s, "c2", "")
	require.Equal(t, "Running", other.Body["status"], "another key has its own slots")
	require.Equal(t, map[string]any{"workflow": "tally", "key": "c1", "running": 2.0, "pending": 2.0, "limit": 2.0}, concurrencyOf(t, s, "c1"))
	pending := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+ids[2], nil, "")
	require.Equal(t, "Pending", pending.Body["status"])
	require.Equal(t, "concurrency", pending.Body["waiting_for"])
	require.Equal(t, "c1", pending.Body["concurrency_key"])

	// A Pending execution takes signals; it sees them when it begins.
	sig := stacktest.Signal(t, s, ids[3], "add", "", "", "5")
	require.Equal(t, 202, sig.Status, sig.Body)

	// The first completes: the oldest Pending one begins.
	require.Equal(t, 202, stacktest.Signal(t, s, ids[0], "add", "", "", "1").Status)
	stacktest.WaitCompleted(t, s, ids[0])
	stacktest.WaitStatus(t, s, ids[2], "Running")
	require.Equal(t, "Pending", stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+ids[3], nil, "").Body["status"])

	// The second completes: the last begins, and completes on the signal
	// it was sent while it waited.
	require.Equal(t, 202, stacktest.Signal(t, s, ids[1], "add", "", "", "1").Status)
	stacktest.WaitCompleted(t, s, ids[3])
	require.Equal(t, 202, stacktest.Signal(t, s, ids[2], "add", "", "", "1").Status)
	stacktest.WaitCompleted(t, s, ids[2])
	probe.Until(t, 30*time.Second, "the key's slots to be free", func() bool {
		c := concurrencyOf(t, s, "c1")
		return c["running"] == 0.0 && c["pending"] == 0.0
	})

	// Their begin times never put three at once.
	var began, closed []time.Time
	for _, id := range ids {
		var b, c time.Time
		require.NoError(t, stacktest.ExecDB(s, id).QueryRow(t.Context(),
			`SELECT (concurrency->>'began_at')::timestamptz, closed_at FROM executions WHERE execution_id = $1`, id).Scan(&b, &c))
		began, closed = append(began, b), append(closed, c)
	}
	require.True(t, !began[2].Before(closed[0]), "the third began once the first closed")
	require.True(t, !began[3].Before(closed[1]), "the fourth began once the second closed")
}

func TestAPendingExecutionCancelledClosesAtOnceAndFreesItsPlace(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	a, b := startTally(t, s, "c1", "k-a"), startTally(t, s, "c1", "k-b")
	c := startTally(t, s, "c1", "k-c")
	require.Equal(t, "Pending", c.Body["status"])
	// A keyed start under the policy is answered again with its execution.
	again := startTally(t, s, "c1", "k-c")
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, c.Body["execution_id"], again.Body["execution_id"])

	id := c.Body["execution_id"].(string)
	cancel := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+id+"/cancel", nil, "")
	require.Equal(t, 200, cancel.Status, cancel.Body)
	require.Equal(t, "Cancelled", cancel.Body["status"])
	require.Equal(t, map[string]any{"workflow": "tally", "key": "c1", "running": 2.0, "pending": 0.0, "limit": 2.0}, concurrencyOf(t, s, "c1"))
	term := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+a.Body["execution_id"].(string)+"/terminate", nil, "")
	require.Equal(t, "Terminated", term.Body["status"])
	d := startTally(t, s, "c1", "")
	require.Equal(t, "Running", d.Body["status"], "a slot was given back")
	_ = b
}

func TestBadConcurrencyStartsAreRefused(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	for _, tc := range []struct {
		body, code, field string
		status            int
	}{
		{`{"input": {"every": 1}, "start_policy": {"concurrency": {"limit": 2, "key": "/customer"}}}`, "concurrency_key_missing", "input", 422},
		{`{"input": {"customer": "c"}, "start_policy": {"concurrency": {"limit": 0, "key": "/customer"}}}`, "invalid_start_policy", "start_policy.concurrency.limit", 400},
		{`{"input": {"customer": "c"}, "start_policy": {"concurrency": {"limit": 1, "key": "customer"}}}`, "invalid_start_policy", "start_policy.concurrency.key", 400},
		{`{"input": {"customer": "c"}, "workflow_id": "w", "start_policy": {"concurrency": {"limit": 1}}}`, "invalid_workflow_id", "workflow_id", 400},
	} {
		a := stacktest.StartWorkflow(t, s, "tally", "", tc.body)
		require.Equal(t, tc.status, a.Status, "%s: %v", tc.body, a.Body)
		require.Equal(t, tc.code, a.Body["error"], tc.body)
		require.Equal(t, tc.field, a.Body["field"], tc.body)
	}
}

func TestAPendingExecutionIsOpenToSignalWithStartAndARaisedLimitBeginsTheWaiting(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	start := func(limit int) stacktest.Answer {
		a := stacktest.StartWorkflow(t, s, "tally", "", fmt.Sprintf(
			`{"input": {"every": 100, "until": 1, "customer": "c9"}, "start_policy": {"concurrency": {"limit": %d, "key": "/customer"}}}`, limit))
		require.Equal(t, 201, a.Status, a.Body)
		return a
	}
	start(1)
	b := start(1)
	require.Equal(t, "Pending", b.Body["status"])
	// A signal-with-start naming the Pending execution's workflow_id
	// signals it: it is open, not closed.
	sws := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/tally/signal-with-start", nil,
		fmt.Sprintf(`{"workflow_id": %q, "signal_name": "add", "signal_payload": 1, "input": {"every": 100}}`, b.Body["workflow_id"]))
	require.Less(t, sws.Status, 300, sws.Body)
	require.Equal(t, b.Body["execution_id"], sws.Body["execution_id"])
	// A start that raises the key's limit to 3 makes two slots: the one
	// waiting begins, and so does it.
	c := start(3)
	require.Equal(t, "Pending", c.Body["status"], "it came after one that waits")
	stacktest.WaitCompleted(t, s, b.Body["execution_id"].(string)) // it had its signal
	stacktest.WaitStatus(t, s, c.Body["execution_id"].(string), "Running")
}

// TestAClosedRunUnderAConcurrencyPolicyIsResetIntoAFreeSlot: a reset of
// a closed execution that ran under a concurrency policy takes a slot of
// its key again, when one is free and nothing waits for one; while the
// key is full it is refused (409 reset_unsupported), and nothing
// changes. The new run holds its slot until it closes: a start behind it
// waits, and begins when it closes.
func TestAClosedRunUnderAConcurrencyPolicyIsResetIntoAFreeSlot(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	running := func(key string) (float64, float64) {
		c := concurrencyOf(t, s, key)
		return c["running"].(float64), c["pending"].(float64)
	}
	start := func() string {
		t.Helper()
		a := startTally(t, s, "c9", "")
		require.Equal(t, 201, a.Status, a.Body)
		return a.Body["execution_id"].(string)
	}
	complete := func(id string) {
		t.Helper()
		require.Equal(t, 202, stacktest.Signal(t, s, id, "add", "", "", "1").Status)
		stacktest.WaitCompleted(t, s, id)
	}
	reset := func(id string) stacktest.Answer {
		return stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+id+"/reset", nil, `{"to": "first_task", "reapply_signals": false}`)
	}

	done := start()
	complete(done)
	b, c := start(), start()
	require.Equal(t, "Running", stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+c, nil, "").Body["status"])
	r := reset(done)
	require.Equal(t, 409, r.Status, r.Body)
	require.Equal(t, "reset_unsupported", r.Body["error"], r.Body)
	require.Contains(t, r.Body["message"], "no free slot")
	require.Equal(t, "Completed", stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+done, nil, "").Body["status"], "nothing changed")

	complete(b)
	probe.Until(t, 30*time.Second, "the key to run one", func() bool {
		n, _ := running("c9")
		return n == 1
	})
	r = reset(done)
	require.Equal(t, 201, r.Status, r.Body)
	again := r.Body["execution_id"].(string)
	require.Equal(t, "Running", stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+again, nil, "").Body["status"])
	n, p := running("c9")
	require.Equal(t, []float64{2, 0}, []float64{n, p}, "the new run took the free slot")

	behind := start()
	require.Equal(t, "Pending", stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+behind, nil, "").Body["status"])
	complete(again)
	stacktest.WaitStatus(t, s, behind, "Running")
	complete(c)
	complete(behind)
	probe.Until(t, 30*time.Second, "the key's slots to be free", func() bool {
		n, p := running("c9")
		return n == 0 && p == 0
	})
}

// TestAChainKeepsItsFirstWorkflowsSlotAcrossWorkflows: a chain under a
// concurrency policy that continues as another workflow holds its first
// workflow's slot until it closes, and gives that one back; a reset of
// its running run keeps the slot, and a terminate and a reset sent back
// to back take it back once.
func TestAChainKeepsItsFirstWorkflowsSlotAcrossWorkflows(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Register: func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "cc_first", func(ctx *harvest.WorkflowContext, in struct{ Customer string }) (string, error) {
			return "", harvest.ContinueAsNew(ctx, in, harvest.ContinueAsNewOptions{WorkflowName: "cc_second"})
		})
		harvest.RegisterWorkflow(w, "cc_second", func(ctx *harvest.WorkflowContext, _ struct{ Customer string }) (string, error) {
			return harvest.NewSignal[string]("go").Receive(ctx)
		})
	}})
	counts := func(workflow string) (float64, float64) {
		a := stacktest.Call(t, "GET", s.URL()+"/api/harvest/workflows/"+workflow+"/concurrency?key=k1", nil, "")
		require.Equal(t, 200, a.Status, a.Body)
		return a.Body["running"].(float64), a.Body["pending"].(float64)
	}
	start := func() string {
		t.Helper()
		a := stacktest.StartWorkflow(t, s, "cc_first", "", `{"input": {"Customer": "k1"}, "start_policy": {"concurrency": {"limit": 1, "key": "/Customer"}}}`)
		require.Equal(t, 201, a.Status, a.Body)
		return stacktest.WaitStatus(t, s, a.Body["execution_id"].(string), "ContinuedAsNew")["continued_as"].(string)
	}
	waitTask := func(id string) {
		t.Helper()
		probe.Until(t, 30*time.Second, "the run's first task to complete", func() bool {
			return slices.Contains(stacktest.HistoryTypes(t, s, id), "WorkflowTaskCompleted")
		})
	}
	settled := func(want float64) {
		t.Helper()
		probe.Until(t, 30*time.Second, fmt.Sprintf("cc_first's key to run %v", want), func() bool {
			n, p := counts("cc_first")
			return n == want && p == 0
		})
		n, p := counts("cc_second")
		require.Equal(t, []float64{0, 0}, []float64{n, p}, "cc_second's key is not the chain's")
	}

	second := start()
	settled(1)
	// A reset of the running run keeps the chain's slot.
	waitTask(second)
	r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+second+"/reset", nil, `{"to": "first_task"}`)
	require.Equal(t, 201, r.Status, r.Body)
	third := r.Body["execution_id"].(string)
	settled(1)
	require.Equal(t, 202, stacktest.Signal(t, s, third, "go", "", "", `"now"`).Status)
	stacktest.WaitCompleted(t, s, third)
	settled(0)

	// A terminate and a reset of the same run, back to back: the reset,
	// of a run closed by then, takes the slot back once.
	fourth := start()
	waitTask(fourth)
	require.Equal(t, 200, stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+fourth+"/terminate", nil, `{}`).Status)
	r = stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+fourth+"/reset", nil, `{"to": "first_task", "reapply_signals": false}`)
	require.Equal(t, 201, r.Status, r.Body)
	settled(1)
	require.Equal(t, 202, stacktest.Signal(t, s, r.Body["execution_id"].(string), "go", "", "", `"now"`).Status)
	stacktest.WaitCompleted(t, s, r.Body["execution_id"].(string))
	settled(0)
}
