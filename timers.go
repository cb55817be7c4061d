package harvest

import (
	"fmt"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Timer is a durable timer: it survives every process restart.
type Timer struct {
	x  *execution
	id int
}

// NewTimer starts a durable timer that fires after d.
//
// Once the execution's cancellation is visible, a timer started with ctx
// is cancelled (a Selector then takes it as ready, and Wait returns a
// canceled error); called then with ctx, NewTimer starts nothing and
// returns a timer already cancelled so. A disconnected context's timers
// run on (NewDisconnectedContext).
func NewTimer(ctx *WorkflowContext, d time.Duration) *Timer {
	x := ctx.x
	x.nextTimer++
	t := &Timer{x: x, id: x.nextTimer}
	if ctx.cancelled() {
		// The id is spent all the same, so that those of the timers
		// after it do not depend on when the request came.
		x.timers[t.id] = &timerState{cancelled: true, byContext: true, tick: x.tick}
		return t
	}
	st := x.timers[t.id]
	if st == nil {
		st = &timerState{}
		x.timers[t.id] = st
	}
	st.started, st.disconnected = true, ctx.disconnected
	st.until = x.now.Add(max(d, 0))
	x.decide(wire.Decision{Type: wire.DecisionStartTimer, TimerID: t.id, DurationMS: max(d.Milliseconds(), 0)})
	return t
}

func (t *Timer) state() *timerState { return t.x.timers[t.id] }

// readyTick orders the timer among a Selector's cases: it is ready once
// it fired, or the execution's cancellation cancelled it.
func (t *Timer) readyTick() (int, bool) {
	st := t.state()
	return st.tick, st.fired || st.byContext
}

// wait is what a Wait on t waits for.
func (t *Timer) wait() api.WaitCase {
	w := api.WaitCase{Kind: api.WaitTimer, ID: t.id}
	if until := t.state().until; !until.IsZero() {
		w.Until = &until
	}
	return w
}

// IsReady reports whether the timer has fired, as far as the workflow has
// seen its history. A cancelled timer never fires.
func (t *Timer) IsReady() bool { return t.state().fired }

// Wait blocks until the timer fires, and returns nil; for a cancelled
// timer (Cancel, or the execution's cancellation) it returns at once a
// canceled error (IsCanceled).
func (t *Timer) Wait() error {
	t.x.d.block(api.Wait{WaitCase: t.wait()}, func() bool { st := t.state(); return st.fired || st.cancelled })
	if t.state().fired {
		return nil
	}
	e := &CanceledError{What: fmt.Sprintf("timer %d", t.id)}
	if t.state().byContext {
		e = t.x.canceled(e.What)
	}
	return e
}

// Cancel cancels the timer: it never fires, and costs nothing more. A
// timer that has fired, or was cancelled, is left as it is.
func (t *Timer) Cancel() {
	st := t.state()
	if st.fired || st.cancelled {
		return
	}
	st.cancelled = true
	t.x.decide(wire.Decision{Type: wire.DecisionCancelTimer, TimerID: t.id})
}

// Sleep blocks the workflow for d, on a durable timer, and returns nil;
// once the execution's cancellation is visible (and ctx is not
// disconnected) it returns a canceled error (IsCanceled), at once.
func Sleep(ctx *WorkflowContext, d time.Duration) error {
	return NewTimer(ctx, d).Wait()
}
