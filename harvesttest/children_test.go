package harvesttest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/harvesttest"
)

// registerFamily registers the workflows the children tests run: a
// parent that fans out "double" children and adds their results, a
// child that waits for a signal, and a parent that leaves its children
// running under a policy.
func registerFamily(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, "double", func(ctx *harvest.WorkflowContext, n int) (int, error) {
		if n < 0 {
			return 0, harvest.NewNonRetryableError("Negative", "cannot double %d", n)
		}
		return 2 * n, nil
	})
	harvest.RegisterWorkflow(w, "fanout_sum", func(ctx *harvest.WorkflowContext, n int) (int, error) {
		futures := make([]*harvest.Future, n)
		for i := range n {
			futures[i] = harvest.ExecuteChildWorkflow(ctx, "double", i+1)
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
	harvest.RegisterWorkflow(w, "waiter", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
		v, err := harvest.NewSignal[string]("go").Receive(ctx)
		if harvest.IsCanceled(err) {
			return "cleaned up", nil
		}
		return "got " + v, err
	})
	type spawn struct {
		Policy string `json:"policy"`
		// Continue makes the parent continue as new once, after starting
		// its child, before it returns.
		Continue bool `json:"continue"`
		Runs     int  `json:"runs"`
	}
	harvest.RegisterWorkflow(w, "spawner", func(ctx *harvest.WorkflowContext, in spawn) (string, error) {
		in.Runs++
		if in.Runs == 1 {
			f := harvest.ExecuteChildWorkflow(ctx, "waiter", struct{}{}, harvest.ChildOptions{ParentClosePolicy: in.Policy, WorkflowID: "kid-" + in.Policy})
			// Its start is told before the parent goes on.
			if err := harvest.Await(ctx, func() bool { _, ok := f.ChildExecutionID(); return ok || f.IsReady() }); err != nil {
				return "", err
			}
			if in.Continue {
				return "", harvest.ContinueAsNew(ctx, in)
			}
		}
		if _, err := harvest.NewSignal[string]("finish").Receive(ctx); err != nil {
			return "", err
		}
		return "done", nil
	})
	harvest.RegisterWorkflow(w, "broken_parent", func(ctx *harvest.WorkflowContext, which string) (string, error) {
		var opts harvest.ChildOptions
		name := "double"
		switch which {
		case "unknown":
			name = "no_such_workflow"
		case "taken":
			opts = harvest.ChildOptions{WorkflowID: "taken-id", ReusePolicy: client.ReuseRejectDuplicate}
			name = "waiter"
		case "taken-default":
			// allow_duplicate: a client's start would find the running
			// execution; a child never takes one it did not start.
			opts = harvest.ChildOptions{WorkflowID: "taken-id"}
			name = "waiter"
		}
		in := -1
		err := harvest.ExecuteChildWorkflow(ctx, name, in, opts).Get(nil)
		var ce *harvest.ChildWorkflowError
		if !errors.As(err, &ce) {
			return "", fmt.Errorf("want a ChildWorkflowError, got %v", err)
		}
		return ce.Status + "/" + ce.Code + ce.Type, nil
	})
	harvest.RegisterWorkflow(w, "nudger", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
		f := harvest.ExecuteChildWorkflow(ctx, "waiter", struct{}{})
		if err := harvest.SignalExternalWorkflowByID(ctx, "waiter", f.ChildWorkflowID(), "go", "nudged").Get(nil); err != nil {
			return "", err
		}
		var out string
		err := f.Get(&out)
		return out, err
	})
}

// TestAParentFansOutChildren: a parent that starts 50 children gets
// their 50 results, each child started once (one execution per derived
// workflow_id, with parent_execution_id), and the history replays.
func TestAParentFansOutChildren(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env, err := harvesttest.New(registerFamily, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "fanout_sum", 50)
	require.NoError(t, err)
	var sum int
	require.NoError(t, x.Result(&sum))
	require.Equal(t, 50*51, sum)
	require.Equal(t, 50, events(x, "ChildWorkflowInitiated"))
	require.Equal(t, 50, events(x, "ChildWorkflowStarted"))
	require.Equal(t, 50, events(x, "ChildWorkflowCompleted"))
	kids := map[string]bool{}
	for _, ev := range mustHistory(t, x) {
		if ev.Type == "ChildWorkflowStarted" {
			id := ev.Attrs["execution_id"].(string)
			kd, err := env.Execution(id).Describe()
			require.NoError(t, err)
			require.Equal(t, x.ID, kd.ParentExecutionID)
			kids[kd.WorkflowID] = true
		}
	}
	require.Len(t, kids, 50, "one child per derived workflow_id")
	require.True(t, kids[x.ID+"/child-50"])
	require.NoError(t, x.Replay(registerFamily))
}

