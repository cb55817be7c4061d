package harvest

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/harvest-engine/harvest/internal/wire"
)

// ErrNonDeterministic is returned (wrapped) when workflow code, replayed
// over its history, makes calls that differ from those the history records.
var ErrNonDeterministic = errors.New("workflow is not deterministic")

// WorkflowInfo describes the execution a workflow function runs in.
type WorkflowInfo struct {
	ExecutionID  string
	WorkflowName string
	WorkflowID   string
	TaskQueue    string
}

// WorkflowContext is what workflow code receives. It is only valid inside
// the workflow function and must not be shared with other goroutines.
type WorkflowContext struct {
	info WorkflowInfo
	r    *replayer
	// activityOptions are the worker's registration options by activity.
	activityOptions map[string]ActivityOptions
}

// Info describes the running execution.
func (c *WorkflowContext) Info() WorkflowInfo { return c.info }

// ExecuteActivity schedules the named activity with input (encoded as JSON)
// and returns a Future for its result. Options given here override, field
// by field, those the activity was registered with. Scheduling is recorded
// when the workflow task completes; on replay the call is matched with its
// history.
func ExecuteActivity(ctx *WorkflowContext, name string, input any, opts ...ActivityOptions) *Future {
	r := ctx.r
	r.nextActivity++
	id := r.nextActivity
	f := &Future{r: r, id: id, name: name}
	raw, err := json.Marshal(input)
	if err != nil {
		f.encodeErr = fmt.Errorf("encode input of activity %q: %w", name, err)
		return f
	}
	if sched, ok := r.scheduled[id]; ok {
		if sched.ActivityName != name {
			r.fail(fmt.Errorf("%w: activity %d is %q in history, code asks for %q", ErrNonDeterministic, id, sched.ActivityName, name))
		}
		return f
	}
	o := ctx.activityOptions[name]
	for _, over := range opts {
		o = o.merge(over)
	}
	r.decisions = append(r.decisions, wire.Decision{Type: wire.DecisionScheduleActivity, ActivityID: id, ActivityName: name, Input: raw, Options: o.wire()})
	return f
}

// Future is the eventual result of an activity.
type Future struct {
	r         *replayer
	id        int
	name      string
	encodeErr error
}

// IsReady reports whether Get would return without blocking.
func (f *Future) IsReady() bool {
	_, ok := f.r.closed[f.id]
	return ok || f.encodeErr != nil
}

// Get blocks until the activity has finished, then decodes its result into
// out (a pointer, or nil to discard it). A failed activity returns an
// *ActivityError.
func (f *Future) Get(out any) error {
	if f.encodeErr != nil {
		return f.encodeErr
	}
	res, ok := f.r.closed[f.id]
	if !ok {
		f.r.block()
	}
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

// replayer runs one workflow task: it indexes the history, runs the
// workflow function until it returns or blocks on a future the history
// cannot resolve, and collects the decisions taken past the history.
type replayer struct {
	scheduled    map[int]wire.ActivityScheduledAttrs
	closed       map[int]wire.ActivityClosedAttrs
	closedSeq    map[int]int
	nextActivity int
	decisions    []wire.Decision

	// signals holds each channel's signals in arrival order; consumed
	// counts those the workflow has received.
	signals  map[string][]receivedSignal
	consumed map[string]int
	// timers started and fired, by timer id, with the fired event's seq.
	timerStarted map[int]bool
	timerFired   map[int]int
	nextTimer    int

	blocked chan struct{}
	release chan struct{}
	err     error
}

// blockSignal unwinds a workflow goroutine that can make no more progress.
func (r *replayer) block() {
	r.blocked <- struct{}{}
	<-r.release
	runtime.Goexit()
}

func (r *replayer) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.block()
}

type workflowOutcome struct {
	result any
	err    error
	panic  *wire.Failure
}

