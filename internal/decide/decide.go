// Package decide says what a workflow task's decisions mean: the event
// each records in the execution's history, with its attributes; the
// idempotency key and options of an activity it schedules; the task an
// activity's attempt is dispatched as; and which recorded event a replay
// must find for each decision.
//
// Every side that turns decisions into history uses it, so that they
// cannot drift apart: the scheduler's apply (which the test kit runs
// too, through scheduler.Memory), a worker running activities eagerly
// (it builds the history of its speculative next task), and the SDK's
// replayer (it checks the history against what the code decides). A new
// kind of decision is added here, in kinds, once; the scheduler then
// writes the rows it needs (its store rows), and tests hold every kind
// to the scheduler and the replayer.
//
// It is pure computation: no I/O, no clock but the times it is given.
package decide

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Recorded is what one decision becomes in an execution's history.
type Recorded struct {
	// Event is the type of the event the decision records, Attrs its
	// attributes.
	Event string
	Attrs any
	// Closes says the decision closes the execution (Status: how).
	Closes bool
	Status string
	// Activity is the activity a schedule_activity decision schedules,
	// nil for the other kinds.
	Activity *Activity
	// FireAt is when a start_timer decision's timer fires.
	FireAt time.Time
}

// Activity is an activity as a decision schedules it.
type Activity struct {
	ID   int
	Name string
	// Key is the activity's idempotency key, the same for every attempt
	// and wherever it runs: derived from the execution and the activity's
	// id.
	Key     string
	Input   json.RawMessage
	Options wire.ActivityOptions
}

// kind is what one kind of decision means.
type kind struct {
	// event is the type of the event it records.
	event string
	// record makes the event's attributes (and the rest of Recorded) of
	// d, taken at now by the execution whose activities' keys keys derives.
	record func(r *Recorded, keys Keys, d *wire.Decision, now time.Time) error
	// matches says whether attrs, the attributes of an event of type
	// event, record d: the replayer's check that the code decided what
	// the history holds.
	matches func(d *wire.Decision, attrs json.RawMessage) bool
}