// TestAChildThatCannotStartFailsItsFutureNotItsParent: a child of a
// workflow no worker serves, one whose workflow_id is running under
// reject_duplicate, and one that fails each fail the child's Future with
// a ChildWorkflowError the parent handles.
func TestAChildThatCannotStartFailsItsFutureNotItsParent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env, err := harvesttest.New(registerFamily, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	_, err = env.Start(ctx, "waiter", struct{}{}, harvesttest.StartOptions{WorkflowID: "taken-id"})
	require.NoError(t, err)
	for which, want := range map[string]string{
		"unknown":       "StartFailed/unknown_workflow",
		"taken":         "StartFailed/workflow_id_conflict",
		"taken-default": "StartFailed/workflow_id_conflict",
		"failing":       "Failed/Negative",
	} {
		x, err := env.Start(ctx, "broken_parent", which)
		require.NoError(t, err)
		var got string
		require.NoError(t, x.Result(&got), which)
		require.Equal(t, want, got, which)
	}
}

// TestParentClosePolicies: when the parent's chain closes, a child still
// running is terminated (the default), asked to cancel (its code cleans
// up), or left running; also when the parent continued as new after
// starting it, the policy applying only when the chain closes.
func TestParentClosePolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy     string
		continued  bool
		wantStatus string
	}{
		{"", false, client.StatusTerminated},
		{harvest.ParentCloseRequestCancel, false, client.StatusCancelled},
		{harvest.ParentCloseAbandon, false, client.StatusRunning},
		{"", true, client.StatusTerminated},
		{harvest.ParentCloseRequestCancel, true, client.StatusCancelled},
	} {
		t.Run(fmt.Sprintf("%s/continued=%v", tc.policy, tc.continued), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			env, err := harvesttest.New(registerFamily, harvesttest.Config{})
			require.NoError(t, err)
			defer env.Close()
			x, err := env.Start(ctx, "spawner", map[string]any{"policy": tc.policy, "continue": tc.continued})
			require.NoError(t, err)
			d, err := x.Describe()
			require.NoError(t, err)
			kidID := ""
			for _, ev := range mustHistory(t, x) {
				if ev.Type == "ChildWorkflowStarted" {
					kidID = ev.Attrs["execution_id"].(string)
				}
			}
			require.NotEmpty(t, kidID)
			kid := env.Execution(kidID)
			kd, err := kid.Describe()
			require.NoError(t, err)
			require.Equal(t, x.ID, kd.ParentExecutionID)
			require.Equal(t, client.StatusRunning, kd.Status)
			newest := x
			if tc.continued {
				require.Equal(t, client.StatusContinuedAsNew, d.Status)
				newest = env.Execution(d.ContinuedAs)
				kd, err = kid.Describe()
				require.NoError(t, err)
				require.Equal(t, client.StatusRunning, kd.Status, "a continue-as-new closes nothing of its children")
			}
			_, err = newest.Signal(ctx, "finish", "now")
			require.NoError(t, err)
			status, err := newest.Status()
			require.NoError(t, err)
			require.Equal(t, client.StatusCompleted, status)
			kd, err = kid.Describe()
			require.NoError(t, err)
			require.Equal(t, tc.wantStatus, kd.Status)
			if tc.wantStatus == client.StatusCancelled {
				require.JSONEq(t, `"cleaned up"`, string(kd.Result), "its code cleaned up")
			}
		})
	}
}

// TestCancellingAParentCancelsItsChildren: a parent cancelled while it
// waits for a child asks the child to cancel; the child cleans up.
func TestCancellingAParentCancelsItsChildren(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env, err := harvesttest.New(registerFamily, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "spawner", map[string]any{"policy": harvest.ParentCloseAbandon})
	require.NoError(t, err)
	require.NoError(t, x.Cancel(ctx, "stop"))
	status, err := x.Status()
	require.NoError(t, err)
	require.Equal(t, client.StatusCancelled, status)
	kid := env.Execution(childOf(t, x))
	kd, err := kid.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusCancelled, kd.Status, "its parent's cancellation reached it")
	require.NoError(t, x.Replay(registerFamily))
}

// TestASignalToAChildByItsWorkflowID: a parent signals its child by the
// workflow_id derived for it, once, and gets the child's answer.
func TestASignalToAChildByItsWorkflowID(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env, err := harvesttest.New(registerFamily, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "nudger", struct{}{})
	require.NoError(t, err)
	var out string
	require.NoError(t, x.Result(&out))
	require.Equal(t, "got nudged", out)
	require.Equal(t, 1, events(x, "ExternalSignalDelivered"))
	require.NoError(t, x.Replay(registerFamily))
}

func mustHistory(t *testing.T, x *harvesttest.Execution) []client.Event {
	t.Helper()
	h, err := x.History()
	require.NoError(t, err)
	return h
}

