package scheduler_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// provider is a payment provider's fake: it records each call by its
// idempotency key, and is down while outage is set.
type provider struct {
	outage atomic.Bool
	mu     sync.Mutex
	calls  map[string][]string // activity name -> keys, in call order
}

func (p *provider) call(name, key string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == nil {
		p.calls = map[string][]string{}
	}
	p.calls[name] = append(p.calls[name], key)
	if name == "charge_payment" && p.outage.Load() {
		return harvest.NewNonRetryableError("ProviderDown", "the provider is down")
	}
	return nil
}

func (p *provider) keys(name string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls[name]...)
}

// resetStack runs the "order" workflow: reserve, wait for the signal
// "approve", charge the card.
func resetStack(t *testing.T, p *provider) *devstack.Stack {
	return stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{DisableEagerActivities: true}, Register: func(w *harvest.Worker) {
		for _, name := range []string{"reserve_stock", "charge_payment"} {
			harvest.RegisterActivity(w, name, func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
				return name + " done", p.call(name, ctx.IdempotencyKey().String())
			}, harvest.ActivityOptions{StartToClose: time.Minute, RetryPolicy: &harvest.RetryPolicy{MaximumAttempts: 1}})
		}
		harvest.RegisterWorkflow(w, "order", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			var out string
			if err := harvest.ExecuteActivity(ctx, "reserve_stock", nil).Get(&out); err != nil {
				return "", err
			}
			var approval string
			if err := harvest.GetSignalChannel(ctx, "approve").Receive(&approval); err != nil {
				return "", err
			}
			if err := harvest.ExecuteActivity(ctx, "charge_payment", nil).Get(&out); err != nil {
				return "", err
			}
			return out + " (" + approval + ")", nil
		})
	}})
}

func execution(t *testing.T, s *devstack.Stack, id string) map[string]any {
	t.Helper()
	return stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "").Body
}

func waitStatus(t *testing.T, s *devstack.Stack, id, status string) map[string]any {
	t.Helper()
	var e map[string]any
	probe.Until(t, 30*time.Second, fmt.Sprintf("execution %s to be %s", id, status), func() bool {
		e = execution(t, s, id)
		return e["status"] == status
	})
	return e
}