// kinds are the decisions a workflow task can take, by their wire type.
var kinds = map[string]kind{
	wire.DecisionScheduleActivity: {
		event: wire.EventActivityScheduled,
		record: func(r *Recorded, keys Keys, d *wire.Decision, _ time.Time) error {
			a := &Activity{ID: d.ActivityID, Name: d.ActivityName, Key: keys.For(d.ActivityID, d.ActivityName),
				Input: d.Input, Options: d.ScheduledOptions()}
			r.Activity = a
			r.Attrs = wire.ActivityScheduledAttrs{ActivityID: a.ID, ActivityName: a.Name, Input: a.Input, IdempotencyKey: a.Key, Options: a.Options}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.ActivityScheduledAttrs
			return json.Unmarshal(raw, &a) == nil && a.ActivityID == d.ActivityID && a.ActivityName == d.ActivityName &&
				wire.SameJSON(a.Input, d.Input) && reflect.DeepEqual(a.Options, d.ScheduledOptions())
		},
	},
	wire.DecisionStartTimer: {
		event: wire.EventTimerStarted,
		record: func(r *Recorded, _ Keys, d *wire.Decision, now time.Time) error {
			r.FireAt = now.Add(time.Duration(d.DurationMS) * time.Millisecond)
			r.Attrs = wire.TimerAttrs{TimerID: d.TimerID, FireAt: &r.FireAt, DurationMS: d.DurationMS}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.TimerAttrs
			// Histories from before durations were recorded have none.
			return json.Unmarshal(raw, &a) == nil && a.TimerID == d.TimerID && (a.DurationMS == 0 || a.DurationMS == d.DurationMS)
		},
	},
	wire.DecisionCancelTimer: {
		event: wire.EventTimerCancelled,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			r.Attrs = wire.TimerAttrs{TimerID: d.TimerID}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.TimerAttrs
			return json.Unmarshal(raw, &a) == nil && a.TimerID == d.TimerID
		},
	},
	wire.DecisionRecordMarker: {
		event: wire.EventMarkerRecorded,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			if d.Marker == nil {
				return fmt.Errorf("a %s decision without its marker", d.Type)
			}
			r.Attrs = *d.Marker
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.MarkerAttrs
			return d.Marker != nil && json.Unmarshal(raw, &a) == nil && a.Kind == d.Marker.Kind && a.MarkerID == d.Marker.MarkerID
		},
	},
	wire.DecisionRecordVersion: {
		event: wire.EventVersionMarker,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			if d.Version == nil || d.Version.ChangeID == "" {
				return fmt.Errorf("a %s decision without its change id", d.Type)
			}
			r.Attrs = *d.Version
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.VersionMarkerAttrs
			return d.Version != nil && json.Unmarshal(raw, &a) == nil && a == *d.Version
		},
	},
	wire.DecisionCompleteWorkflow: {
		event: wire.EventWorkflowCompleted,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			r.Closes, r.Status = true, wire.StatusCompleted
			r.Attrs = wire.WorkflowClosedAttrs{Result: d.Result}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.WorkflowClosedAttrs
			return json.Unmarshal(raw, &a) == nil && wire.SameJSON(a.Result, d.Result)
		},
	},
	wire.DecisionFailWorkflow: {
		event: wire.EventWorkflowFailed,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			r.Closes, r.Status = true, wire.StatusFailed
			r.Attrs = wire.WorkflowClosedAttrs{Failure: d.Failure}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.WorkflowClosedAttrs
			return json.Unmarshal(raw, &a) == nil && a.Failure != nil && d.Failure != nil &&
				a.Failure.Message == d.Failure.Message && a.Failure.Type == d.Failure.Type
		},
	},
	wire.DecisionAcceptUpdate: {
		event: wire.EventWorkflowUpdateAccepted,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			if d.Update == nil || d.Update.UpdateID == "" {
				return fmt.Errorf("a %s decision without its update", d.Type)
			}
			r.Attrs = wire.UpdateAttrs{UpdateID: d.Update.UpdateID, Name: d.Update.Name, Args: d.Update.Args}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.UpdateAttrs
			return d.Update != nil && json.Unmarshal(raw, &a) == nil && a.UpdateID == d.Update.UpdateID && a.Name == d.Update.Name
		},
	},
	wire.DecisionCompleteUpdate: {
		event: wire.EventWorkflowUpdateCompleted,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			if d.Update == nil || d.Update.UpdateID == "" {
				return fmt.Errorf("a %s decision without its update", d.Type)
			}
			r.Attrs = wire.UpdateAttrs{UpdateID: d.Update.UpdateID, Result: d.Update.Result, Failure: d.Update.Failure}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.UpdateAttrs
			return d.Update != nil && json.Unmarshal(raw, &a) == nil && a.UpdateID == d.Update.UpdateID &&
				(a.Failure == nil) == (d.Update.Failure == nil) && wire.SameJSON(a.Result, d.Update.Result)
		},
	},
	wire.DecisionUpsertSearchAttributes: {
		event: wire.EventSearchAttributesUpserted,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			if len(d.SearchAttributes) == 0 {
				return fmt.Errorf("a %s decision that sets nothing", d.Type)
			}
			r.Attrs = wire.SearchAttributesAttrs{SearchAttributes: d.SearchAttributes}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.SearchAttributesAttrs
			if json.Unmarshal(raw, &a) != nil || len(a.SearchAttributes) != len(d.SearchAttributes) {
				return false
			}
			for name, v := range d.SearchAttributes {
				if got, ok := a.SearchAttributes[name]; !ok || !wire.SameJSON(got, v) {
					return false
				}
			}
			return true
		},
	},
	wire.DecisionCancelWorkflow:  closedByCode(wire.EventWorkflowCancelled, wire.StatusCancelled),
	wire.DecisionTimeOutWorkflow: closedByCode(wire.EventWorkflowTimedOut, wire.StatusTimedOut),
	wire.DecisionRequestCancelActivity: {
		event: wire.EventActivityCancelRequested,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			if d.ActivityID <= 0 {
				return fmt.Errorf("a %s decision without its activity", d.Type)
			}
			r.Attrs = wire.ActivityCancelRequestedAttrs{ActivityID: d.ActivityID}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.ActivityCancelRequestedAttrs
			return json.Unmarshal(raw, &a) == nil && a.ActivityID == d.ActivityID
		},
	},
	wire.DecisionStartChild: {
		event: wire.EventChildWorkflowInitiated,
		record: func(r *Recorded, keys Keys, d *wire.Decision, _ time.Time) error {
			if d.Child == nil || d.Child.ChildID <= 0 || d.Child.WorkflowName == "" {
				return fmt.Errorf("a %s decision without its child", d.Type)
			}
			c := ChildStart(keys.ExecutionID, d.Child)
			r.Attrs = c
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.ChildAttrs
			return d.Child != nil && json.Unmarshal(raw, &a) == nil && a.ChildID == d.Child.ChildID && a.WorkflowName == d.Child.WorkflowName &&
				(d.Child.WorkflowID == "" || a.WorkflowID == d.Child.WorkflowID) && wire.SameJSON(a.Input, d.Child.Input)
		},
	},
	wire.DecisionRequestCancelChild: {
		event: wire.EventChildWorkflowCancelRequested,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			if d.Child == nil || d.Child.ChildID <= 0 {
				return fmt.Errorf("a %s decision without its child", d.Type)
			}
			r.Attrs = wire.ChildAttrs{ChildID: d.Child.ChildID}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.ChildAttrs
			return d.Child != nil && json.Unmarshal(raw, &a) == nil && a.ChildID == d.Child.ChildID
		},
	},
	wire.DecisionSignalExternal: {
		event: wire.EventExternalSignalInitiated,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			s := d.Signal
			if s == nil || s.SignalID <= 0 || s.SignalName == "" || (s.ExecutionID == "") == (s.WorkflowID == "") {
				return fmt.Errorf("a %s decision without its signal and one target", d.Type)
			}
			r.Attrs = wire.ExternalSignalAttrs{SignalID: s.SignalID, ExecutionID: s.ExecutionID, WorkflowName: s.WorkflowName,
				WorkflowID: s.WorkflowID, SignalName: s.SignalName, Payload: s.Payload}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.ExternalSignalAttrs
			return d.Signal != nil && json.Unmarshal(raw, &a) == nil && a.SignalID == d.Signal.SignalID && a.SignalName == d.Signal.SignalName &&
				a.ExecutionID == d.Signal.ExecutionID && a.WorkflowID == d.Signal.WorkflowID && wire.SameJSON(a.Payload, d.Signal.Payload)
		},
	},
	wire.DecisionContinueAsNew: {
		event: wire.EventWorkflowContinuedAsNew,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			if d.ContinueAsNew == nil {
				return fmt.Errorf("a %s decision without its new run", d.Type)
			}
			can := *d.ContinueAsNew
			can.NewExecutionID = "" // the scheduler's to mint
			r.Closes, r.Status = true, wire.StatusContinuedAsNew
			r.Attrs = wire.WorkflowClosedAttrs{ContinueAsNew: &can}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.WorkflowClosedAttrs
			return json.Unmarshal(raw, &a) == nil && a.ContinueAsNew != nil && d.ContinueAsNew != nil &&
				a.ContinueAsNew.WorkflowName == d.ContinueAsNew.WorkflowName && a.ContinueAsNew.TaskQueue == d.ContinueAsNew.TaskQueue &&
				wire.SameJSON(a.ContinueAsNew.Input, d.ContinueAsNew.Input)
		},
	},
}

