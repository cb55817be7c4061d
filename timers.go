package harvest

import (
	"time"

	"github.com/harvest-engine/harvest/internal/wire"
)

// Timer is a durable timer: it survives every process restart.
type Timer struct {
	x  *execution
	id int
}

// NewTimer starts a durable timer that fires after d.
func NewTimer(ctx *WorkflowContext, d time.Duration) *Timer {
	x := ctx.x
	x.nextTimer++
	t := &Timer{x: x, id: x.nextTimer}
	if x.timers[t.id] == nil {
		x.timers[t.id] = &timerState{}
	}
	x.decide(wire.Decision{Type: wire.DecisionStartTimer, TimerID: t.id, DurationMS: max(d.Milliseconds(), 0)})
	return t
}

func (t *Timer) state() *timerState { return t.x.timers[t.id] }

// readyTick orders the timer among a Selector's cases.
func (t *Timer) readyTick() (int, bool) {
	st := t.state()
	return st.tick, st.fired
}

// IsReady reports whether the timer has fired, as far as the workflow has
// seen its history. A cancelled timer never fires.
func (t *Timer) IsReady() bool { return t.state().fired }

// Wait blocks until the timer fires; a cancelled timer never does, and
// Wait returns at once.
func (t *Timer) Wait() {
	t.x.d.block(func() bool { st := t.state(); return st.fired || st.cancelled })
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

// Sleep blocks the workflow for d, on a durable timer.
func Sleep(ctx *WorkflowContext, d time.Duration) {
	NewTimer(ctx, d).Wait()
}
