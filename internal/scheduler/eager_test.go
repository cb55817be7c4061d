package scheduler

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// eagerFixture is one shard with one execution started and its first
// workflow task dispatched.
type eagerFixture struct {
	db    *pgxpool.Pool
	lease store.Lease
	exec  string
	task  wire.WorkflowTask
	seq   uint64
}

func newEagerFixture(t *testing.T) *eagerFixture {
	t.Helper()
	db, lease := leasedDB(t)
	f := &eagerFixture{db: db, lease: lease, seq: 1}
	w := applyOnce(t, db, "a", f.lease, []seqCommand{{seq: f.seq, cmd: startCmd("pay", "", "w1")}})
	require.Len(t, w.NewExecutions, 1)
	f.exec = w.NewExecutions[0].ExecutionID
	tasks := tasksIn(t, w)
	require.Len(t, tasks.workflow, 1)
	f.task = tasks.workflow[0]
	return f
}

func (f *eagerFixture) apply(t *testing.T, cmd wire.Command) *store.Writes {
	t.Helper()
	f.seq++
	return applyOnce(t, f.db, "a", f.lease, []seqCommand{{seq: f.seq, cmd: cmd}})
}

type outboxTasks struct {
	workflow []wire.WorkflowTask
	activity []wire.ActivityTask
}

func tasksIn(t *testing.T, w *store.Writes) outboxTasks {
	t.Helper()
	var out outboxTasks
	for _, m := range w.Outbox {
		switch {
		case strings.HasPrefix(m.Subject, broker.TaskSubject(wire.DefaultTaskQueue, wire.TaskWorkflow)+"."):
			var task wire.WorkflowTask
			require.NoError(t, json.Unmarshal(m.Payload, &task))
			out.workflow = append(out.workflow, task)
		case strings.HasPrefix(m.Subject, broker.TaskSubject(wire.DefaultTaskQueue, wire.TaskActivity)+"."):
			var task wire.ActivityTask
			require.NoError(t, json.Unmarshal(m.Payload, &task))
			out.activity = append(out.activity, task)
		}
	}
	return out
}

func historyTypes(t *testing.T, db *pgxpool.Pool, exec string) []string {
	t.Helper()
	rows, err := db.Query(t.Context(), `SELECT type FROM history_events WHERE execution_id = $1 ORDER BY seq`, exec)
	require.NoError(t, err)
	var types []string
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		types = append(types, typ)
	}
	require.NoError(t, rows.Err())
	return types
}

// eagerResult is what a worker reports after running task, scheduling
// activity 1, running it eagerly and then the next task, which completes
// the workflow.
func eagerResult(task wire.WorkflowTask, failure *wire.Failure) wire.Command {
	base := task.History[len(task.History)-1].Seq
	res := &wire.WorkflowTaskResult{
		ExecutionID: task.ExecutionID, TaskID: task.TaskID, BaseSeq: base,
		Decisions: []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "charge", Input: json.RawMessage(`{"amount":5}`)}},
		Eager:     []wire.ActivityResult{{ExecutionID: task.ExecutionID, ActivityID: 1, Attempt: 1, Result: json.RawMessage(`"ch_1"`), Failure: failure}},
		Next: &wire.WorkflowTaskResult{
			ExecutionID: task.ExecutionID, TaskID: task.TaskID + 1, BaseSeq: base + 3,
			Decisions: []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`"done"`)}},
		},
	}
	if failure != nil {
		res.Eager[0].Result = nil
	}
	return wire.Command{CommandID: dedup.WorkflowTaskCommandID(task.ExecutionID, task.TaskID), Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: res}
}

func TestEagerAttemptAndNextTaskApplyTogether(t *testing.T) {
	t.Parallel()
	f := newEagerFixture(t)
	w := f.apply(t, eagerResult(f.task, nil))

	tasks := tasksIn(t, w)
	require.Empty(t, tasks.activity, "the eager attempt is not dispatched again")
	require.Empty(t, tasks.workflow, "the speculative next task is taken, not dispatched")
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled, wire.EventActivityCompleted, wire.EventWorkflowTaskCompleted, wire.EventWorkflowCompleted},
		historyTypes(t, f.db, f.exec))
	var status, result string
	var wftID int
	require.NoError(t, f.db.QueryRow(t.Context(), `SELECT status, result::text, wft_id FROM executions WHERE execution_id = $1`, f.exec).Scan(&status, &result, &wftID))
	require.Equal(t, wire.StatusCompleted, status)
	require.JSONEq(t, `"done"`, result)
	require.Equal(t, 2, wftID, "the speculative task took the next task id")

	var actStatus, key string
	var closed bool
	require.NoError(t, f.db.QueryRow(t.Context(), `SELECT status, idempotency_key, closed_at IS NOT NULL FROM activities WHERE execution_id = $1 AND activity_id = 1`, f.exec).Scan(&actStatus, &key, &closed))
	require.Equal(t, store.ActivityCompleted, actStatus)
	require.True(t, closed)
	require.Equal(t, dedup.ActivityKeyFor(f.exec, 1).String(), key, "the key the worker handed downstream is the one recorded")
	require.Zero(t, count(t, f.db, `SELECT count(*) FROM timers WHERE execution_id = $1`, f.exec))

	// The same command again (a redelivery) is stale and changes nothing.
	w = f.apply(t, eagerResult(f.task, nil))
	require.Empty(t, w.Events)
}