// closedByCode is the kind of a decision by which the code of an
// execution asked to cancel (by a request, or because it timed out)
// closes it when it returns: event, status, with its result or its
// error. The scheduler's own close of the same event carries a reason,
// and is not this decision's (Imposed).
func closedByCode(event, status string) kind {
	return kind{
		event: event,
		record: func(r *Recorded, _ Keys, d *wire.Decision, _ time.Time) error {
			r.Closes, r.Status = true, status
			r.Attrs = wire.WorkflowClosedAttrs{Result: d.Result, Failure: d.Failure}
			return nil
		},
		matches: func(d *wire.Decision, raw json.RawMessage) bool {
			var a wire.WorkflowClosedAttrs
			return json.Unmarshal(raw, &a) == nil && a.Reason == "" && wire.SameJSON(a.Result, d.Result) && (a.Failure == nil) == (d.Failure == nil) &&
				(a.Failure == nil || a.Failure.Message == d.Failure.Message && a.Failure.Type == d.Failure.Type)
		},
	}
}

// Keys derives the idempotency keys of an execution's activities: from
// the execution and the activity's id (dedup.ActivityKeyFor), or, for a
// run reset from another (docs/reset.md), the key the other run's
// activity at the same position had, when it has the same name.
type Keys struct {
	ExecutionID string
	// Inherited are the keys of the run the execution was reset from,
	// by activity id (wire.ResetInfo.Keys); nil for most executions.
	Inherited map[int]wire.ResetKey
}

