package harvest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Child workflows and signals between workflows (docs/children.md).
//
// ExecuteChildWorkflow starts a workflow as the child of the running
// one: its start_child decision is recorded, and the scheduler starts
// the child once, under a key made of the parent's execution and the
// child's number in the order the code starts them, so that a replayed
// or redelivered task never starts it twice. The child's start, its
// refusal and its close come back as history events, which the Future
// shows as an activity's Future shows an activity's result.
// SignalExternalWorkflow sends a signal likewise, keyed by the sender
// and the signal's number, so that a replay sends it once.

// Parent-close policies (ChildOptions.ParentClosePolicy): what becomes
// of a child still running when its parent's chain of runs closes
// (completes, fails, is cancelled, terminated or times out; not when it
// continues as new).
const (
	// ParentCloseTerminate terminates the child (the default).
	ParentCloseTerminate = wire.ParentCloseTerminate
	// ParentCloseRequestCancel asks the child to cancel: its code cleans
	// up.
	ParentCloseRequestCancel = wire.ParentCloseRequestCancel
	// ParentCloseAbandon leaves the child running.
	ParentCloseAbandon = wire.ParentCloseAbandon
)

// ChildOptions tune a child workflow's start. The zero value is the
// defaults.
type ChildOptions struct {
	// WorkflowID is the child's workflow_id; empty derives one from the
	// parent's execution and the child's number ("<execution
	// id>/child-<n>": ChildWorkflowID), the same on every replay.
	WorkflowID string
	// TaskQueue is the task queue the child's tasks go to; empty is the
	// parent's.
	TaskQueue string
	// ParentClosePolicy is ParentCloseTerminate (empty),
	// ParentCloseRequestCancel or ParentCloseAbandon.
	ParentClosePolicy string
	// ReusePolicy is the start's reuse_policy (client.ReuseRejectDuplicate
	// ...): what the start does when the workflow_id has an execution
	// already; empty is allow_duplicate, which finds a running one.
	ReusePolicy string
	// RunTimeout and ExecutionTimeout bound the child's run and its chain
	// of continued runs (zero: its workflow's configured ones).
	RunTimeout       time.Duration
	ExecutionTimeout time.Duration
	// Priority is the priority of the child's tasks, from api.MinPriority
	// (1) to api.MaxPriority (5); zero means the parent's. Another fails
	// the child's start (invalid_priority).
	Priority int
	// SearchAttributes are the child's search attributes
	// (docs/search-attributes.md), values as UpsertSearchAttributes takes
	// them: a value of another Go type fails the Future at once; a name
	// the child's workflow does not declare, or a value of another type
	// than declared, fails the child's start (invalid_search_attribute).
	SearchAttributes map[string]any
}

// childState is a child workflow the code started, and what the history
// has shown of it.
type childState struct {
	// started is its ChildWorkflowStarted, closed its close (or its
	// start's refusal, closedType saying which event).
	started    *wire.ChildAttrs
	closed     *wire.ChildAttrs
	closedType string
	tick       int
	scheduled  bool
	// disconnected, cancelRequested and canceled are as an activity's: a
	// child asked to cancel is waited for until it closes.
	disconnected    bool
	cancelRequested bool
	canceled        bool
}

// signalState is a signal the code sent to another execution.
type signalState struct {
	outcome     *wire.ExternalSignalAttrs
	outcomeType string
	tick        int
}

// ChildWorkflowError is what a child's Future.Get returns when the child
// did not complete: Status is how its chain closed (Failed, Cancelled,
// Terminated, TimedOut), or StartFailed when its start was refused (Code
// says why: workflow_id_conflict, unknown_workflow, ...).
type ChildWorkflowError struct {
	Workflow    string
	WorkflowID  string
	ExecutionID string
	Status      string
	// Code is a refused start's error code.
	Code string
	// Type and Message are the child's failure's, or the refusal's
	// message.
	Type    string
	Message string
}

// StatusStartFailed is a ChildWorkflowError's Status when the child's
// start was refused.
const StatusStartFailed = "StartFailed"

func (e *ChildWorkflowError) Error() string {
	if e.Status == StatusStartFailed {
		return fmt.Sprintf("child workflow %q (workflow_id %q) could not start: %s: %s", e.Workflow, e.WorkflowID, e.Code, e.Message)
	}
	return fmt.Sprintf("child workflow %q (execution %s) closed %s: %s", e.Workflow, e.ExecutionID, e.Status, e.Message)
}

