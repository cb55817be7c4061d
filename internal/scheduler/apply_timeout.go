package scheduler

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Timeouts (docs/cancellation.md#timeouts). A run timeout bounds one run,
// an execution timeout the whole chain of continued runs: a start's own,
// else its workflow's configured ones. Each is a durable timer of the
// run; a run that continues as new passes the chain's deadline, and its
// run timeout, on to the next. When one passes, the run closes TimedOut
// (WorkflowTimedOut) at once, unless the workflow has a cancel_grace: it
// is then asked to cancel (cause run_timeout or execution_timeout), so
// that its code cleans up, and its return closes it TimedOut
// (time_out_workflow); the grace's end closes it TimedOut if it has not.

// WorkflowTimeouts are a workflow's configured timeouts; zero means none.
type WorkflowTimeouts struct {
	Run       time.Duration
	Execution time.Duration
}

// MaxTimeout bounds every timeout and grace: ten years.
const MaxTimeout = 10 * 365 * 24 * time.Hour

// Validate checks the timeouts: each none, or from 1 ms to MaxTimeout,
// and a run no longer than its execution.
func (t WorkflowTimeouts) Validate() error {
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"run_timeout", t.Run}, {"execution_timeout", t.Execution}} {
		if d.d < 0 || (d.d > 0 && d.d < time.Millisecond) || d.d > MaxTimeout {
			return fmt.Errorf("%s %s: want a duration from 1ms to ten years", d.name, d.d)
		}
	}
	if t.Run > 0 && t.Execution > 0 && t.Run > t.Execution {
		return fmt.Errorf("run_timeout %s is longer than execution_timeout %s", t.Run, t.Execution)
	}
	return nil
}

// setTimeouts gives the new run e, started by s at begin (from the run it
// continues, if any), its timeouts and their timers.
func (b *batch) setTimeouts(e *store.Execution, s *wire.StartCommand, from *store.Execution, begin time.Time) {
	conf := b.timeouts[e.WorkflowName]
	run := time.Duration(s.RunTimeoutMS) * time.Millisecond
	if run <= 0 {
		run = conf.Run
	}
	var t store.Timeouts
	if run > 0 {
		deadline := begin.Add(run)
		t.RunMS, t.RunDeadline = run.Milliseconds(), &deadline
	}
	switch {
	case from != nil && from.Timeouts != nil && from.Timeouts.ExecutionDeadline != nil:
		// The chain's deadline, not renewed by the continue.
		t.ExecutionMS, t.ExecutionDeadline = from.Timeouts.ExecutionMS, from.Timeouts.ExecutionDeadline
	case from == nil:
		total := time.Duration(s.ExecutionTimeoutMS) * time.Millisecond
		if total <= 0 {
			total = conf.Execution
		}
		if total > 0 {
			deadline := begin.Add(total)
			t.ExecutionMS, t.ExecutionDeadline = total.Milliseconds(), &deadline
		}
	}
	if t.RunDeadline == nil && t.ExecutionDeadline == nil {
		return
	}
	e.Timeouts = &t
	if t.RunDeadline != nil {
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerRunTimeout,
			FireAt: *t.RunDeadline, Attrs: json.RawMessage(`{}`)})
	}
	if t.ExecutionDeadline != nil {
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerExecutionTimeout,
			FireAt: *t.ExecutionDeadline, Attrs: json.RawMessage(`{}`)})
	}
}

// timingOut is how an execution whose timeout passed is closed at once.
var timingOut = closing{status: wire.StatusTimedOut, event: wire.EventWorkflowTimedOut, failure: "TimedOut", reason: "timed out", msgPrefix: "timeout:"}

// timedOut applies the end of e's run timeout or execution timeout
// (cause): a run asked to cancel already, or whose workflow has no
// cancel_grace, or whose code never ran, closes TimedOut at once; any
// other is asked to cancel, its code given the grace to clean up.
func (b *batch) timedOut(e *store.Execution, cause string) {
	t := e.Timeouts
	if t == nil {
		return
	}
	var d time.Duration
	switch cause {
	case wire.CancelCauseRunTimeout:
		if t.RunDeadline == nil || b.now.Before(*t.RunDeadline) {
			return
		}
		d = time.Duration(t.RunMS) * time.Millisecond
	default:
		if t.ExecutionDeadline == nil || b.now.Before(*t.ExecutionDeadline) {
			return
		}
		d = time.Duration(t.ExecutionMS) * time.Millisecond
	}
	reason := fmt.Sprintf("%s of %s passed", cause, d)
	grace := b.cancelGrace[e.WorkflowName]
	if e.CancelRequest != nil || grace <= 0 || (e.WFTID == 0 && !e.WFTOutstanding) {
		b.closeNow(e, timingOut, reason)
		return
	}
	deadline := b.now.Add(grace)
	b.askCancel(e, &store.CancelRequest{At: b.now, Reason: reason, Cause: cause, Deadline: &deadline})
}