// KeysOf derives the keys of execution executionID, which inherits
// inherited (nil for none).
func KeysOf(executionID string, inherited map[int]wire.ResetKey) Keys {
	return Keys{ExecutionID: executionID, Inherited: inherited}
}

// For is the key of the execution's activity id, named name.
func (k Keys) For(id int, name string) string {
	if old, ok := k.Inherited[id]; ok && old.Name == name && old.Key != "" {
		return old.Key
	}
	return dedup.ActivityKeyFor(k.ExecutionID, id).String()
}

// Record is what decision d, taken in a task applied at now by the
// execution whose activities' keys keys derives, records. A decision of
// an unknown kind, or one missing what its kind needs, is an error: the
// scheduler ignores it, and says so.
func Record(keys Keys, d *wire.Decision, now time.Time) (Recorded, error) {
	k, ok := kinds[d.Type]
	if !ok {
		return Recorded{}, fmt.Errorf("unknown decision %q", d.Type)
	}
	r := Recorded{Event: k.event}
	if err := k.record(&r, keys, d, now); err != nil {
		return Recorded{}, err
	}
	return r, nil
}

// Matches says whether ev is what decision d records: the same kind, and
// the same name, input and options (an activity), duration (a timer),
// marker or result. Times and keys, which the scheduler adds, are not
// compared.
func Matches(d *wire.Decision, ev wire.Event) bool {
	k, ok := kinds[d.Type]
	return ok && k.event == ev.Type && k.matches(d, ev.Attrs)
}

// Imposed says whether ev, of a decision's type, was recorded by the
// scheduler on its own rather than for a decision, so that a replay
// does not look for a decision of it: the WorkflowFailed of an execution
// whose history passed its limit, the WorkflowCancelled of one
// cancelled before its code ran, or the WorkflowTimedOut of one whose
// timeout passed, which carry a reason as the close of terminate does (a
// fail_workflow, cancel_workflow or time_out_workflow decision's has
// none).
func Imposed(ev wire.Event) bool {
	if ev.Type != wire.EventWorkflowFailed && ev.Type != wire.EventWorkflowCancelled && ev.Type != wire.EventWorkflowTimedOut {
		return false
	}
	var a wire.WorkflowClosedAttrs
	return json.Unmarshal(ev.Attrs, &a) == nil && a.Reason != ""
}