// Unwrap returns the child's failure as an *ApplicationError of its type
// (a canceled error for a child that closed Cancelled).
func (e *ChildWorkflowError) Unwrap() error {
	if e.Status == wire.StatusCancelled {
		return &CanceledError{What: fmt.Sprintf("child workflow %q", e.Workflow), Reason: e.Message}
	}
	return &ApplicationError{Type: cmpOr(e.Type, e.Code), Message: e.Message}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ExecuteChildWorkflow starts the workflow name, with input (encoded as
// JSON), as a child of the running execution, and returns a Future for
// its result: Get decodes it once the child's chain completes, or
// returns a *ChildWorkflowError (it failed, was cancelled, terminated,
// timed out, or could not start: a workflow_id already running under
// reject_duplicate, a workflow no worker serves and the configuration
// does not declare, ...); the parent goes on either way. The Future
// works in a Selector (AddFuture). opts is at most one ChildOptions.
//
// The start is recorded when the workflow task completes, and applied
// once, whatever the replays and redeliveries of the task. Once the
// execution's cancellation is visible, a child started with a connected
// context is asked to cancel and its Future fails with a canceled error;
// called then, ExecuteChildWorkflow starts nothing.
func ExecuteChildWorkflow(ctx *WorkflowContext, name string, input any, opts ...ChildOptions) *Future {
	x := ctx.x
	x.nextChild++
	id := x.nextChild
	var o ChildOptions
	for _, over := range opts {
		o = over
	}
	f := &Future{x: x, id: id, name: name, child: true, childWorkflowID: o.WorkflowID}
	if f.childWorkflowID == "" {
		f.childWorkflowID = x.info.ExecutionID + "/child-" + strconv.Itoa(id)
	}
	if ctx.cancelled() {
		x.children[id] = &childState{canceled: true, tick: x.tick}
		return f
	}
	raw, err := json.Marshal(input)
	if err == nil {
		// Refused here, where the code can be fixed, rather than as a
		// workflow task result the scheduler cannot record.
		err = storable.CheckJSON(raw)
	}
	if err != nil {
		f.encodeErr = fmt.Errorf("input of child workflow %q: %w", name, err)
		return f
	}
	attrs, err := encodeSearchAttributes(o.SearchAttributes, false)
	if err != nil {
		f.encodeErr = fmt.Errorf("search attributes of child workflow %q: %w", name, err)
		return f
	}
	st := x.children[id]
	if st == nil {
		st = &childState{}
		x.children[id] = st
	}
	st.scheduled, st.disconnected = true, ctx.disconnected
	served := x.serves != nil && x.serves(name, cmpOr(o.TaskQueue, x.info.TaskQueue))
	x.decide(wire.Decision{Type: wire.DecisionStartChild, Child: &wire.ChildAttrs{ChildID: id, WorkflowName: name, WorkflowID: o.WorkflowID,
		TaskQueue: o.TaskQueue, Input: raw, ParentClosePolicy: o.ParentClosePolicy, ReusePolicy: o.ReusePolicy,
		RunTimeoutMS: ceilMS(o.RunTimeout), ExecutionTimeoutMS: ceilMS(o.ExecutionTimeout), Priority: o.Priority, SearchAttributes: attrs, Served: served}})
	return f
}

// ChildWorkflowID is the workflow_id of the child a Future of
// ExecuteChildWorkflow stands for: ChildOptions.WorkflowID, or the one
// derived for it. "" for another Future.
func (f *Future) ChildWorkflowID() string { return f.childWorkflowID }

// ChildExecutionID is the child's execution id once the history shows
// its start (ok false until then, and for another Future).
func (f *Future) ChildExecutionID() (id string, ok bool) {
	if !f.child {
		return "", false
	}
	if st := f.x.children[f.id]; st != nil && st.started != nil {
		return st.started.ExecutionID, true
	}
	return "", false
}

// childReadyTick is readyTick for a child's Future.
func (f *Future) childReadyTick() (int, bool) {
	if st := f.x.children[f.id]; st != nil && (st.closed != nil || st.canceled) {
		return st.tick, true
	}
	return 0, false
}

// childGet is Get for a child's Future, once it is ready.
func (f *Future) childGet(out any) error {
	st := f.x.children[f.id]
	if st.canceled {
		return f.x.canceled(fmt.Sprintf("child workflow %q", f.name))
	}
	c := st.closed
	if st.closedType == wire.EventChildWorkflowStartFailed {
		return &ChildWorkflowError{Workflow: f.name, WorkflowID: f.childWorkflowID, Status: StatusStartFailed, Code: c.Error, Message: c.Message}
	}
	if st.closedType == wire.EventChildWorkflowCompleted && c.Error != "" {
		// It completed, and its result could not be carried here.
		return &ChildWorkflowError{Workflow: f.name, WorkflowID: f.childWorkflowID, ExecutionID: c.ExecutionID, Status: c.Status, Code: c.Error, Message: c.Message}
	}
	if st.closedType != wire.EventChildWorkflowCompleted {
		err := &ChildWorkflowError{Workflow: f.name, WorkflowID: f.childWorkflowID, ExecutionID: c.ExecutionID, Status: c.Status}
		if c.Failure != nil {
			err.Type, err.Message = c.Failure.Type, c.Failure.Message
		}
		return err
	}
	if out == nil || len(c.Result) == 0 {
		return nil
	}
	if err := json.Unmarshal(c.Result, out); err != nil {
		return fmt.Errorf("decode result of child workflow %q: %w", f.name, err)
	}
	return nil
}

// seeChild makes a child's event visible.
func (x *execution) seeChild(ev wire.Event) error {
	var a wire.ChildAttrs
	if err := json.Unmarshal(ev.Attrs, &a); err != nil {
		return fmt.Errorf("history event %d: %w", ev.Seq, err)
	}
	st := x.children[a.ChildID]
	if st == nil {
		st = &childState{}
		x.children[a.ChildID] = st
	}
	if ev.Type == wire.EventChildWorkflowStarted {
		st.started = &a
		return nil
	}
	if st.closed == nil {
		st.closed, st.closedType = &a, ev.Type
		if !st.canceled {
			st.tick = x.tick
		}
	}
	return nil
}

// cancelChildren gives up, for the execution's cancellation, the
// children started with a connected context that have not closed: each
// is asked to cancel (request_cancel_child), in the order they started;
// its Future shows how it then closes (Cancelled, or as it did if it
// closed otherwise first).
func (x *execution) cancelChildren() {
	for _, id := range slices.Sorted(maps.Keys(x.children)) {
		st := x.children[id]
		if !st.scheduled || st.disconnected || st.closed != nil || st.canceled || st.cancelRequested {
			continue
		}
		st.cancelRequested = true
		x.decide(wire.Decision{Type: wire.DecisionRequestCancelChild, Child: &wire.ChildAttrs{ChildID: id}})
	}
}

// SignalExternalWorkflow sends the signal name, with payload (encoded as
// JSON), to the execution executionID (a child's: Future.ChildExecutionID;
// a run that continued as new passes it to its chain's newest), and
// returns a Future that is ready once the signal was delivered, or
// failed (Get returns an *ApplicationError of type execution_not_found,
// execution_terminal, ...). The signal is keyed by the sender and its
// number in the order the code sends them: a replay sends it once.
func SignalExternalWorkflow(ctx *WorkflowContext, executionID, name string, payload any) *Future {
	return signalExternal(ctx, &wire.ExternalSignalAttrs{ExecutionID: executionID, SignalName: name}, payload)
}

// SignalExternalWorkflowByID is SignalExternalWorkflow to the latest
// execution of the workflow workflowName whose workflow_id is
// workflowID (a child's: Future.ChildWorkflowID, known before its start
// is).
func SignalExternalWorkflowByID(ctx *WorkflowContext, workflowName, workflowID, name string, payload any) *Future {
	return signalExternal(ctx, &wire.ExternalSignalAttrs{WorkflowName: workflowName, WorkflowID: workflowID, SignalName: name}, payload)
}

func signalExternal(ctx *WorkflowContext, s *wire.ExternalSignalAttrs, payload any) *Future {
	x := ctx.x
	x.nextSignal++
	s.SignalID = x.nextSignal
	f := &Future{x: x, id: s.SignalID, name: s.SignalName, signal: true}
	raw, err := json.Marshal(payload)
	if err == nil {
		err = storable.CheckJSON(raw)
	}
	if err != nil {
		f.encodeErr = fmt.Errorf("payload of signal %q: %w", s.SignalName, err)
		return f
	}
	if x.sent[s.SignalID] == nil {
		x.sent[s.SignalID] = &signalState{}
	}
	s.Payload = raw
	x.decide(wire.Decision{Type: wire.DecisionSignalExternal, Signal: s})
	return f
}

// seeSignalOutcome makes visible how a signal the code sent went.
func (x *execution) seeSignalOutcome(ev wire.Event) error {
	var a wire.ExternalSignalAttrs
	if err := json.Unmarshal(ev.Attrs, &a); err != nil {
		return fmt.Errorf("history event %d: %w", ev.Seq, err)
	}
	st := x.sent[a.SignalID]
	if st == nil {
		st = &signalState{}
		x.sent[a.SignalID] = st
	}
	if st.outcome == nil {
		st.outcome, st.outcomeType, st.tick = &a, ev.Type, x.tick
	}
	return nil
}

// signalReadyTick is readyTick for a signal's Future.
func (f *Future) signalReadyTick() (int, bool) {
	if st := f.x.sent[f.id]; st != nil && st.outcome != nil {
		return st.tick, true
	}
	return 0, false
}

// signalGet is Get for a signal's Future, once it is ready.
func (f *Future) signalGet() error {
	st := f.x.sent[f.id]
	if st.outcomeType == wire.EventExternalSignalFailed {
		return &ApplicationError{Type: st.outcome.Error, Message: fmt.Sprintf("signal %q: %s", f.name, st.outcome.Message)}
	}
	return nil
}

// ceilMS is d in whole milliseconds, a positive d under one rounded up to
// one: a timeout always bounds.
func ceilMS(d time.Duration) int64 {
	if d > 0 && d < time.Millisecond {
		return 1
	}
	return d.Milliseconds()
}
