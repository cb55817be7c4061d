package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/harvest-engine/harvest/internal/wire"
)

// A reset (docs/reset.md) starts a new run of an execution's workflow_id
// from one of its workflow tasks: the events that task's code saw are
// kept, the task and what followed are run again by the current code.
// The point is named by the task's WorkflowTaskCompleted event. Ingest
// plans a reset to answer a dry run and to check the point before it
// publishes; the scheduler plans it again from the history it holds when
// it applies the reset.

// Occurrences of an activity a reset point names.
const (
	OccurrenceFirst      = "first"
	OccurrenceLast       = "last"
	OccurrenceLastFailed = "last_failed"
)

// ResetTarget is the point a client names (wire.ResetTarget).
type ResetTarget = wire.ResetTarget

// ResetActivity is an activity a reset re-runs or whose key it keeps.
type ResetActivity struct {
	ID   int    `json:"activity_id"`
	Name string `json:"activity_name"`
	Key  string `json:"idempotency_key"`
	// Input and Options are a pending activity's, as it was scheduled.
	Input   json.RawMessage      `json:"-"`
	Options wire.ActivityOptions `json:"-"`
}

// ResetTimer is a timer the kept events started and did not end.
type ResetTimer struct {
	ID     int       `json:"timer_id"`
	FireAt time.Time `json:"fire_at"`
}

// ResetPlan is what a reset to one point does.
type ResetPlan struct {
	// PointSeq is the WorkflowTaskCompleted of the task run again, TaskID
	// its task; Keep is the seq of the last event kept (the last the
	// task's code saw).
	PointSeq, TaskID, Keep int
	// Pending are the activities the kept events scheduled and did not
	// close: the new run dispatches them again, with their keys.
	Pending []ResetActivity
	// Timers are the timers the kept events started and did not end:
	// the new run sets them again, to fire when they were to.
	Timers []ResetTimer
	// Rerun are the activities the run scheduled after the point: the new
	// run's code schedules them again, each keeping its key when it is
	// the same activity (the same name) at the same position (id).
	Rerun []ResetActivity
	// Signals are the signals the run received after the point, in order:
	// the new run receives them again, with their keys.
	Signals []wire.Event
	// CancelRequested says that the kept events hold the run's
	// WorkflowCancelRequested: the new run is asked to cancel too.
	CancelRequested bool
}

// Keys are the keys the new run inherits: those of Rerun, by id.
func (p *ResetPlan) Keys() map[int]wire.ResetKey {
	if len(p.Rerun) == 0 {
		return nil
	}
	out := make(map[int]wire.ResetKey, len(p.Rerun))
	for _, a := range p.Rerun {
		out[a.ID] = wire.ResetKey{Name: a.Name, Key: a.Key}
	}
	return out
}

// ErrInvalidResetPoint is the error of a point no reset can go to;
// errors.As finds an *InvalidResetPoint.
var ErrInvalidResetPoint = errors.New("invalid reset point")

// InvalidResetPoint says why a target is no reset point, and which are:
// the valid points nearest to it.
type InvalidResetPoint struct {
	Reason  string
	Nearest []int
}

func (e *InvalidResetPoint) Error() string { return e.Reason }

// Is makes errors.Is(err, ErrInvalidResetPoint) hold.
func (e *InvalidResetPoint) Is(target error) bool { return target == ErrInvalidResetPoint }

// resetTask is one WorkflowTaskCompleted of a history.
type resetTask struct {
	seq, taskID, base int
	// why, if set, is why no reset can go to it.
	why string
}

// resetScan is what PlanReset reads of a history, in one pass.
type resetScan struct {
	tasks []resetTask
}

