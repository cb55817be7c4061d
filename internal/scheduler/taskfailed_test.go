package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func taskFailedCmd(executionID string, taskID int, reason string) *wire.Command {
	return &wire.Command{CommandID: dedup.WorkflowTaskFailedCommandID(executionID, taskID), Kind: wire.KindWorkflowTaskFailed,
		TaskFailure: &wire.WorkflowTaskFailure{ExecutionID: executionID, TaskID: taskID, BuildID: "v2~bad", Reason: reason,
			Message: "workflow is not deterministic: …", EventSeq: 3, History: "ActivityScheduled {…}", Code: "schedule_activity {…}"}}
}

// A workflow task its worker reports failing marks the execution, which
// keeps running; the task is dispatched again after a backoff that
// doubles with each failure in a row; a task that completes clears the
// mark, and a report of a task no longer outstanding changes nothing.
func TestAFailingWorkflowTaskIsShownAndRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	start := startCmd("pay", "", "w1")
	out, err := m.Apply(ctx, now, &start)
	require.NoError(t, err)
	require.Len(t, out.WorkflowTasks, 1)
	id := out.WorkflowTasks[0].ExecutionID

	out, err = m.Apply(ctx, now, taskFailedCmd(id, 1, wire.TaskFailedNondeterminism))
	require.NoError(t, err)
	require.Empty(t, out.WorkflowTasks, "not dispatched again at once")
	e, _, _ := m.Execution(id)
	require.Equal(t, wire.StatusRunning, e.Status)
	require.NotNil(t, e.TaskFailing)
	f := *e.TaskFailing
	require.Equal(t, wire.TaskFailedNondeterminism, f.Reason)
	require.Equal(t, 3, f.EventSeq)
	require.Equal(t, "v2~bad", f.BuildID)
	require.Equal(t, 1, f.TaskID)
	require.Equal(t, 1, f.Attempts)
	require.Equal(t, now, f.Since)
	require.Equal(t, now.Add(time.Second), f.NextAttemptAt)
	next, ok := m.NextTimer()
	require.True(t, ok)
	require.Equal(t, now.Add(time.Second), next, "the task's deadline is gone; the retry is what is due")

	// A repeated or late report changes nothing.
	_, err = m.Apply(ctx, now, taskFailedCmd(id, 1, wire.TaskFailedPanic))
	require.NoError(t, err)
	e, _, _ = m.Execution(id)
	require.Equal(t, 1, e.TaskFailing.Attempts)

	out, err = m.FireDue(ctx, now.Add(time.Second))
	require.NoError(t, err)
	require.Len(t, out.WorkflowTasks, 1)
	require.Equal(t, 2, out.WorkflowTasks[0].TaskID)

	later := now.Add(time.Second)
	_, err = m.Apply(ctx, later, taskFailedCmd(id, 2, wire.TaskFailedVersionUnsupported))
	require.NoError(t, err)
	e, _, _ = m.Execution(id)
	require.Equal(t, 2, e.TaskFailing.Attempts)
	require.Equal(t, now, e.TaskFailing.Since, "failing since the first failure")
	require.Equal(t, later.Add(2*time.Second), e.TaskFailing.NextAttemptAt)

	out, err = m.FireDue(ctx, later.Add(2*time.Second))
	require.NoError(t, err)
	require.Len(t, out.WorkflowTasks, 1)
	task := out.WorkflowTasks[0]
	_, err = m.Apply(ctx, later.Add(2*time.Second), &wire.Command{CommandID: dedup.WorkflowTaskCommandID(id, task.TaskID), Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: id, TaskID: task.TaskID, BaseSeq: 1}})
	require.NoError(t, err)
	e, _, _ = m.Execution(id)
	require.Nil(t, e.TaskFailing, "a task that completes clears the mark")
	require.Equal(t, wire.StatusRunning, e.Status)
}

func TestTaskRetryBackoffDoublesUpToFiveMinutes(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Second, taskRetryBackoff(1))
	require.Equal(t, 2*time.Second, taskRetryBackoff(2))
	require.Equal(t, 256*time.Second, taskRetryBackoff(9))
	require.Equal(t, 5*time.Minute, taskRetryBackoff(10))
	require.Equal(t, 5*time.Minute, taskRetryBackoff(1000))
}

// On PostgreSQL the mark is stored with the execution, what jsonb cannot
// hold replaced, and a completed task clears it.
func TestAFailingWorkflowTaskIsStored(t *testing.T) {
	t.Parallel()
	f := newEagerFixture(t)
	cmd := taskFailedCmd(f.exec, f.task.TaskID, wire.TaskFailedPanic)
	cmd.TaskFailure.Message = "workflow \"pay\" panicked: bad\x00byte \xff"
	f.apply(t, *cmd)
	e, err := store.GetExecution(t.Context(), f.db, f.exec)
	require.NoError(t, err)
	require.NotNil(t, e.TaskFailing)
	require.Equal(t, wire.TaskFailedPanic, e.TaskFailing.Reason)
	require.Equal(t, "workflow \"pay\" panicked: bad\uFFFDbyte \uFFFD", e.TaskFailing.Message)
	require.Equal(t, 1, count(t, f.db, `SELECT count(*) FROM timers WHERE execution_id = $1 AND kind = 'workflow_task_retry'`, f.exec))
	require.Zero(t, count(t, f.db, `SELECT count(*) FROM timers WHERE execution_id = $1 AND kind = 'workflow_task'`, f.exec))
	view := e.View()
	require.Equal(t, e.TaskFailing, view.TaskFailing)
}
