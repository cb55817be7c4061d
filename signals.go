package harvest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// SignalChannel delivers the signals of one name to a workflow, in the
// order they arrived; signals that arrive before the workflow waits are
// buffered.
type SignalChannel struct {
	x    *execution
	name string
	// ctx is the context it was got with: Receive stops waiting when the
	// execution's cancellation reaches it.
	ctx *WorkflowContext
}

// GetSignalChannel returns the channel of the named signal. Its Receive
// returns a canceled error once the execution's cancellation reaches
// ctx (NewDisconnectedContext for one it does not).
func GetSignalChannel(ctx *WorkflowContext, name string) *SignalChannel {
	return &SignalChannel{x: ctx.x, name: name, ctx: ctx}
}

// readyTick orders the channel's next signal among a Selector's cases.
func (c *SignalChannel) readyTick() (int, bool) {
	q := c.x.signals[c.name]
	if q == nil || q.consumed >= len(q.items) {
		return 0, false
	}
	return q.items[q.consumed].tick, true
}

// wait is what a Receive on c waits for.
func (c *SignalChannel) wait() api.WaitCase {
	return api.WaitCase{Kind: api.WaitSignal, Name: c.name}
}

// HasPending says whether a signal is waiting to be received.
func (c *SignalChannel) HasPending() bool {
	_, ok := c.readyTick()
	return ok
}

// Receive blocks until a signal arrives, then decodes its payload into out
// (a pointer, or nil to discard it). Once the execution's cancellation
// reaches the channel's context, it returns a canceled error
// (IsCanceled) instead of waiting; a signal already waiting is still
// received first.
func (c *SignalChannel) Receive(out any) error {
	c.x.d.block(api.Wait{WaitCase: c.wait()}, func() bool { return c.HasPending() || c.ctx.cancelled() })
	if !c.HasPending() {
		return c.x.canceled(fmt.Sprintf("receive of signal %q", c.name))
	}
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
// comes first. Once the execution's cancellation reaches ctx, it returns
// ok false and a canceled error (IsCanceled) instead of waiting; a
// signal already waiting is still received first.
func (c *SignalChannel) ReceiveWithTimeout(ctx *WorkflowContext, d time.Duration, out any) (ok bool, err error) {
	if c.HasPending() {
		return true, c.take(out)
	}
	if ctx.cancelled() {
		return false, c.x.canceled(fmt.Sprintf("receive of signal %q", c.name))
	}
	timer := NewTimer(ctx, d)
	NewSelector(ctx).
		AddReceive(c, func(c *SignalChannel) { ok, err = true, c.take(out) }).
		AddTimer(timer, func(t *Timer) {
			if !t.IsReady() {
				// Cancelled by the execution's cancellation, not fired.
				err = c.x.canceled(fmt.Sprintf("receive of signal %q", c.name))
			}
		}).
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

// Receive blocks until the signal arrives and returns its payload; once
// the execution's cancellation reaches ctx, a canceled error
// (SignalChannel.Receive).
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

// ReceiveWithTimeout waits up to d for the signal
// (SignalChannel.ReceiveWithTimeout).
func (s Signal[T]) ReceiveWithTimeout(ctx *WorkflowContext, d time.Duration) (v T, ok bool, err error) {
	ok, err = GetSignalChannel(ctx, s.Name).ReceiveWithTimeout(ctx, d, &v)
	return v, ok, err
}

// Channel is the signal's channel, for use in a Selector.
func (s Signal[T]) Channel(ctx *WorkflowContext) *SignalChannel { return GetSignalChannel(ctx, s.Name) }
