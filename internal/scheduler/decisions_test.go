package scheduler

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestATaskIsRecordedWithWhatItSawAndItsDecisions: a workflow task's
// result is recorded as a WorkflowTaskCompleted carrying its base_seq,
// the time the worker ran it under and the worker's build, then its decisions' events: a timer
// started and cancelled in one task leaves no timer to fire, and a
// marker keeps its value.
func TestATaskIsRecordedWithWhatItSawAndItsDecisions(t *testing.T) {
	t.Parallel()
	f := newEagerFixture(t)
	ran := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	f.apply(t, wire.Command{CommandID: dedup.WorkflowTaskCommandID(f.exec, f.task.TaskID), Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: f.exec, TaskID: f.task.TaskID, BaseSeq: 1, Time: ran, BuildID: "v2~0a1b2c3d", Decisions: []wire.Decision{
			{Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: 60000},
			{Type: wire.DecisionRecordMarker, Marker: &wire.MarkerAttrs{Kind: wire.MarkerSideEffect, MarkerID: 1, Value: json.RawMessage(`"id-7"`)}},
			{Type: wire.DecisionCancelTimer, TimerID: 1},
		}}})
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventTimerStarted, wire.EventMarkerRecorded,
		wire.EventTimerCancelled}, historyTypes(t, f.db, f.exec))
	require.Zero(t, count(t, f.db, `SELECT count(*) FROM timers WHERE execution_id = $1 AND kind = 'workflow'`, f.exec),
		"the cancelled timer will not fire")

	var task wire.WorkflowTaskCompletedAttrs
	require.NoError(t, f.db.QueryRow(t.Context(), `SELECT attrs FROM history_events WHERE execution_id = $1 AND seq = 2`, f.exec).Scan(&task))
	require.Equal(t, wire.WorkflowTaskCompletedAttrs{TaskID: f.task.TaskID, BaseSeq: 1, Time: ran, BuildID: "v2~0a1b2c3d"}, task)
	var timer wire.TimerAttrs
	require.NoError(t, f.db.QueryRow(t.Context(), `SELECT attrs FROM history_events WHERE execution_id = $1 AND seq = 3`, f.exec).Scan(&timer))
	require.EqualValues(t, 60000, timer.DurationMS)
	var marker wire.MarkerAttrs
	require.NoError(t, f.db.QueryRow(t.Context(), `SELECT attrs FROM history_events WHERE execution_id = $1 AND seq = 4`, f.exec).Scan(&marker))
	require.JSONEq(t, `"id-7"`, string(marker.Value))
}

// A worker's build id is its own text: one PostgreSQL cannot store (a NUL,
// bytes that are not UTF-8) is recorded with them replaced, rather than
// failing the batch that records the task.
func TestATasksBuildIDIsRecordedStorable(t *testing.T) {
	t.Parallel()
	f := newEagerFixture(t)
	f.apply(t, wire.Command{CommandID: dedup.WorkflowTaskCommandID(f.exec, f.task.TaskID), Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: f.exec, TaskID: f.task.TaskID, BaseSeq: 1, BuildID: "v2\x00\xff"}})
	var task wire.WorkflowTaskCompletedAttrs
	require.NoError(t, f.db.QueryRow(t.Context(), `SELECT attrs FROM history_events WHERE execution_id = $1 AND seq = 2`, f.exec).Scan(&task))
	require.Equal(t, "v2\uFFFD\uFFFD", task.BuildID)
}
