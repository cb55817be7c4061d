package scheduler

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

// TestAContinuedRunPassesOnWhatItDidNotSee: a run whose task saw its
// history up to the start continues as new while a keyed signal came in
// during the task: the run closes ContinuedAsNew, linked to a new run of
// the same workflow_id whose history starts with the signal, key and
// all; the same key sent again to the first run is a duplicate, and
// another reaches the new run, and so does a cancel.
func TestAContinuedRunPassesOnWhatItDidNotSee(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	m, apply := memoryShard(t, now)
	d := apply(&wire.Command{CommandID: "start", Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "loop", WorkflowID: "loop-1", TaskQueue: "default", Input: json.RawMessage(`1`), CompletionCallback: "https://example.com/cb"}})
	first := d.WorkflowTasks[0].ExecutionID
	signal := func(id, key string, payload string) wire.Outcome {
		t.Helper()
		d := apply(&wire.Command{CommandID: "sig-" + key + "-" + id[:8], Kind: wire.KindSignal,
			Signal: &wire.SignalCommand{ExecutionID: id, SignalName: "n", Payload: json.RawMessage(payload), IdempotencyKey: key}})
		require.Len(t, d.Outcomes, 1)
		return d.Outcomes[0]
	}
	require.True(t, signal(first, "k1", `10`).SignalDelivered)
	apply(&wire.Command{CommandID: "done-1", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: first, TaskID: 1, BaseSeq: 1, Decisions: []wire.Decision{{Type: wire.DecisionContinueAsNew,
			ContinueAsNew: &wire.ContinueAsNewAttrs{Input: json.RawMessage(`2`)}}}}})

	old, oldHist, ok := m.Execution(first)
	require.True(t, ok)
	require.Equal(t, wire.StatusContinuedAsNew, old.Status)
	require.NotEmpty(t, old.ContinuedAs)
	require.Equal(t, wire.EventWorkflowContinuedAsNew, oldHist[len(oldHist)-1].Type)
	require.Contains(t, string(oldHist[len(oldHist)-1].Attrs), old.ContinuedAs)
	next, nextHist, ok := m.Execution(old.ContinuedAs)
	require.True(t, ok)
	require.Equal(t, wire.StatusRunning, next.Status)
	require.Equal(t, "loop-1", next.WorkflowID)
	require.Equal(t, first, next.ContinuedFrom)
	require.Equal(t, first, next.Chain())
	require.Equal(t, "https://example.com/cb", *next.CompletionCallback, "the chain's callback goes with its last run")
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventSignalReceived}, types(nextHist))
	require.JSONEq(t, `{"signal_name":"n","payload":10,"idempotency_key":"k1"}`, string(nextHist[1].Attrs))
	require.Contains(t, string(nextHist[0].Attrs), `"continued_from":"`+first+`"`)
	require.JSONEq(t, `2`, string(next.Input))

	again := signal(first, "k1", `10`)
	require.False(t, again.SignalDelivered, "a key dedupes across the chain")
	out := signal(first, "k2", `20`)
	require.True(t, out.SignalDelivered)
	require.Equal(t, next.ExecutionID, out.ExecutionID, "a signal to the first run reaches the newest")
	_, nextHist, _ = m.Execution(next.ExecutionID)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventSignalReceived, wire.EventSignalReceived}, types(nextHist))

	// A cancel naming the first run asks the chain's newest.
	d = apply(&wire.Command{CommandID: "cancel-1", Kind: wire.KindCancel, Cancel: &wire.CancelCommand{ExecutionID: first, Reason: "done"}})
	require.Len(t, d.Outcomes, 1)
	require.Equal(t, next.ExecutionID, d.Outcomes[0].ExecutionID)
	require.Equal(t, wire.StatusRunning, d.Outcomes[0].Status)
	require.True(t, d.Outcomes[0].CancelRequested)
	asked, askedHist, _ := m.Execution(next.ExecutionID)
	require.Equal(t, wire.StatusRunning, asked.Status, "its code closes it")
	require.NotNil(t, asked.CancelRequest)
	require.Equal(t, wire.EventWorkflowCancelRequested, askedHist[len(askedHist)-1].Type)
	old, _, _ = m.Execution(first)
	require.Equal(t, wire.StatusContinuedAsNew, old.Status, "the run that continued stays as it closed")
}

// TestAContinueAsNewThatCannotStartFailsTheRun: a continue-as-new that
// names no valid task queue fails the run instead.
func TestAContinueAsNewThatCannotStartFailsTheRun(t *testing.T) {
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	d, err := m.Apply(ctx, now, &wire.Command{CommandID: "start", Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "loop", WorkflowID: "loop-2", TaskQueue: "default"}})
	require.NoError(t, err)
	id := d.WorkflowTasks[0].ExecutionID
	_, err = m.Apply(ctx, now, &wire.Command{CommandID: "done-2", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: id, TaskID: 1, BaseSeq: 1, Decisions: []wire.Decision{{Type: wire.DecisionContinueAsNew,
			ContinueAsNew: &wire.ContinueAsNewAttrs{TaskQueue: "no queue", Input: json.RawMessage(`3`)}}}}})
	require.NoError(t, err)
	failed, _, _ := m.Execution(id)
	require.Equal(t, wire.StatusFailed, failed.Status)
	require.Contains(t, string(failed.Error), "InvalidContinueAsNew")
}

func types(events []wire.Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = ev.Type
	}
	return out
}

// memoryShard is an empty Memory shard, and apply, which applies a
// command to it at now and fails the test on an error.
func memoryShard(t *testing.T, now time.Time) (m *Memory, apply func(*wire.Command) Dispatched) {
	t.Helper()
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	return m, func(cmd *wire.Command) Dispatched {
		t.Helper()
		d, err := m.Apply(t.Context(), now, cmd)
		require.NoError(t, err)
		return d
	}
}
