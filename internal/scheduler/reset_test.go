package scheduler

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestAResetSetsAgainWhatTheKeptEventsLeftOpen: an execution whose first
// task scheduled activity 1 and a timer, and whose second task (after a
// signal) scheduled activity 2, is reset to its second task. The new run
// starts with the events that task saw, dispatches activity 1 again with
// its key, sets the timer again for when it was to fire, and its first
// task carries activity 2's key, which the same activity at the same
// position keeps and another activity does not. The old run closes
// Terminated, linked both ways. The reset applied again under another
// command id (after the broker's window) answers the run it made; a
// reset of the old run to another point, of an unknown execution, and to
// a point that is no workflow task are refused and change nothing.
func TestAResetSetsAgainWhatTheKeptEventsLeftOpen(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	m, apply := memoryShard(t, now)
	d := apply(&wire.Command{CommandID: "start", Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "order", WorkflowID: "order-1", TaskQueue: "default", Input: json.RawMessage(`1`)}})
	id := d.WorkflowTasks[0].ExecutionID
	act := func(n int, name string) wire.Decision {
		return wire.Decision{Type: wire.DecisionScheduleActivity, ActivityID: n, ActivityName: name, Input: json.RawMessage(`{}`)}
	}
	apply(&wire.Command{CommandID: "t1", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: id, TaskID: 1, BaseSeq: 1, Decisions: []wire.Decision{act(1, "reserve"),
			{Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: time.Hour.Milliseconds()}}}})
	apply(&wire.Command{CommandID: "sig", Kind: wire.KindSignal, Signal: &wire.SignalCommand{ExecutionID: id, SignalName: "go", IdempotencyKey: "k1"}})
	apply(&wire.Command{CommandID: "t2", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: id, TaskID: 2, BaseSeq: 5, Decisions: []wire.Decision{act(2, "charge")}}})
	_, oldHist, _ := m.Execution(id)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled, wire.EventTimerStarted,
		wire.EventSignalReceived, wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled}, types(oldHist))
	key1, key2 := dedup.ActivityKeyFor(id, 1).String(), dedup.ActivityKeyFor(id, 2).String()

	reset := func(cmdID, execID string, point int) Dispatched {
		return apply(&wire.Command{CommandID: cmdID, Kind: wire.KindReset,
			Reset: &wire.ResetCommand{ExecutionID: execID, PointSeq: point, ReapplySignals: true, Reason: "outage"}})
	}
	d = reset("reset-1", id, 6)
	require.Len(t, d.Outcomes, 1)
	out := d.Outcomes[0]
	require.Empty(t, out.Error)
	require.Equal(t, id, out.ResetFrom, "the outcome names the run it replaced")
	require.Equal(t, 6, out.PointSeq)
	newID := out.ExecutionID
	require.NotEqual(t, id, newID)
	require.Equal(t, wire.StatusRunning, out.Status)
	require.True(t, out.StartedFresh)

	old, oldHist, _ := m.Execution(id)
	require.Equal(t, wire.StatusTerminated, old.Status)
	require.Equal(t, newID, old.Reset.To)
	require.Equal(t, 6, old.Reset.ToSeq)
	require.Equal(t, "outage", old.Reset.Reason)
	last := oldHist[len(oldHist)-1]
	require.Equal(t, wire.EventWorkflowTerminated, last.Type)
	require.Contains(t, string(last.Attrs), `"reset_to":"`+newID+`"`)
	require.Equal(t, []string{id}, d.Cancelled, "the old run's running activities are stopped")

	next, nextHist, _ := m.Execution(newID)
	require.Equal(t, "order-1", next.WorkflowID)
	require.Equal(t, id, next.Reset.From)
	require.Equal(t, 6, next.Reset.FromSeq)
	require.Equal(t, id, next.Chain(), "the new run joins the old one's chain")
	require.Equal(t, oldHist[:5], nextHist, "the events the second task saw, as they were")
	require.Len(t, d.ActivityTasks, 1, "activity 1, open at the point, is dispatched again")
	require.Equal(t, newID, d.ActivityTasks[0].ExecutionID)
	require.Equal(t, 1, d.ActivityTasks[0].ActivityID)
	require.Equal(t, key1, d.ActivityTasks[0].IdempotencyKey)
	var sleeps []store.Timer
	for _, tm := range m.timers {
		if tm.ExecutionID == newID && tm.Kind == store.TimerWorkflow {
			sleeps = append(sleeps, tm)
		}
	}
	require.Len(t, sleeps, 1)
	require.Equal(t, now.Add(time.Hour), sleeps[0].FireAt, "the timer fires when it was to")
	require.JSONEq(t, `{"timer_id": 1}`, string(sleeps[0].Attrs))
	require.Len(t, d.WorkflowTasks, 1)
	task := d.WorkflowTasks[0]
	require.Equal(t, newID, task.ExecutionID)
	require.Equal(t, 2, task.TaskID, "the task run again")
	require.Equal(t, map[int]wire.ResetKey{2: {Name: "charge", Key: key2}}, task.ResetKeys)

	// The new run's code schedules charge again at position 2, and a new
	// activity at 3: the first keeps its key, the second gets its own.
	d = apply(&wire.Command{CommandID: "n2", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: newID, TaskID: 2, BaseSeq: 5, Decisions: []wire.Decision{act(2, "charge"), act(3, "notify")}}})
	keys := map[int]string{}
	for _, at := range d.ActivityTasks {
		keys[at.ActivityID] = at.IdempotencyKey
	}
	require.Equal(t, map[int]string{2: key2, 3: dedup.ActivityKeyFor(newID, 3).String()}, keys)

	// A signal to the old run reaches the new one.
	d = apply(&wire.Command{CommandID: "sig2", Kind: wire.KindSignal, Signal: &wire.SignalCommand{ExecutionID: id, SignalName: "go", IdempotencyKey: "k2"}})
	require.Equal(t, newID, d.Outcomes[0].ExecutionID)

	// The same reset under another command id: the run it made.
	d = reset("reset-again", id, 6)
	require.Len(t, d.Outcomes, 1)
	require.Equal(t, newID, d.Outcomes[0].ExecutionID)
	require.True(t, d.Outcomes[0].Deduplicated)
	require.Empty(t, d.Outcomes[0].Error)

	// Refused, changing nothing.
	_, before, _ := m.Execution(newID)
	for _, tc := range []struct {
		execID string
		point  int
		status int
		code   string
	}{
		{id, 2, http.StatusConflict, api.CodeExecutionNotLatest},
		{"6f1c7d7e-1111-4222-8333-944444444444", 2, http.StatusNotFound, api.CodeExecutionNotFound},
		{newID, 3, http.StatusUnprocessableEntity, api.CodeInvalidResetPoint},
	} {
		d = reset("bad-"+tc.execID[:8], tc.execID, tc.point)
		require.Len(t, d.Outcomes, 1)
		require.Equal(t, tc.status, d.Outcomes[0].HTTPStatus)
		require.Equal(t, tc.code, d.Outcomes[0].Error)
		require.Empty(t, d.WorkflowTasks)
	}
	_, after, _ := m.Execution(newID)
	require.Equal(t, before, after)
	var latest store.Execution
	latest, _, _ = m.Execution(newID)
	require.Equal(t, wire.StatusRunning, latest.Status)
}

