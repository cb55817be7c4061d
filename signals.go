package harvest

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/harvest-engine/harvest/internal/wire"
)

type receivedSignal struct {
	seq     int
	payload json.RawMessage
}

// SignalChannel delivers the signals of one name to a workflow, in the
// order they arrived; signals that arrive before the workflow waits are
// buffered.
type SignalChannel struct {
	r    *replayer
	name string
}

// GetSignalChannel returns the channel of the named signal.
func GetSignalChannel(ctx *WorkflowContext, name string) *SignalChannel {
	return &SignalChannel{r: ctx.r, name: name}
}

// readySeq is the history position of the next signal, or 0 if none waits.
func (c *SignalChannel) readySeq() int {
	i := c.r.consumed[c.name]
	if q := c.r.signals[c.name]; i < len(q) {
		return q[i].seq
	}
	return 0
}

// Receive blocks until a signal arrives, then decodes its payload into out
// (a pointer, or nil to discard it).
func (c *SignalChannel) Receive(out any) error {
	if c.readySeq() == 0 {
		c.r.block()
	}
	return c.take(out)
}

func (c *SignalChannel) take(out any) error {
	i := c.r.consumed[c.name]
	sig := c.r.signals[c.name][i]
	c.r.consumed[c.name] = i + 1
	if out == nil || len(sig.payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(sig.payload, out); err != nil {
		return fmt.Errorf("decode signal %q: %w", c.name, err)
	}
	return nil
}

// ReceiveWithTimeout waits up to d for a signal; ok is false if the time
// ran out first.
func (c *SignalChannel) ReceiveWithTimeout(ctx *WorkflowContext, d time.Duration, out any) (ok bool, err error) {
	timer := NewTimer(ctx, d)
	NewSelector(ctx).
		AddReceive(c, func(c *SignalChannel) { ok, err = true, c.Receive(out) }).
		AddTimer(timer, func(*Timer) {}).
		Select()
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

// ReceiveWithTimeout waits up to d for the signal.
func (s Signal[T]) ReceiveWithTimeout(ctx *WorkflowContext, d time.Duration) (v T, ok bool, err error) {
	ok, err = GetSignalChannel(ctx, s.Name).ReceiveWithTimeout(ctx, d, &v)
	return v, ok, err
}

// Channel is the signal's channel, for use in a Selector.
func (s Signal[T]) Channel(ctx *WorkflowContext) *SignalChannel { return GetSignalChannel(ctx, s.Name) }

// Timer is a durable timer: it survives every process restart.
type Timer struct {
	r  *replayer
	id int
}

// NewTimer starts a durable timer that fires after d.
func NewTimer(ctx *WorkflowContext, d time.Duration) *Timer {
	r := ctx.r
	r.nextTimer++
	t := &Timer{r: r, id: r.nextTimer}
	if !r.timerStarted[t.id] {
		r.decisions = append(r.decisions, wire.Decision{Type: wire.DecisionStartTimer, TimerID: t.id, DurationMS: max(d.Milliseconds(), 0)})
	}
	return t
}

// IsReady reports whether the timer has fired.
func (t *Timer) IsReady() bool { return t.r.timerFired[t.id] != 0 }

// Wait blocks until the timer fires.
func (t *Timer) Wait() {
	if !t.IsReady() {
		t.r.block()
	}
}

// Sleep blocks the workflow for d, on a durable timer.
func Sleep(ctx *WorkflowContext, d time.Duration) {
	NewTimer(ctx, d).Wait()
}

// Selector waits on several signal channels, timers and activity futures
// at once. Select runs the callback of the case that became ready first in
// the execution's history, so it picks the same case on every replay.
type Selector struct {
	r     *replayer
	cases []selectCase
}

type selectCase struct {
	ready func() int // history seq at which the case became ready; 0 if not
	run   func()
}

// NewSelector returns an empty selector.
func NewSelector(ctx *WorkflowContext) *Selector { return &Selector{r: ctx.r} }

// AddReceive adds a case that is ready when c has a signal; fn must
// receive it.
func (s *Selector) AddReceive(c *SignalChannel, fn func(c *SignalChannel)) *Selector {
	s.cases = append(s.cases, selectCase{ready: c.readySeq, run: func() { fn(c) }})
	return s
}

// AddFuture adds a case that is ready when the activity has finished.
func (s *Selector) AddFuture(f *Future, fn func(f *Future)) *Selector {
	s.cases = append(s.cases, selectCase{ready: func() int {
		if f.encodeErr != nil {
			return 1
		}
		return f.r.closedSeq[f.id]
	}, run: func() { fn(f) }})
	return s
}

// AddTimer adds a case that is ready when the timer has fired.
func (s *Selector) AddTimer(t *Timer, fn func(t *Timer)) *Selector {
	s.cases = append(s.cases, selectCase{ready: func() int { return t.r.timerFired[t.id] }, run: func() { fn(t) }})
	return s
}

// Select blocks until a case is ready, then runs the one that became
// ready first.
func (s *Selector) Select() {
	best, bestSeq := -1, math.MaxInt
	for i, c := range s.cases {
		if seq := c.ready(); seq != 0 && seq < bestSeq {
			best, bestSeq = i, seq
		}
	}
	if best < 0 {
		s.r.block()
	}
	s.cases[best].run()
}
