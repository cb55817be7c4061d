package harvest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/wire"
)

// WorkflowInfo describes the execution a workflow function runs in.
type WorkflowInfo struct {
	ExecutionID  string
	WorkflowName string
	WorkflowID   string
	TaskQueue    string
	// StartTime is when the execution started (its WorkflowStarted).
	StartTime time.Time
	// Attempt is the execution's attempt, from 1. Harvest does not run
	// an execution again as a whole, so it is 1.
	Attempt int
	// HistoryLength and HistorySize are the history the current
	// workflow task saw: its events, and their size in bytes (their
	// types and attributes), as the replay stands.
	HistoryLength int
	HistorySize   int
	// ContinuedFrom is the run this one continues (ContinueAsNew), ""
	// for a first run.
	ContinuedFrom string
	// ContinueAsNewSuggested says that the history, when the current
	// workflow task was dispatched, was past the scheduler's suggestion
	// threshold (history_suggest_events, 4,096 events, or
	// history_suggest_bytes, 4 MiB, by default): a workflow that runs for
	// ever continues as new now, well before the hard limit at which its
	// execution fails with HistoryLimitExceeded
	// (docs/reliability.md#history-limits).
	//
	// It is the same on every replay: the scheduler decides it for each
	// task from the history's length and size as it counted them, and
	// records it with the task (its WorkflowTaskCompleted), as it records
	// the task's time. A replay reads it from there rather than compare
	// its own count with thresholds, which could differ: the sizes a
	// worker counts depend on how the events reached it (PostgreSQL
	// stores them as jsonb, and gives some numbers and escapes back
	// otherwise written), and the thresholds are configuration that can
	// change while the execution runs.
	ContinueAsNewSuggested bool
}

// WorkflowContext is what workflow code receives. It is valid only inside
// the workflow function and the goroutines it starts with Go, never in a
// goroutine started with the go statement.
//
// A context is connected to the execution's cancellation (Done, Err)
// unless it was made with NewDisconnectedContext, or by Go from one that
// was.
type WorkflowContext struct {
	x *execution
	// disconnected says the execution's cancellation does not reach calls
	// made with this context (NewDisconnectedContext).
	disconnected bool
}

// Info describes the running execution.
func (c *WorkflowContext) Info() WorkflowInfo {
	info := c.x.info
	info.HistoryLength, info.HistorySize = c.x.seenLen, c.x.seenSize
	info.ContinueAsNewSuggested = c.x.suggested
	return info
}

// GetInfo describes the running execution: ctx.Info(), for code written
// against Temporal's workflow.GetInfo(ctx).
func GetInfo(ctx *WorkflowContext) WorkflowInfo { return ctx.Info() }

// Logger is a logger for workflow code: its records carry the
// execution's execution_id, workflow and workflow_id, and it writes
// nothing while the workflow replays its history, so that each line is
// written once, when the code first runs past it.
func (c *WorkflowContext) Logger() *slog.Logger { return c.x.log }

// IsReplaying says whether the workflow code is replaying its history
// (running again past what an earlier workflow task ran) rather than
// running for the first time.
func IsReplaying(ctx *WorkflowContext) bool { return ctx.x.replaying }

// Now is the workflow's time: the time of the workflow task the code runs
// in, the same on every replay. Use it instead of time.Now.
func Now(ctx *WorkflowContext) time.Time { return ctx.x.now }

// ExecuteActivity schedules the named activity with input (encoded as JSON)
// and returns a Future for its result. Options given here (at most one
// ActivityOptions; several are merged in order) override, field by
// field, those the activity was registered with. Scheduling is recorded
// when the workflow task completes; on replay the call is matched with its
// history (name, input and options).
//
// Once the execution's cancellation is visible, an activity scheduled
// with ctx is given up (its running attempt's context is cancelled) and
// its Future fails with a canceled error (IsCanceled); called then with
// ctx, ExecuteActivity schedules nothing and returns a Future already
// failed so. A disconnected context's activities run on
// (NewDisconnectedContext).
func ExecuteActivity(ctx *WorkflowContext, name string, input any, opts ...ActivityOptions) *Future {
	x := ctx.x
	x.nextActivity++
	id := x.nextActivity
	f := &Future{x: x, id: id, name: name}
	if ctx.cancelled() {
		// The id is spent all the same, so that those of the
		// activities after it do not depend on when the request came.
		x.activities[id] = &activityState{canceled: true, tick: x.tick}
		return f
	}
	raw, err := json.Marshal(input)
	if err != nil {
		f.encodeErr = fmt.Errorf("encode input of activity %q: %w", name, err)
		return f
	}
	st := x.activityState(id)
	st.scheduled, st.disconnected = true, ctx.disconnected
	o := x.opts[name]
	for _, over := range opts {
		o = o.merge(over)
	}
	x.decide(wire.Decision{Type: wire.DecisionScheduleActivity, ActivityID: id, ActivityName: name, Input: raw, Options: o.wire()})
	return f
}

