package decide_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/wire"
)

// history builds events from (type, attrs) pairs, numbered from 1.
func history(pairs ...any) []wire.Event {
	var out []wire.Event
	for i := 0; i < len(pairs); i += 2 {
		raw, _ := json.Marshal(pairs[i+1])
		out = append(out, wire.Event{Seq: len(out) + 1, Type: pairs[i].(string), Attrs: raw})
	}
	return out
}

func task(id, base int) wire.WorkflowTaskCompletedAttrs {
	return wire.WorkflowTaskCompletedAttrs{TaskID: id, BaseSeq: base}
}

func scheduled(id int, name, key string) wire.ActivityScheduledAttrs {
	return wire.ActivityScheduledAttrs{ActivityID: id, ActivityName: name, IdempotencyKey: key}
}

// TestResetPointsAreTheTasksNothingIsInFlightAt: a workflow task is a
// reset point unless a child, a signal to another workflow or an update
// is in flight at what its code saw, or the run started a child or
// signalled another workflow after it; the activity targets name the
// task that scheduled the occurrence; an invalid target names the valid
// points around it.
func TestResetPointsAreTheTasksNothingIsInFlightAt(t *testing.T) {
	h := history(
		wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{}, // 1
		wire.EventWorkflowTaskCompleted, task(1, 1), // 2
		wire.EventActivityScheduled, scheduled(1, "charge", "k1"), // 3
		wire.EventActivityFailed, wire.ActivityClosedAttrs{ActivityID: 1, ActivityName: "charge"}, // 4
		wire.EventWorkflowTaskCompleted, task(2, 4), // 5
		wire.EventActivityScheduled, scheduled(2, "charge", "k2"), // 6
		wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: 2, ActivityName: "charge"}, // 7
		wire.EventWorkflowTaskCompleted, task(3, 7), // 8
		wire.EventChildWorkflowInitiated, wire.ChildAttrs{ChildID: 1}, // 9
		wire.EventWorkflowTaskCompleted, task(4, 9), // 10
		wire.EventChildWorkflowCompleted, wire.ChildAttrs{ChildID: 1}, // 11
		wire.EventWorkflowTaskCompleted, task(5, 11), // 12
	)
	// Tasks 1 to 3 come before the child's start; task 4 saw it in
	// flight; task 5 saw it closed.
	require.Equal(t, []int{12}, decide.ResetPoints(h))

	h = h[:8]
	require.Equal(t, []int{2, 5, 8}, decide.ResetPoints(h))
	for _, tc := range []struct {
		target decide.ResetTarget
		want   int
	}{
		{decide.ResetTarget{FirstTask: true}, 2},
		{decide.ResetTarget{LastTask: true}, 8},
		{decide.ResetTarget{Seq: 5}, 5},
		{decide.ResetTarget{Activity: "charge", Occurrence: decide.OccurrenceFirst}, 2},
		{decide.ResetTarget{Activity: "charge", Occurrence: decide.OccurrenceLast}, 5},
		{decide.ResetTarget{Activity: "charge", Occurrence: decide.OccurrenceLastFailed}, 2},
	} {
		got, err := decide.FindResetPoint(h, tc.target)
		require.NoError(t, err, tc.target)
		require.Equal(t, tc.want, got, tc.target)
	}
	_, err := decide.FindResetPoint(h, decide.ResetTarget{Seq: 6})
	require.ErrorIs(t, err, decide.ErrInvalidResetPoint)
	var bad *decide.InvalidResetPoint
	require.True(t, errors.As(err, &bad))
	require.Equal(t, []int{5, 8}, bad.Nearest)
	_, err = decide.FindResetPoint(h, decide.ResetTarget{Activity: "refund", Occurrence: decide.OccurrenceLast})
	require.ErrorIs(t, err, decide.ErrInvalidResetPoint)
	_, err = decide.FindResetPoint(h[:1], decide.ResetTarget{FirstTask: true})
	require.ErrorIs(t, err, decide.ErrInvalidResetPoint)

	// Reset to task 2: the events its code saw are kept (1 to 4);
	// activity 2 runs again, keeping its key if it is the same activity.
	plan, err := decide.PlanReset(h, 5)
	require.NoError(t, err)
	require.Equal(t, 4, plan.Keep)
	require.Equal(t, 2, plan.TaskID)
	require.Empty(t, plan.Pending)
	require.Equal(t, map[int]wire.ResetKey{2: {Name: "charge", Key: "k2"}}, plan.Keys())
	keys := decide.KeysOf("new-run", plan.Keys())
	require.Equal(t, "k2", keys.For(2, "charge"))
	require.NotEqual(t, "k2", keys.For(2, "refund"), "another activity at the position gets its own key")
	require.Equal(t, decide.KeysOf("new-run", nil).For(3, "charge"), keys.For(3, "charge"))
}