// IsDecisionEvent says whether events of type typ record a decision, and
// so are matched against the code's decisions on replay.
func IsDecisionEvent(typ string) bool {
	for _, k := range kinds {
		if k.event == typ {
			return true
		}
	}
	return false
}

// Kinds are the wire types of every kind of decision, sorted.
func Kinds() []string { return slices.Sorted(maps.Keys(kinds)) }

// TaskCompleted is the event the scheduler records before a workflow
// task's decisions: the task, the last event it saw (baseSeq), its time
// (what the workflow's Now read) and the build of the worker that ran it.
// A replay shows the workflow the history as that task saw it.
func TaskCompleted(taskID, baseSeq int, at time.Time, buildID string) (string, wire.WorkflowTaskCompletedAttrs) {
	return wire.EventWorkflowTaskCompleted, wire.WorkflowTaskCompletedAttrs{TaskID: taskID, BaseSeq: baseSeq, Time: at.UTC(), BuildID: buildID}
}

// ActivityCompleted is the event of an activity's attempt that returned
// result.
func ActivityCompleted(activityID int, name string, attempt int, result json.RawMessage) (string, wire.ActivityClosedAttrs) {
	return wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: activityID, ActivityName: name, Attempt: attempt, Result: result}
}

// Attempt is one attempt of an activity, as the scheduler (or, for
// attempt 1, a worker running it eagerly) dispatches it.
type Attempt struct {
	// Task is the workflow task's execution: its id, shard and workflow.
	ExecutionID  string
	Shard        int
	WorkflowName string
	// TaskQueue is the queue the attempt runs on.
	TaskQueue string
	Activity  Activity
	Number    int
	// ScheduledAt is when the activity was scheduled, which bounds every
	// attempt by its schedule-to-close timeout.
	ScheduledAt time.Time
	// HeartbeatDetails and PreviousOutcomeUnknown carry what the
	// attempts before it left.
	HeartbeatDetails       json.RawMessage
	PreviousOutcomeUnknown bool
}

// Task is the attempt's task, dispatched at now: its deadline is its
// start-to-close timeout from now, or the activity's schedule-to-close
// one from its scheduling, whichever comes first.
func (a *Attempt) Task(now time.Time) *wire.ActivityTask {
	opts := a.Activity.Options
	deadline := now.Add(opts.StartToClose())
	if total := opts.ScheduleToClose(); total > 0 && a.ScheduledAt.Add(total).Before(deadline) {
		deadline = a.ScheduledAt.Add(total)
	}
	return &wire.ActivityTask{
		ExecutionID: a.ExecutionID, Shard: a.Shard, WorkflowName: a.WorkflowName, TaskQueue: a.TaskQueue,
		ActivityID: a.Activity.ID, ActivityName: a.Activity.Name, Input: a.Activity.Input, IdempotencyKey: a.Activity.Key,
		Attempt: a.Number, ScheduledAt: a.ScheduledAt, Deadline: deadline,
		HeartbeatTimeoutMS: opts.HeartbeatTimeoutMS, HeartbeatDetails: a.HeartbeatDetails, PreviousOutcomeUnknown: a.PreviousOutcomeUnknown,
	}
}

// ChildStart is the child a start_child decision of the execution
// parentID starts: c, its workflow_id, if the code gave none, derived
// from the parent and the child's id (so that a replay names the same).
func ChildStart(parentID string, c *wire.ChildAttrs) wire.ChildAttrs {
	out := *c
	if out.WorkflowID == "" {
		out.WorkflowID = parentID + "/child-" + strconv.Itoa(c.ChildID)
	}
	if out.ParentClosePolicy == "" {
		out.ParentClosePolicy = wire.ParentCloseTerminate
	}
	out.ExecutionID, out.Status, out.Result, out.Failure, out.Error, out.Message, out.Served = "", "", nil, nil, "", "", false
	return out
}