// Future is the eventual result of an activity, of a child workflow
// (ExecuteChildWorkflow), or of a signal sent to another execution
// (SignalExternalWorkflow).
type Future struct {
	x         *execution
	id        int
	name      string
	encodeErr error
	// child and signal say the Future is a child workflow's
	// (ExecuteChildWorkflow) or a signal's (SignalExternalWorkflow),
	// numbered by id among those; else it is an activity's.
	child, signal   bool
	childWorkflowID string
}

// result is the activity's result, if the history has shown it.
func (f *Future) result() *wire.ActivityClosedAttrs {
	if st := f.x.activities[f.id]; st != nil {
		return st.result
	}
	return nil
}

// readyTick orders the future among a Selector's cases.
func (f *Future) readyTick() (int, bool) {
	switch {
	case f.encodeErr != nil:
		return 0, true
	case f.child:
		return f.childReadyTick()
	case f.signal:
		return f.signalReadyTick()
	}
	if st := f.x.activities[f.id]; st != nil && (st.result != nil || st.canceled) {
		return st.tick, true
	}
	return 0, false
}

// wait is what a Get of f waits for.
func (f *Future) wait() api.WaitCase {
	switch {
	case f.child:
		return api.WaitCase{Kind: api.WaitChild, Name: f.name, ID: f.id, WorkflowID: f.childWorkflowID}
	case f.signal:
		return api.WaitCase{Kind: api.WaitExternalSignal, Name: f.name, ID: f.id}
	}
	return api.WaitCase{Kind: api.WaitActivity, Name: f.name, ID: f.id}
}

// IsReady reports whether Get would return without blocking: the
// activity's result is in the history as far as the workflow has seen
// it, or the activity was given up for the execution's cancellation.
func (f *Future) IsReady() bool {
	_, ok := f.readyTick()
	return ok
}

// Get blocks until the activity has finished, then decodes its result into
// out (a pointer, or nil to discard it). A failed activity returns an
// *ActivityError; one given up for the execution's cancellation a
// *CanceledError (IsCanceled), whatever result came after.
func (f *Future) Get(out any) error {
	if f.encodeErr != nil {
		return f.encodeErr
	}
	f.x.d.block(api.Wait{WaitCase: f.wait()}, f.IsReady)
	switch {
	case f.child:
		return f.childGet(out)
	case f.signal:
		return f.signalGet()
	}
	if st := f.x.activities[f.id]; st.canceled {
		return f.x.canceled(fmt.Sprintf("activity %q", f.name))
	}
	res := f.result()
	if res.Failure != nil {
		return &ActivityError{Activity: f.name, Message: res.Failure.Message, Type: res.Failure.Type, Attempts: res.Attempt}
	}
	if out == nil || len(res.Result) == 0 {
		return nil
	}
	if err := json.Unmarshal(res.Result, out); err != nil {
		return fmt.Errorf("decode result of activity %q: %w", f.name, err)
	}
	return nil
}

// ActivityError is what Future.Get returns for a failed activity.
type ActivityError struct {
	Activity string
	Message  string
	Type     string
	Attempts int
}

func (e *ActivityError) Error() string {
	return fmt.Sprintf("activity %q failed after %d attempt(s): %s", e.Activity, e.Attempts, e.Message)
}

// Unwrap returns the cause: the last attempt's error, as an
// *ApplicationError of its type.
func (e *ActivityError) Unwrap() error {
	return &ApplicationError{Type: e.Type, Message: e.Message}
}

// workflowFunc is a registered workflow, with JSON in and out.
type workflowFunc func(ctx *WorkflowContext, input json.RawMessage) (any, error)
