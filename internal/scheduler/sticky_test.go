package scheduler

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestAStickyTaskMovesWhenItsWorkerDoesNotTakeIt: a result that names
// the worker keeping the execution makes the next task sticky to it;
// when the sticky timeout passes and the worker has not taken it (here,
// a shard with no task stream to ask), the task is dispatched again to
// every worker, and the execution is sticky no more. A sticky value that
// is no worker id is ignored.
func TestAStickyTaskMovesWhenItsWorkerDoesNotTakeIt(t *testing.T) {
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	d, err := m.Apply(ctx, now, &wire.Command{CommandID: "start", Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "sum", WorkflowID: "sum-1", TaskQueue: "default", Input: json.RawMessage(`1`)}})
	require.NoError(t, err)
	id := d.WorkflowTasks[0].ExecutionID
	const worker = "0190f0c4-0000-7000-8000-00000000000a"
	_, err = m.Apply(ctx, now, &wire.Command{CommandID: "done-1", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: id, TaskID: 1, BaseSeq: 1, Sticky: worker}})
	require.NoError(t, err)
	e, _, _ := m.Execution(id)
	require.Equal(t, worker, e.StickyWorker)
	require.Equal(t, broker.StickyTaskSubject("default", "sum", worker), workflowTaskSubject(&e))

	d, err = m.Apply(ctx, now, &wire.Command{CommandID: "sig-1", Kind: wire.KindSignal, Signal: &wire.SignalCommand{ExecutionID: id, SignalName: "v"}})
	require.NoError(t, err)
	require.Len(t, d.WorkflowTasks, 1)
	require.Zero(t, d.WorkflowTasks[0].Redispatch)
	next, ok := m.NextTimer()
	require.True(t, ok)
	require.Equal(t, now.Add(stickyTimeout), next, "a sticky task's deadline is the sticky timeout")

	d, err = m.FireDue(ctx, next)
	require.NoError(t, err)
	require.Len(t, d.WorkflowTasks, 1, "moved to every worker")
	require.Equal(t, 2, d.WorkflowTasks[0].TaskID)
	require.Equal(t, 1, d.WorkflowTasks[0].Redispatch, "its worker may yet run the first copy: nothing eager")
	e, _, _ = m.Execution(id)
	require.Empty(t, e.StickyWorker)
	require.Equal(t, broker.NameTaskSubject("default", wire.TaskWorkflow, "sum"), workflowTaskSubject(&e))
	after := next
	next, _ = m.NextTimer()
	require.Equal(t, after.Add(DefaultWorkflowTaskTimeout), next, "the moved task has the usual deadline")

	// A value that is no worker id is not a subject token.
	_, err = m.Apply(ctx, now, &wire.Command{CommandID: "done-2", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: id, TaskID: 2, BaseSeq: 3, Sticky: "worker.*"}})
	require.NoError(t, err)
	e, _, _ = m.Execution(id)
	require.Empty(t, e.StickyWorker)
}