// TestResetToTheFailedActivityRunsItAgainWithItsKey: an execution failed
// by a provider outage at charge_card is reset to that activity. The new
// run keeps the events before the task that scheduled it (reserve is not
// run again, the approval is kept), charges the card with the key the
// failed attempt had, and completes; the runs are linked both ways. The
// same reset again answers the same run; a reset of the old run to
// another point, an invalid point, a bad body and an unknown execution
// are refused and change nothing.
func TestResetToTheFailedActivityRunsItAgainWithItsKey(t *testing.T) {
	t.Parallel()
	p := &provider{}
	p.outage.Store(true)
	s := resetStack(t, p)
	id := stacktest.StartWorkflow(t, s, "order", "order-key-1", `{"workflow_id": "order-1"}`).Body["execution_id"].(string)
	probe.Until(t, 30*time.Second, "reserve to run", func() bool { return len(p.keys("reserve_stock")) == 1 })
	require.Equal(t, true, stacktest.Signal(t, s, id, "approve", "approve-1", "", `"by ops"`).Body["signal_delivered"])
	failed := waitStatus(t, s, id, "Failed")
	require.Len(t, p.keys("charge_payment"), 1)
	chargeKey := p.keys("charge_payment")[0]
	reset := func(target, query, body string) stacktest.Answer {
		return stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+target+"/reset"+query, nil, body)
	}

	// Refused: nothing changes.
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{``, 400, "invalid_reset_point"},
		{`{"to": "middle"}`, 400, "invalid_reset_point"},
		{`{"to": {"seq": 3, "activity": "reserve_stock"}}`, 400, "invalid_reset_point"},
		{`{"to": {"activity": "reserve_stock", "occurrence": "second"}}`, 400, "invalid_reset_point"},
		{`{"to": "first_task", "force": true}`, 400, "unknown_field"},
		{`{"to": {"seq": 1}}`, 422, "invalid_reset_point"},
		{`{"to": {"activity": "refund"}}`, 422, "invalid_reset_point"},
		{`{"to": {"activity": "reserve_stock", "occurrence": "last_failed"}}`, 422, "invalid_reset_point"},
	} {
		r := reset(id, "", tc.body)
		require.Equal(t, tc.status, r.Status, "%s: %v", tc.body, r.Body)
		require.Equal(t, tc.code, r.Body["error"], r.Body)
		if tc.status == 422 {
			require.NotEmpty(t, r.Body["message"])
		}
	}
	r := reset(id, "", `{"to": {"seq": 1}}`)
	require.Equal(t, []any{float64(2)}, r.Body["nearest_points"], "the first task is the one valid point after seq 1: %v", r.Body)
	require.Equal(t, 400, reset(id, "?dry_run=maybe", `{"to": "first_task"}`).Status)
	require.Equal(t, 404, reset("6f1c7d7e-1111-4222-8333-944444444444", "", `{"to": "first_task"}`).Status)
	require.Equal(t, failed["history_length"], execution(t, s, id)["history_length"])

	// The dry run to the first task: everything after it runs again, the
	// signal is received again with its key.
	plan := reset(id, "?dry_run=true", `{"to": "first_task"}`)
	require.Equal(t, 200, plan.Status, plan.Body)
	require.Equal(t, true, plan.Body["dry_run"])
	require.Equal(t, float64(1), plan.Body["events_kept"])
	rerun := plan.Body["activities_rerun"].([]any)
	require.Len(t, rerun, 2)
	require.Equal(t, "reserve_stock", rerun[0].(map[string]any)["activity_name"])
	require.Equal(t, p.keys("reserve_stock")[0], rerun[0].(map[string]any)["idempotency_key"])
	require.Equal(t, chargeKey, rerun[1].(map[string]any)["idempotency_key"])
	sigs := plan.Body["signals_reapplied"].([]any)
	require.Len(t, sigs, 1)
	require.Equal(t, "approve-1", sigs[0].(map[string]any)["idempotency_key"])
	require.Equal(t, failed["history_length"], execution(t, s, id)["history_length"], "a dry run changes nothing")

	// The reset, with the provider back.
	p.outage.Store(false)
	r = reset(id, "", `{"to": {"activity": "charge_payment", "occurrence": "last_failed"}, "reason": "provider outage"}`)
	require.Equal(t, 201, r.Status, r.Body)
	newID := r.Body["execution_id"].(string)
	require.NotEqual(t, id, newID)
	require.Equal(t, id, r.Body["reset_from"])
	require.Equal(t, "order-1", r.Body["workflow_id"])
	point := r.Body["point_seq"]
	done := waitStatus(t, s, newID, "Completed")
	require.Equal(t, "charge_payment done (by ops)", done["result"])
	require.Equal(t, id, done["reset_from"])
	require.Equal(t, point, done["reset_point"])
	require.Equal(t, "order-key-1", done["idempotency_key"], "the run keeps its first run's key")
	require.NotNil(t, done["idempotency_claim"], "and the key's claim, which names the first run: %v", done)
	old := execution(t, s, id)
	require.Equal(t, "Failed", old["status"], "a closed run keeps how it closed")
	require.Equal(t, newID, old["reset_to"])
	require.Nil(t, old["continued_as"])
	require.Len(t, p.keys("reserve_stock"), 1, "reserve ran once")
	require.Equal(t, []string{chargeKey, chargeKey}, p.keys("charge_payment"), "the charge ran again with its key")
	oldTypes, newTypes := stacktest.HistoryTypes(t, s, id), stacktest.HistoryTypes(t, s, newID)
	kept := int(point.(float64)) - 1
	require.Equal(t, oldTypes[:kept], newTypes[:kept], "the new run starts with the events before the point")

	// The same reset again answers the run it made; another point is
	// refused: the old run is no longer its chain's newest.
	again := reset(id, "", `{"to": {"activity": "charge_payment", "occurrence": "last_failed"}}`)
	require.Equal(t, 201, again.Status, again.Body)
	require.Equal(t, newID, again.Body["execution_id"])
	require.Equal(t, true, again.Body["deduplicated"])
	other := reset(id, "", `{"to": "first_task"}`)
	require.Equal(t, 409, other.Status, other.Body)
	require.Equal(t, "execution_not_latest", other.Body["error"])
	require.Contains(t, other.Body["message"], newID)

	// The new run reset to its first task: reserve runs again, with the
	// key it had in the first run.
	r = reset(newID, "", `{"to": "first_task"}`)
	require.Equal(t, 201, r.Status, r.Body)
	third := r.Body["execution_id"].(string)
	waitStatus(t, s, third, "Completed")
	reserveKeys := p.keys("reserve_stock")
	require.Len(t, reserveKeys, 2)
	require.Equal(t, reserveKeys[0], reserveKeys[1], "the same activity at the same position keeps its key across resets")
}

