package scheduler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// decisionSamples holds one decision of each kind decide knows. A kind
// added to decide without a sample here fails
// TestEveryDecisionIsAppliedAsDecideRecordsIt, so that it is applied,
// stored and replayed by a test before it ships.
var decisionSamples = map[string]wire.Decision{
	wire.DecisionScheduleActivity: {Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "charge", Input: json.RawMessage(`{"cents":5}`)},
	wire.DecisionStartTimer:       {Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: 60000},
	wire.DecisionCancelTimer:      {Type: wire.DecisionCancelTimer, TimerID: 1},
	wire.DecisionRecordMarker:     {Type: wire.DecisionRecordMarker, Marker: &wire.MarkerAttrs{Kind: wire.MarkerSideEffect, MarkerID: 1, Value: json.RawMessage(`"v"`)}},
	wire.DecisionRecordVersion:    {Type: wire.DecisionRecordVersion, Version: &wire.VersionMarkerAttrs{ChangeID: "add-fraud-check", Version: 2}},
	wire.DecisionCompleteWorkflow: {Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`{"ok":true}`)},
	wire.DecisionFailWorkflow:     {Type: wire.DecisionFailWorkflow, Failure: &wire.Failure{Type: "Boom", Message: "it broke"}},
	wire.DecisionContinueAsNew:    {Type: wire.DecisionContinueAsNew, ContinueAsNew: &wire.ContinueAsNewAttrs{Input: json.RawMessage(`{"page":2}`)}},
	wire.DecisionAcceptUpdate: {Type: wire.DecisionAcceptUpdate, Update: &wire.UpdateAttrs{UpdateID: sampleUpdateID, Name: "add_item",
		Args: json.RawMessage(`"apple"`)}},
	wire.DecisionCompleteUpdate:        {Type: wire.DecisionCompleteUpdate, Update: &wire.UpdateAttrs{UpdateID: sampleUpdateID, Result: json.RawMessage(`2`)}},
	wire.DecisionCancelWorkflow:        {Type: wire.DecisionCancelWorkflow, Failure: &wire.Failure{Type: "Cancelled", Message: "workflow canceled"}},
	wire.DecisionRequestCancelActivity: {Type: wire.DecisionRequestCancelActivity, ActivityID: 1},
	wire.DecisionTimeOutWorkflow:       {Type: wire.DecisionTimeOutWorkflow, Result: json.RawMessage(`{"undone":["refund"]}`)},
	wire.DecisionStartChild: {Type: wire.DecisionStartChild, Child: &wire.ChildAttrs{ChildID: 1, WorkflowName: "charge",
		Input: json.RawMessage(`{"cents":5}`), ParentClosePolicy: wire.ParentCloseAbandon}},
	wire.DecisionRequestCancelChild: {Type: wire.DecisionRequestCancelChild, Child: &wire.ChildAttrs{ChildID: 1}},
	wire.DecisionUpsertSearchAttributes: {Type: wire.DecisionUpsertSearchAttributes, SearchAttributes: map[string]json.RawMessage{
		"customer_id": json.RawMessage(`"c_1"`), "amount": json.RawMessage(`500`)}},
	wire.DecisionSignalExternal: {Type: wire.DecisionSignalExternal, Signal: &wire.ExternalSignalAttrs{SignalID: 1,
		ExecutionID: "0190f0c4-0000-7000-8000-000000000009", SignalName: "nudge", Payload: json.RawMessage(`"hi"`)}},
}

// timeoutRequest is the request a run timeout's end records when the
// workflow has a cancel_grace: time_out_workflow's sample needs it.
var timeoutRequest = &store.CancelRequest{At: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC), Reason: "run_timeout of 1h0m0s passed",
	Cause: wire.CancelCauseRunTimeout}

// sampleUpdateID is the update of the update decisions' samples.
const sampleUpdateID = "0190f0c4-0000-7000-8000-000000000001"

