package scheduler

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestUpdatesMoveToTheRunTheirRunContinuedAs: an update no task took when
// its run continued as new goes to the new run, whose first task carries
// it; one the run accepted and did not answer fails execution_closed;
// its key dedupes across the chain, asked of either run; a task that
// takes an update not in flight is dropped.
func TestUpdatesMoveToTheRunTheirRunContinuedAs(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	m, apply := memoryShard(t, now)
	d := apply(&wire.Command{CommandID: "start", Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "loop", WorkflowID: "loop-1", TaskQueue: "default", Input: json.RawMessage(`1`)}})
	first := d.WorkflowTasks[0].ExecutionID
	update := func(id, key string) wire.Outcome {
		t.Helper()
		uid := dedup.UpdateCommandID(id, key)
		d := apply(&wire.Command{CommandID: uid, Kind: wire.KindUpdate,
			Update: &wire.UpdateCommand{ExecutionID: id, UpdateID: uid, Name: "add", Args: json.RawMessage(`"x"`), IdempotencyKey: key}})
		require.Len(t, d.Outcomes, 1)
		return d.Outcomes[0]
	}
	u1 := update(first, "k1")
	require.Empty(t, u1.Error)
	require.Equal(t, dedup.UpdateCommandID(first, "k1"), u1.UpdateID)
	d = apply(&wire.Command{CommandID: "done-1", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: first, TaskID: 1, BaseSeq: 1}})
	require.Len(t, d.WorkflowTasks, 1, "the update asked meanwhile needs a task")
	require.Equal(t, []wire.UpdateRequest{{UpdateID: u1.UpdateID, Name: "add", Args: json.RawMessage(`"x"`)}}, d.WorkflowTasks[0].Updates)

	// A result that takes an update the run does not have is dropped.
	apply(&wire.Command{CommandID: "bogus-2", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: first, TaskID: 2, BaseSeq: 2, Decisions: []wire.Decision{{Type: wire.DecisionAcceptUpdate,
			Update: &wire.UpdateAttrs{UpdateID: dedup.NewID(), Name: "add"}}}}})
	e, _, _ := m.Execution(first)
	require.True(t, e.WFTOutstanding, "the bogus result was not taken")

	// Task 2 accepts u1; u2 comes while it runs; task 3 continues as new
	// without taking u2.
	apply(&wire.Command{CommandID: "done-2", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: first, TaskID: 2, BaseSeq: 2, Decisions: []wire.Decision{{Type: wire.DecisionAcceptUpdate,
			Update: &wire.UpdateAttrs{UpdateID: u1.UpdateID, Name: "add", Args: json.RawMessage(`"x"`)}}}}})
	u, ok := m.Update(u1.UpdateID)
	require.True(t, ok)
	require.Equal(t, store.UpdateAccepted, u.Status)
	u2 := update(first, "k2")
	d = apply(&wire.Command{CommandID: "done-3", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: first, TaskID: 3, BaseSeq: 4, Decisions: []wire.Decision{{Type: wire.DecisionContinueAsNew,
			ContinueAsNew: &wire.ContinueAsNewAttrs{Input: json.RawMessage(`2`)}}}}})
	old, _, _ := m.Execution(first)
	require.Equal(t, wire.StatusContinuedAsNew, old.Status)
	require.Empty(t, old.Updates.InFlight)
	u, _ = m.Update(u1.UpdateID)
	require.Equal(t, store.UpdateFailed, u.Status)
	require.Equal(t, api.CodeExecutionClosed, u.ErrorCode)
	u, _ = m.Update(u2.UpdateID)
	require.Equal(t, store.UpdateRequested, u.Status)
	require.Equal(t, old.ContinuedAs, u.ExecutionID, "moved to the new run")
	require.Len(t, d.WorkflowTasks, 1)
	require.Equal(t, old.ContinuedAs, d.WorkflowTasks[0].ExecutionID)
	require.Len(t, d.WorkflowTasks[0].Updates, 1)
	require.Equal(t, u2.UpdateID, d.WorkflowTasks[0].Updates[0].UpdateID)

	// Keys dedupe across the chain, asked of either run.
	again := update(first, "k2")
	require.True(t, again.Deduplicated)
	require.Equal(t, u2.UpdateID, again.UpdateID)
	again = update(old.ContinuedAs, "k1")
	require.True(t, again.Deduplicated)
	require.Equal(t, u1.UpdateID, again.UpdateID)

	// An idle task refuses u2: no WorkflowTaskCompleted is recorded.
	next := old.ContinuedAs
	_, before, _ := m.Execution(next)
	apply(&wire.Command{CommandID: "done-n1", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: next, TaskID: 1, BaseSeq: len(before), Idle: true,
		Rejections: []wire.UpdateRejection{{UpdateID: u2.UpdateID, Reason: wire.UpdateRejectedByValidator, Failure: &wire.Failure{Message: "no"}}}}})
	_, after, _ := m.Execution(next)
	require.Len(t, after, len(before))
	u, _ = m.Update(u2.UpdateID)
	require.Equal(t, store.UpdateRejected, u.Status)
	require.Equal(t, api.CodeUpdateRejected, u.ErrorCode)
	e, _, _ = m.Execution(next)
	require.False(t, e.WFTOutstanding)
	require.Empty(t, e.Updates.InFlight)
}
