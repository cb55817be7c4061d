package harvest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest/internal/wire"
)

// SignalChannel delivers the signals of one name to a workflow, in the
// order they arrived; signals that arrive before the workflow waits are
// buffered.
type SignalChannel struct {
	x    *execution
	name string
}

// GetSignalChannel returns the channel of the named signal.
func GetSignalChannel(ctx *WorkflowContext, name string) *SignalChannel {
	return &SignalChannel{x: ctx.x, name: name}
}

// readyTick orders the channel's next signal among a Selector's cases.
func (c *SignalChannel) readyTick() (int, bool) {
	q := c.x.signals[c.name]
	if q == nil || q.consumed >= len(q.items) {
		return 0, false
	}
	return q.items[q.consumed].tick, true
}

// HasPending says whether a signal is waiting to be received.
func (c *SignalChannel) HasPending() bool {
	_, ok := c.readyTick()
	return ok
}

// Receive blocks until a signal arrives, then decodes its payload into out
// (a pointer, or nil to discard it).
func (c *SignalChannel) Receive(out any) error {
	c.x.d.block(c.HasPending)
	return c.take(out)
}

// ReceiveAsync receives a waiting signal without blocking: ok is false
// when none waits.
func (c *SignalChannel) ReceiveAsync(out any) (ok bool, err error) {
	if !c.HasPending() {
		return false, nil
	}
	return true, c.take(out)
}

func (c *SignalChannel) take(out any) error {
	q := c.x.signals[c.name]
	sig := q.items[q.consumed]
	q.consumed++
	if out == nil || len(sig.payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(sig.payload, out); err != nil {
		return fmt.Errorf("decode signal %q: %w", c.name, err)
	}
	return nil
}

// ReceiveWithTimeout waits up to d for a signal; ok is false if the time
// ran out first. The timer it waits with is cancelled when the signal
// comes first.
func (c *SignalChannel) ReceiveWithTimeout(ctx *WorkflowContext, d time.Duration, out any) (ok bool, err error) {
	if c.HasPending() {
		return true, c.take(out)
	}
	timer := NewTimer(ctx, d)
	NewSelector(ctx).
		AddReceive(c, func(c *SignalChannel) { ok, err = true, c.Receive(out) }).
		AddTimer(timer, func(*Timer) {}).
		Select()
	if ok {
		timer.Cancel()
	}
	return ok, err
}

// Signal is a typed signal definition shared by workflows and clients:
// harvest.NewSignal[Approval]("approve").
type Signal[T any] struct {
	Name string
}

// NewSignal defines a signal carrying a T.
func NewSignal[T any](name string) Signal[T] { return Signal[T]{Name: name} }

// Receive blocks until the signal arrives and returns its payload.
func (s Signal[T]) Receive(ctx *WorkflowContext) (T, error) {
	var v T
	err := GetSignalChannel(ctx, s.Name).Receive(&v)
	return v, err
}

// ReceiveAsync returns a waiting signal's payload without blocking; ok is
// false when none waits.
func (s Signal[T]) ReceiveAsync(ctx *WorkflowContext) (v T, ok bool, err error) {
	ok, err = GetSignalChannel(ctx, s.Name).ReceiveAsync(&v)
	return v, ok, err
}

// ReceiveWithTimeout waits up to d for the signal.
func (s Signal[T]) ReceiveWithTimeout(ctx *WorkflowContext, d time.Duration) (v T, ok bool, err error) {
	ok, err = GetSignalChannel(ctx, s.Name).ReceiveWithTimeout(ctx, d, &v)
	return v, ok, err
}

// Channel is the signal's channel, for use in a Selector.
func (s Signal[T]) Channel(ctx *WorkflowContext) *SignalChannel { return GetSignalChannel(ctx, s.Name) }

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

// Selector waits on several signal channels, workflow channels, timers
// and activity futures at once. Select runs the callback of the case that
// became ready first, as the workflow saw its history, so it picks the
// same case on every replay; with a default case it never blocks.
type Selector struct {
	x     *execution
	cases []selectCase
	dflt  func()
}

type selectCase struct {
	ready func() (int, bool) // when the case became ready (a tick), if it is
	run   func()
}

// NewSelector returns an empty selector.
func NewSelector(ctx *WorkflowContext) *Selector { return &Selector{x: ctx.x} }

// AddReceive adds a case that is ready when c has a signal; fn must
// receive it.
func (s *Selector) AddReceive(c *SignalChannel, fn func(c *SignalChannel)) *Selector {
	s.cases = append(s.cases, selectCase{ready: c.readyTick, run: func() { fn(c) }})
	return s
}

// AddChannel adds a case that is ready when c, a channel made with
// NewChannel, has a value to receive or is closed; fn must receive it.
func (s *Selector) AddChannel(c ReceiveChannel, fn func()) *Selector {
	s.cases = append(s.cases, selectCase{ready: c.readyTick, run: fn})
	return s
}

// AddFuture adds a case that is ready when the activity has finished.
func (s *Selector) AddFuture(f *Future, fn func(f *Future)) *Selector {
	s.cases = append(s.cases, selectCase{ready: f.readyTick, run: func() { fn(f) }})
	return s
}

// AddTimer adds a case that is ready when the timer has fired.
func (s *Selector) AddTimer(t *Timer, fn func(t *Timer)) *Selector {
	s.cases = append(s.cases, selectCase{ready: t.readyTick, run: func() { fn(t) }})
	return s
}

// AddDefault adds the case that runs when no other case is ready, so
// that Select does not block.
func (s *Selector) AddDefault(fn func()) *Selector {
	s.dflt = fn
	return s
}

// ready returns the case that became ready first (the first added of
// those that became ready together), or -1.
func (s *Selector) ready() int {
	best, bestTick := -1, 0
	for i, c := range s.cases {
		if tick, ok := c.ready(); ok && (best < 0 || tick < bestTick) {
			best, bestTick = i, tick
		}
	}
	return best
}

// Select blocks until a case is ready, then runs the one that became
// ready first; with a default case and none ready, it runs the default.
func (s *Selector) Select() {
	i := s.ready()
	if i < 0 && s.dflt != nil {
		s.dflt()
		return
	}
	s.x.d.block(func() bool { i = s.ready(); return i >= 0 })
	s.cases[i].run()
}

// HasPending says whether Select would run a case other than the
// default without blocking.
func (s *Selector) HasPending() bool { return s.ready() >= 0 }