// sampleDecisions are the decisions of a task that takes sample d, and
// the command that comes first: an update's (in flight before a task
// takes it), which a completion's task accepts first.
func sampleDecisions(d wire.Decision, executionID string) ([]wire.Decision, *wire.Command) {
	switch d.Type {
	case wire.DecisionCancelWorkflow:
		// Only a run asked to cancel closes so.
		return []wire.Decision{d}, &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindCancel,
			Cancel: &wire.CancelCommand{ExecutionID: executionID, Reason: "customer left"}}
	case wire.DecisionRequestCancelActivity:
		return []wire.Decision{decisionSamples[wire.DecisionScheduleActivity], d}, nil
	case wire.DecisionRequestCancelChild:
		return []wire.Decision{decisionSamples[wire.DecisionStartChild], d}, nil
	}
	if d.Update == nil {
		return []wire.Decision{d}, nil
	}
	cmd := &wire.Command{CommandID: sampleUpdateID, Kind: wire.KindUpdate, Update: &wire.UpdateCommand{ExecutionID: executionID,
		UpdateID: sampleUpdateID, Name: "add_item", Args: json.RawMessage(`"apple"`)}}
	if d.Type == wire.DecisionCompleteUpdate {
		return []wire.Decision{decisionSamples[wire.DecisionAcceptUpdate], d}, cmd
	}
	return []wire.Decision{d}, cmd
}

// TestEveryDecisionIsAppliedAsDecideRecordsIt holds the scheduler, on
// PostgreSQL and on the in-memory shard the test kit runs, to decide:
// each kind of decision a workflow task takes is recorded as the event
// decide.Record names, with attributes the replayer (decide.Matches)
// accepts as that decision.
func TestEveryDecisionIsAppliedAsDecideRecordsIt(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, decide.Kinds(), mapKeys(decisionSamples), "every kind of decision needs a sample here")
	for _, typ := range decide.Kinds() {
		d := decisionSamples[typ]
		rec, err := decide.Record(decide.KeysOf("x", nil), &d, time.Now())
		require.NoError(t, err)
		t.Run(typ+"/postgres", func(t *testing.T) {
			t.Parallel()
			f := newEagerFixture(t)
			decisions, first := sampleDecisions(d, f.exec)
			if first != nil {
				f.apply(t, *first)
			}
			if d.Type == wire.DecisionTimeOutWorkflow {
				// The state a run timeout's end leaves when the workflow
				// has a cancel_grace (apply_timeout.go): asked to cancel.
				_, err := f.db.Exec(t.Context(), `UPDATE executions SET cancel_request = $2 WHERE execution_id = $1`, f.exec, timeoutRequest)
				require.NoError(t, err)
			}
			f.apply(t, wire.Command{CommandID: dedup.WorkflowTaskCommandID(f.exec, f.task.TaskID), Kind: wire.KindWorkflowTaskCompleted,
				WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: f.exec, TaskID: f.task.TaskID, BaseSeq: 1, Decisions: decisions}})
			var last wire.Event
			require.NoError(t, f.db.QueryRow(t.Context(), `SELECT seq, type, attrs FROM history_events WHERE execution_id = $1 ORDER BY seq DESC LIMIT 1`,
				f.exec).Scan(&last.Seq, &last.Type, &last.Attrs))
			require.Equal(t, rec.Event, last.Type)
			require.True(t, decide.Matches(&d, last), "the replayer must accept what the scheduler recorded: %s", last.Attrs)
		})
		t.Run(typ+"/memory", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			m, err := NewMemory(MemoryConfig{SearchAttributes: testSearchAttrs})
			require.NoError(t, err)
			now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
			start := startCmd("pay", "", "w1")
			out, err := m.Apply(ctx, now, &start)
			require.NoError(t, err)
			require.Len(t, out.WorkflowTasks, 1)
			task := out.WorkflowTasks[0]
			decisions, first := sampleDecisions(d, task.ExecutionID)
			if first != nil {
				_, err = m.Apply(ctx, now, first)
				require.NoError(t, err)
			}
			if d.Type == wire.DecisionTimeOutWorkflow {
				m.execs[task.ExecutionID].CancelRequest = timeoutRequest
			}
			_, err = m.Apply(ctx, now, &wire.Command{CommandID: dedup.WorkflowTaskCommandID(task.ExecutionID, task.TaskID), Kind: wire.KindWorkflowTaskCompleted,
				WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: task.ExecutionID, TaskID: task.TaskID, BaseSeq: 1, Decisions: decisions}})
			require.NoError(t, err)
			_, hist, ok := m.Execution(task.ExecutionID)
			require.True(t, ok)
			last := hist[len(hist)-1]
			require.Equal(t, rec.Event, last.Type)
			require.True(t, decide.Matches(&d, last), "the replayer must accept what the shard recorded: %s", last.Attrs)
		})
	}
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