func TestSpeculativeTaskIsDroppedWhenTheHistoryMoved(t *testing.T) {
	t.Parallel()
	f := newEagerFixture(t)
	// A signal arrives while the first task is out.
	f.apply(t, wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignal, Signal: &wire.SignalCommand{
		ExecutionID: f.exec, SignalName: "note", Payload: json.RawMessage(`1`),
	}})
	w := f.apply(t, eagerResult(f.task, nil))

	// The eager attempt stands; the next task is dispatched over the
	// history as it is, signal included, instead of the worker's guess.
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventSignalReceived, wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled, wire.EventActivityCompleted},
		historyTypes(t, f.db, f.exec))
	tasks := tasksIn(t, w)
	require.Empty(t, tasks.activity)
	require.Len(t, tasks.workflow, 1)
	require.Equal(t, 2, tasks.workflow[0].TaskID)
	require.Len(t, tasks.workflow[0].History, 5)
	require.Equal(t, wire.StatusRunning, statusOf(t, f.db, f.exec))
}

func TestAFailedEagerAttemptIsRetriedByTheScheduler(t *testing.T) {
	t.Parallel()
	f := newEagerFixture(t)
	w := f.apply(t, eagerResult(f.task, &wire.Failure{Type: "Declined", Message: "card declined"}))

	// The worker's next task assumed success: it is not taken. Attempt 2
	// waits on a retry timer, as after any failed attempt.
	require.Empty(t, tasksIn(t, w).workflow)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled}, historyTypes(t, f.db, f.exec))
	var attempt int
	require.NoError(t, f.db.QueryRow(t.Context(), `SELECT attempt FROM activities WHERE execution_id = $1 AND activity_id = 1`, f.exec).Scan(&attempt))
	require.Equal(t, 2, attempt)
	require.Equal(t, 1, count(t, f.db, `SELECT count(*) FROM timers WHERE execution_id = $1 AND kind = $2`, f.exec, store.TimerActivityRetry))
	require.Equal(t, wire.StatusRunning, statusOf(t, f.db, f.exec))
}

func TestPossiblyStartedActivitiesReconcileFirst(t *testing.T) {
	t.Parallel()
	f := newEagerFixture(t)
	w := f.apply(t, wire.Command{CommandID: dedup.WorkflowTaskCommandID(f.exec, 1), Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: f.exec, TaskID: 1,
		Decisions: []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "charge", Input: json.RawMessage(`{}`), PossiblyStarted: true}},
	}})
	// Attempt 1 counts as lost: attempt 2 waits on a retry timer and will
	// reconcile first.
	require.Empty(t, tasksIn(t, w).activity)
	require.Equal(t, 1, count(t, f.db, `SELECT count(*) FROM activities WHERE execution_id = $1 AND attempt = 2 AND outcome_unknown`, f.exec))
	require.Equal(t, 1, count(t, f.db, `SELECT count(*) FROM timers WHERE execution_id = $1 AND kind = $2`, f.exec, store.TimerActivityRetry))

	// An activity allowed one attempt fails rather than risk a second run.
	f = newEagerFixture(t)
	once := &wire.ActivityOptions{Retry: wire.RetryPolicy{MaximumAttempts: 1}}
	f.apply(t, wire.Command{CommandID: dedup.WorkflowTaskCommandID(f.exec, 1), Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: f.exec, TaskID: 1,
		Decisions: []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "charge", Input: json.RawMessage(`{}`), Options: once, PossiblyStarted: true}},
	}})
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled, wire.EventActivityFailed}, historyTypes(t, f.db, f.exec))
}

func TestEagerResultsForActivitiesNotScheduledAreIgnored(t *testing.T) {
	t.Parallel()
	f := newEagerFixture(t)
	cmd := eagerResult(f.task, nil)
	cmd.WorkflowTask.Eager[0].ActivityID = 7 // not what the decisions schedule
	w := f.apply(t, cmd)
	tasks := tasksIn(t, w)
	require.Len(t, tasks.activity, 1, "activity 1 is dispatched as usual")
	require.Empty(t, tasks.workflow)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled}, historyTypes(t, f.db, f.exec))
	require.Equal(t, wire.StatusRunning, statusOf(t, f.db, f.exec))
}

func statusOf(t *testing.T, db *pgxpool.Pool, exec string) string {
	t.Helper()
	var status string
	require.NoError(t, db.QueryRow(t.Context(), `SELECT status FROM executions WHERE execution_id = $1`, exec).Scan(&status))
	return status
}