// TestABatchResetAppliesOncePerExecution: a batch's reset names its point
// by target, resolved against the history; the same batch's reset sent
// again (its outbox published twice, under another command id) answers
// the run it made, and another batch's is refused: the run is no longer
// its chain's newest.
func TestABatchResetAppliesOncePerExecution(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	m, apply := memoryShard(t, now)
	d := apply(&wire.Command{CommandID: "start", Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "order", WorkflowID: "order-b", TaskQueue: "default"}})
	id := d.WorkflowTasks[0].ExecutionID
	apply(&wire.Command{CommandID: "t1", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: id, TaskID: 1, BaseSeq: 1, Decisions: []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "charge"}}}})
	reset := func(cmdID, batchID string) wire.Outcome {
		t.Helper()
		d := apply(&wire.Command{CommandID: cmdID, Kind: wire.KindReset, FromBatch: &wire.BatchRef{BatchID: batchID},
			Reset: &wire.ResetCommand{ExecutionID: id, Target: &wire.ResetTarget{Activity: "charge", Occurrence: "last"}, ReapplySignals: true}})
		require.Len(t, d.Outcomes, 1)
		return d.Outcomes[0]
	}
	const batch = "0190f0c4-0000-7000-8000-0000000000b1"
	first := reset("b-1", batch)
	require.Empty(t, first.Error)
	require.True(t, first.StartedFresh)
	again := reset("b-1-again", batch)
	require.Empty(t, again.Error)
	require.True(t, again.Deduplicated)
	require.Equal(t, first.ExecutionID, again.ExecutionID, "the same batch's reset answers the run it made")
	other := reset("b-2", "0190f0c4-0000-7000-8000-0000000000b2")
	require.Equal(t, api.CodeExecutionNotLatest, other.Error)
	old, _, _ := m.Execution(id)
	require.Equal(t, batch, old.Reset.By)
	require.Equal(t, 2, old.Reset.ToSeq, "the target resolved to the task that scheduled charge")
}