// scanTasks finds the history's tasks and which of them are points a
// reset can go to. A task is no such point while a child workflow, a
// signal to another workflow or an update is in flight at it (the new
// run would wait for an answer that went to the old one), nor when the
// run started a child or signalled another workflow after it (the new
// run would do it a second time).
func scanTasks(events []wire.Event) resetScan {
	var sc resetScan
	children, signals, updates := map[int]bool{}, map[int]bool{}, map[string]bool{}
	cancelAsked := map[int]bool{}
	// open counts, after each event, what is in flight; laterEffects,
	// the seq of the last event that starts a child or signals another
	// workflow.
	type inFlight struct{ seq, n int }
	var marks []inFlight
	lastEffect := 0
	for _, ev := range events {
		switch ev.Type {
		case wire.EventChildWorkflowInitiated, wire.EventExternalSignalInitiated:
			lastEffect = ev.Seq
		}
		switch ev.Type {
		case wire.EventChildWorkflowInitiated:
			var a wire.ChildAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			children[a.ChildID] = true
		case wire.EventChildWorkflowStartFailed, wire.EventChildWorkflowCompleted, wire.EventChildWorkflowFailed,
			wire.EventChildWorkflowCancelled, wire.EventChildWorkflowTerminated, wire.EventChildWorkflowTimedOut:
			var a wire.ChildAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			delete(children, a.ChildID)
		case wire.EventExternalSignalInitiated:
			var a wire.ExternalSignalAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			signals[a.SignalID] = true
		case wire.EventExternalSignalDelivered, wire.EventExternalSignalFailed:
			var a wire.ExternalSignalAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			delete(signals, a.SignalID)
		case wire.EventWorkflowUpdateAccepted:
			var a wire.UpdateAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			updates[a.UpdateID] = true
		case wire.EventWorkflowUpdateCompleted:
			var a wire.UpdateAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			delete(updates, a.UpdateID)
		case wire.EventActivityCancelRequested:
			var a wire.ActivityCancelRequestedAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			cancelAsked[a.ActivityID] = true
		case wire.EventActivityCancelled, wire.EventActivityCompleted, wire.EventActivityFailed:
			var a wire.ActivityClosedAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			delete(cancelAsked, a.ActivityID)
		}
		marks = append(marks, inFlight{ev.Seq, len(children) + len(signals) + len(updates) + len(cancelAsked)})
		if ev.Type == wire.EventWorkflowTaskCompleted {
			var a wire.WorkflowTaskCompletedAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			sc.tasks = append(sc.tasks, resetTask{seq: ev.Seq, taskID: a.TaskID, base: a.BaseSeq})
		}
	}
	// What was in flight at a task is what was after the last event its
	// code saw.
	for i := range sc.tasks {
		t := &sc.tasks[i]
		at := sort.Search(len(marks), func(j int) bool { return marks[j].seq > t.base }) - 1
		switch {
		case at >= 0 && marks[at].n > 0:
			t.why = "a child workflow, a signal to another workflow, an update or an activity's cancellation is in flight there"
		case lastEffect > t.base:
			t.why = "the run started a child workflow or signalled another workflow after it, which a new run would do again"
		}
	}
	return sc
}

// ResetPoints are the seqs of the WorkflowTaskCompleted events of the
// history that a reset can go to, in order.
func ResetPoints(events []wire.Event) []int {
	var out []int
	for _, t := range scanTasks(events).tasks {
		if t.why == "" {
			out = append(out, t.seq)
		}
	}
	return out
}

// nearest are at most two valid points around seq: the last before or
// at it and the first after it.
func nearest(valid []int, seq int) []int {
	i := sort.SearchInts(valid, seq+1)
	var out []int
	if i > 0 {
		out = append(out, valid[i-1])
	}
	if i < len(valid) {
		out = append(out, valid[i])
	}
	return out
}

// FindResetPoint resolves target to the seq of a WorkflowTaskCompleted
// of events that a reset can go to, or an *InvalidResetPoint.
func FindResetPoint(events []wire.Event, target ResetTarget) (int, error) {
	sc := scanTasks(events)
	var valid []int
	for _, t := range sc.tasks {
		if t.why == "" {
			valid = append(valid, t.seq)
		}
	}
	invalid := func(near int, format string, args ...any) error {
		return &InvalidResetPoint{Reason: fmt.Sprintf(format, args...), Nearest: nearest(valid, near)}
	}
	if len(sc.tasks) == 0 {
		return 0, &InvalidResetPoint{Reason: "the execution has completed no workflow task: there is nothing to reset to"}
	}
	var task *resetTask
	switch {
	case target.Seq > 0:
		i := slices.IndexFunc(sc.tasks, func(t resetTask) bool { return t.seq == target.Seq })
		if i < 0 {
			return 0, invalid(target.Seq, "event %d is not a WorkflowTaskCompleted: a reset goes to a workflow task", target.Seq)
		}
		task = &sc.tasks[i]
	case target.FirstTask:
		task = &sc.tasks[0]
	case target.LastTask:
		task = &sc.tasks[len(sc.tasks)-1]
	case target.Activity != "":
		scheduled, ok := activityOccurrence(events, target.Activity, target.Occurrence)
		if !ok {
			what := "no activity " + target.Activity
			if target.Occurrence == OccurrenceLastFailed {
				what = "no failed activity " + target.Activity
			}
			return 0, invalid(events[len(events)-1].Seq, "the history has %s", what)
		}
		// The task that scheduled it: the last one recorded before it.
		i := sort.Search(len(sc.tasks), func(j int) bool { return sc.tasks[j].seq > scheduled }) - 1
		if i < 0 {
			return 0, invalid(scheduled, "activity %s at event %d was scheduled by no workflow task", target.Activity, scheduled)
		}
		task = &sc.tasks[i]
	default:
		return 0, &InvalidResetPoint{Reason: "a reset names its point: a seq, an activity, first_task or last_task"}
	}
	if task.why != "" {
		return 0, invalid(task.seq, "workflow task %d (event %d) is no reset point: %s", task.taskID, task.seq, task.why)
	}
	return task.seq, nil
}