// TestResetOfARunningExecutionTerminatesIt: a running execution reset to
// its first task closes Terminated, naming the new run; the new run gets
// the signal the old one had, once; a signal sent to the old run's id
// reaches the new run.
func TestResetOfARunningExecutionTerminatesIt(t *testing.T) {
	t.Parallel()
	p := &provider{}
	s := resetStack(t, p)
	id := stacktest.StartWorkflow(t, s, "order", "", `{"workflow_id": "order-2"}`).Body["execution_id"].(string)
	probe.Until(t, 30*time.Second, "reserve to run", func() bool { return len(p.keys("reserve_stock")) == 1 })
	probe.Until(t, 30*time.Second, "the workflow to wait for its signal", func() bool {
		types := stacktest.HistoryTypes(t, s, id)
		return len(types) >= 4 && types[len(types)-1] == "WorkflowTaskCompleted"
	})
	r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+id+"/reset", nil, `{"to": "first_task", "reason": "bad deploy"}`)
	require.Equal(t, 201, r.Status, r.Body)
	newID := r.Body["execution_id"].(string)
	// The same reset as a command of its own, as a retry whose first
	// answer was a 202: its outcome, read by its id, is the reset's
	// answer, naming the run it made.
	point := int(r.Body["point_seq"].(float64))
	cmd := wire.Command{CommandID: dedup.NewID(), Kind: wire.KindReset, Reset: &wire.ResetCommand{ExecutionID: id, PointSeq: point}}
	_, err := s.Topology.PublishCommand(t.Context(), s.Topology.Layout().ExecutionShard(id), &cmd)
	require.NoError(t, err)
	var got map[string]any
	probe.Until(t, 30*time.Second, "the retried reset's outcome", func() bool {
		got = stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/"+cmd.CommandID, nil, "").Body
		return got["status"] == "applied"
	})
	require.Equal(t, float64(201), got["http_status"], got)
	require.Equal(t, map[string]any{"execution_id": newID, "status": "Running", "workflow_id": "order-2", "workflow_name": "order",
		"reset_from": id, "point_seq": float64(point), "deduplicated": true}, got["outcome"])
	old := waitStatus(t, s, id, "Terminated")
	require.Equal(t, newID, old["reset_to"])
	types := stacktest.HistoryTypes(t, s, id)
	require.Equal(t, "WorkflowTerminated", types[len(types)-1])
	probe.Until(t, 30*time.Second, "reserve to run again", func() bool { return len(p.keys("reserve_stock")) == 2 })
	require.Equal(t, p.keys("reserve_stock")[0], p.keys("reserve_stock")[1])
	// The signal goes to the old run's id: it reaches the new run.
	sig := stacktest.Signal(t, s, id, "approve", "approve-2", "", `"late"`)
	require.Equal(t, true, sig.Body["signal_delivered"], sig.Body)
	done := waitStatus(t, s, newID, "Completed")
	require.Equal(t, "charge_payment done (late)", done["result"])
	require.Len(t, p.keys("charge_payment"), 1)
	require.Equal(t, id, execution(t, s, newID)["reset_from"])
}