func childOf(t *testing.T, x *harvesttest.Execution) string {
	t.Helper()
	for _, ev := range mustHistory(t, x) {
		if ev.Type == "ChildWorkflowStarted" {
			return ev.Attrs["execution_id"].(string)
		}
	}
	t.Fatal("no child started")
	return ""
}

// TestCheckoutBatch: the example batch checks out each order as a child,
// ships them by signalling each child by its workflow_id, and returns
// each child's result; cancelled while its children wait for the
// warehouse, its cancellation reaches them and each undoes its steps.
func TestCheckoutBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	register := func(w *harvest.Worker) { examples.Register(w, examples.NewServices()) }
	env, err := harvesttest.New(register, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, examples.WorkflowCheckoutBatch, examples.CheckoutBatchInput{Orders: []string{"a", "b", "c"}, Ship: true})
	require.NoError(t, err)
	var out examples.CheckoutBatchResult
	require.NoError(t, x.Result(&out))
	require.Len(t, out.Orders, 3)
	require.Len(t, out.Orders["b"].Done, 3)
	require.Equal(t, 3, events(x, "ExternalSignalDelivered"))
	require.NoError(t, x.Replay(register))

	y, err := env.Start(ctx, examples.WorkflowCheckoutBatch, examples.CheckoutBatchInput{Orders: []string{"d", "e"}})
	require.NoError(t, err)
	require.NoError(t, y.Cancel(ctx, "customer left"))
	status, err := y.Status()
	require.NoError(t, err)
	require.Equal(t, client.StatusCancelled, status)
	kids := 0
	for _, ev := range mustHistory(t, y) {
		if ev.Type != "ChildWorkflowStarted" {
			continue
		}
		kids++
		kd, err := env.Execution(ev.Attrs["execution_id"].(string)).Describe()
		require.NoError(t, err)
		require.Equal(t, client.StatusCancelled, kd.Status)
		var r examples.CheckoutResult
		require.NoError(t, json.Unmarshal(kd.Result, &r))
		require.Equal(t, []string{examples.ActivityCheckoutRefund, examples.ActivityCheckoutRelease}, r.Undone)
	}
	require.Equal(t, 2, kids)
}

// TestHostileChildInputIsRefusedInTheSDK: a child's input or a signal's
// payload Harvest cannot store (a NUL, nesting deeper than PostgreSQL
// takes) fails its Future in the code, which can handle it; the parent's
// task is never one the scheduler cannot record.
func TestHostileChildInputIsRefusedInTheSDK(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	deep := json.RawMessage(strings.Repeat("[", 600) + strings.Repeat("]", 600))
	env, err := harvesttest.New(func(w *harvest.Worker) {
		registerFamily(w)
		harvest.RegisterWorkflow(w, "hostile_parent", func(ctx *harvest.WorkflowContext, _ struct{}) ([]string, error) {
			var out []string
			for _, f := range []*harvest.Future{
				harvest.ExecuteChildWorkflow(ctx, "double", "a\x00b"),
				harvest.ExecuteChildWorkflow(ctx, "double", deep),
				harvest.SignalExternalWorkflow(ctx, ctx.Info().ExecutionID, "s", "a\x00b"),
			} {
				out = append(out, fmt.Sprint(f.Get(nil) != nil))
			}
			var v int
			err := harvest.ExecuteChildWorkflow(ctx, "double", 4).Get(&v)
			return append(out, fmt.Sprint(v)), err
		})
	}, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "hostile_parent", struct{}{})
	require.NoError(t, err)
	var out []string
	require.NoError(t, x.Result(&out))
	require.Equal(t, []string{"true", "true", "true", "8"}, out, "each refused in the code; the next child runs")
	require.Equal(t, 1, events(x, "ChildWorkflowInitiated"))
}

// TestAPriorityIsInheritedByChildrenAndContinuedRuns: a parent started
// at priority 4 keeps it in the run it continues as, and its child,
// given none, runs at it too.
func TestAPriorityIsInheritedByChildrenAndContinuedRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env, err := harvesttest.New(registerFamily, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "spawner", map[string]any{"policy": harvest.ParentCloseAbandon, "continue": true}, harvesttest.StartOptions{Priority: 4})
	require.NoError(t, err)
	d, err := x.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusContinuedAsNew, d.Status)
	require.Equal(t, 4, d.Priority)
	next, err := env.Execution(d.ContinuedAs).Describe()
	require.NoError(t, err)
	require.Equal(t, 4, next.Priority, "the continued run keeps the priority")
	kidID := ""
	for _, ev := range mustHistory(t, x) {
		if ev.Type == "ChildWorkflowStarted" {
			kidID = ev.Attrs["execution_id"].(string)
		}
	}
	require.NotEmpty(t, kidID)
	kd, err := env.Execution(kidID).Describe()
	require.NoError(t, err)
	require.Equal(t, 4, kd.Priority, "a child given no priority runs at its parent's")
}