// activityOccurrence is the seq of the ActivityScheduled of the
// occurrence of activity name: the first, the last, or the last that
// failed (closed ActivityFailed).
func activityOccurrence(events []wire.Event, name, occurrence string) (int, bool) {
	scheduledAt := map[int]int{}
	found := 0
	for _, ev := range events {
		switch ev.Type {
		case wire.EventActivityScheduled:
			var a wire.ActivityScheduledAttrs
			if json.Unmarshal(ev.Attrs, &a) != nil || a.ActivityName != name {
				continue
			}
			scheduledAt[a.ActivityID] = ev.Seq
			switch occurrence {
			case OccurrenceFirst:
				if found == 0 {
					found = ev.Seq
				}
			case OccurrenceLastFailed:
			default:
				found = ev.Seq
			}
		case wire.EventActivityFailed:
			var a wire.ActivityClosedAttrs
			if occurrence != OccurrenceLastFailed || json.Unmarshal(ev.Attrs, &a) != nil {
				continue
			}
			if seq, ok := scheduledAt[a.ActivityID]; ok && a.ActivityName == name {
				found = seq
			}
		}
	}
	return found, found > 0
}

// PlanReset is what a reset of the history events to the task recorded
// at pointSeq does, or an *InvalidResetPoint.
func PlanReset(events []wire.Event, pointSeq int) (ResetPlan, error) {
	if _, err := FindResetPoint(events, ResetTarget{Seq: pointSeq}); err != nil {
		return ResetPlan{}, err
	}
	var p ResetPlan
	for _, ev := range events {
		if ev.Seq == pointSeq {
			var a wire.WorkflowTaskCompletedAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			p.PointSeq, p.TaskID, p.Keep = ev.Seq, a.TaskID, a.BaseSeq
			break
		}
	}
	pending := map[int]ResetActivity{}
	timers := map[int]ResetTimer{}
	for _, ev := range events {
		kept := ev.Seq <= p.Keep
		switch ev.Type {
		case wire.EventActivityScheduled:
			var a wire.ActivityScheduledAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			act := ResetActivity{ID: a.ActivityID, Name: a.ActivityName, Key: a.IdempotencyKey, Input: a.Input, Options: a.Options}
			if kept {
				pending[a.ActivityID] = act
			} else {
				p.Rerun = append(p.Rerun, act)
			}
		case wire.EventActivityCompleted, wire.EventActivityFailed, wire.EventActivityCancelled:
			if kept {
				var a wire.ActivityClosedAttrs
				_ = json.Unmarshal(ev.Attrs, &a)
				delete(pending, a.ActivityID)
			}
		case wire.EventTimerStarted:
			if kept {
				var a wire.TimerAttrs
				_ = json.Unmarshal(ev.Attrs, &a)
				if a.FireAt != nil {
					timers[a.TimerID] = ResetTimer{ID: a.TimerID, FireAt: *a.FireAt}
				}
			}
		case wire.EventTimerFired, wire.EventTimerCancelled:
			if kept {
				var a wire.TimerAttrs
				_ = json.Unmarshal(ev.Attrs, &a)
				delete(timers, a.TimerID)
			}
		case wire.EventSignalReceived:
			if !kept {
				p.Signals = append(p.Signals, ev)
			}
		case wire.EventWorkflowCancelRequested:
			if kept {
				p.CancelRequested = true
			}
		}
	}
	for _, a := range pending {
		p.Pending = append(p.Pending, a)
	}
	slices.SortFunc(p.Pending, func(a, b ResetActivity) int { return a.ID - b.ID })
	for _, t := range timers {
		p.Timers = append(p.Timers, t)
	}
	slices.SortFunc(p.Timers, func(a, b ResetTimer) int { return a.ID - b.ID })
	return p, nil
}