// runWorkflowTask replays fn over task's history and returns the decisions
// of this task. An error means the task cannot complete (non-determinism,
// a panic, a corrupt history) and should be retried later.
func runWorkflowTask(fn workflowFunc, task *wire.WorkflowTask, activityOptions map[string]ActivityOptions) ([]wire.Decision, error) {
	r := &replayer{
		scheduled:    map[int]wire.ActivityScheduledAttrs{},
		closed:       map[int]wire.ActivityClosedAttrs{},
		closedSeq:    map[int]int{},
		signals:      map[string][]receivedSignal{},
		consumed:     map[string]int{},
		timerStarted: map[int]bool{},
		timerFired:   map[int]int{},
		blocked:      make(chan struct{}),
		release:      make(chan struct{}),
	}
	var input json.RawMessage
	for _, ev := range task.History {
		switch ev.Type {
		case wire.EventWorkflowStarted:
			var a wire.WorkflowStartedAttrs
			if err := json.Unmarshal(ev.Attrs, &a); err != nil {
				return nil, fmt.Errorf("history event %d: %w", ev.Seq, err)
			}
			input = a.Input
		case wire.EventActivityScheduled:
			var a wire.ActivityScheduledAttrs
			if err := json.Unmarshal(ev.Attrs, &a); err != nil {
				return nil, fmt.Errorf("history event %d: %w", ev.Seq, err)
			}
			r.scheduled[a.ActivityID] = a
		case wire.EventActivityCompleted, wire.EventActivityFailed:
			var a wire.ActivityClosedAttrs
			if err := json.Unmarshal(ev.Attrs, &a); err != nil {
				return nil, fmt.Errorf("history event %d: %w", ev.Seq, err)
			}
			r.closed[a.ActivityID] = a
			r.closedSeq[a.ActivityID] = ev.Seq
		case wire.EventSignalReceived:
			var a wire.SignalReceivedAttrs
			if err := json.Unmarshal(ev.Attrs, &a); err != nil {
				return nil, fmt.Errorf("history event %d: %w", ev.Seq, err)
			}
			r.signals[a.SignalName] = append(r.signals[a.SignalName], receivedSignal{seq: ev.Seq, payload: a.Payload})
		case wire.EventTimerStarted, wire.EventTimerFired:
			var a wire.TimerAttrs
			if err := json.Unmarshal(ev.Attrs, &a); err != nil {
				return nil, fmt.Errorf("history event %d: %w", ev.Seq, err)
			}
			if ev.Type == wire.EventTimerStarted {
				r.timerStarted[a.TimerID] = true
			} else {
				r.timerFired[a.TimerID] = ev.Seq
			}
		}
	}
	ctx := &WorkflowContext{r: r, activityOptions: activityOptions, info: WorkflowInfo{
		ExecutionID: task.ExecutionID, WorkflowName: task.WorkflowName, WorkflowID: task.WorkflowID, TaskQueue: task.TaskQueue,
	}}
	done := make(chan workflowOutcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- workflowOutcome{panic: &wire.Failure{Message: fmt.Sprint(p), Type: "panic", Stack: string(debug.Stack())}}
			}
		}()
		res, err := fn(ctx, input)
		done <- workflowOutcome{result: res, err: err}
	}()
	select {
	case <-r.blocked:
		close(r.release)
		if r.err != nil {
			return nil, r.err
		}
		return r.decisions, nil
	case out := <-done:
		if out.panic != nil {
			return nil, fmt.Errorf("workflow %q panicked: %s", task.WorkflowName, out.panic.Message)
		}
		if out.err != nil {
			return append(r.decisions, wire.Decision{Type: wire.DecisionFailWorkflow, Failure: failureOf(out.err)}), nil
		}
		raw, err := json.Marshal(out.result)
		if err != nil {
			return append(r.decisions, wire.Decision{Type: wire.DecisionFailWorkflow, Failure: &wire.Failure{
				Message: fmt.Sprintf("encode workflow result: %v", err), Type: "encoding",
			}}), nil
		}
		return append(r.decisions, wire.Decision{Type: wire.DecisionCompleteWorkflow, Result: raw}), nil
	}
}
