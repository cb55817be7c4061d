package harvest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// This file holds what workflow code uses instead of what Go offers and a
// replay could not repeat: goroutines (Go), channels (NewChannel), waiting
// on a condition (Await), values computed once (SideEffect), and a
// logger that does not repeat itself (WorkflowContext.Logger). Now,
// IsReplaying and Info are in workflow.go.

// Go runs fn as a workflow goroutine: concurrently with the rest of the
// workflow code, as a go statement would, but scheduled deterministically
// (workflow goroutines run one at a time, each until it blocks, in the
// order they were started), so that a replay runs them as the first run
// did. Use it instead of the go statement, which workflow code must not
// use. fn's context is connected to the execution's cancellation as ctx
// is (NewDisconnectedContext).
func Go(ctx *WorkflowContext, fn func(ctx *WorkflowContext)) {
	x := ctx.x
	if x.d.closing {
		return
	}
	child := &WorkflowContext{x: x, disconnected: ctx.disconnected}
	x.d.spawn(fmt.Sprintf("workflow goroutine %d", len(x.d.coros)), func() { fn(child) })
}

// Await blocks until cond returns true, and returns nil. cond must read
// only workflow state (variables the workflow's goroutines set, futures,
// channels); it is called again each time a workflow goroutine blocks.
// Once the execution's cancellation reaches ctx, Await returns a canceled
// error (IsCanceled) instead of waiting on, unless cond holds.
func Await(ctx *WorkflowContext, cond func() bool) error {
	ok := false
	ctx.x.d.block(api.Wait{WaitCase: api.WaitCase{Kind: api.WaitCondition}}, func() bool { ok = cond(); return ok || ctx.cancelled() })
	if ok {
		return nil
	}
	return ctx.x.canceled("await")
}

// AwaitWithTimeout is Await bounded by a durable timer of d: ok is false
// when the time ran out first. The timer is cancelled when cond comes
// true first. Once the execution's cancellation reaches ctx, it returns
// ok false and a canceled error (IsCanceled), unless cond holds.
func AwaitWithTimeout(ctx *WorkflowContext, d time.Duration, cond func() bool) (ok bool, err error) {
	if cond() {
		return true, nil
	}
	if ctx.cancelled() {
		return false, ctx.x.canceled("await")
	}
	t := NewTimer(ctx, d)
	// The execution's cancellation cancels the timer.
	wait := api.Wait{WaitCase: api.WaitCase{Kind: api.WaitCondition, Until: t.wait().Until}}
	ctx.x.d.block(wait, func() bool { ok = cond(); return ok || t.IsReady() || ctx.cancelled() })
	switch {
	case ok:
		t.Cancel()
		return true, nil
	case t.IsReady():
		return false, nil
	}
	return false, ctx.x.canceled("await")
}

// SideEffect runs fn once, the first time the workflow reaches the call,
// and records its value in the history (a MarkerRecorded event); every
// replay returns the recorded value without running fn. Use it for what
// must not change on a replay: a random number, a UUID, a value read
// from the environment. The value travels as JSON: T must encode and
// decode as itself (the first run returns it decoded too, so that it is
// the same on every run), and be storable (no U+0000). fn must not fail;
// an error belongs in an activity. A value that breaks these rules fails
// the workflow task, naming the SideEffect.
func SideEffect[T any](ctx *WorkflowContext, fn func() T) T {
	x := ctx.x
	x.nextMarker++
	id := x.nextMarker
	var v T
	if raw, ok := x.markers[id]; ok {
		if err := json.Unmarshal(raw, &v); err != nil {
			panic(fmt.Sprintf("harvest: SideEffect %d: decode the recorded value: %v", id, err))
		}
		x.decide(wire.Decision{Type: wire.DecisionRecordMarker, Marker: &wire.MarkerAttrs{Kind: wire.MarkerSideEffect, MarkerID: id}})
		return v
	}
	raw, err := json.Marshal(fn())
	if err != nil {
		panic(fmt.Sprintf("harvest: SideEffect %d: encode the value: %v", id, err))
	}
	if err := storable.CheckJSON(raw); err != nil {
		// Refused here, where the code can be fixed, rather than as a
		// workflow task result the scheduler cannot record.
		panic(fmt.Sprintf("harvest: SideEffect %d: the value cannot be recorded: %v", id, err))
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		panic(fmt.Sprintf("harvest: SideEffect %d: the value does not decode as itself: %v", id, err))
	}
	x.markers[id] = raw
	x.decide(wire.Decision{Type: wire.DecisionRecordMarker, Marker: &wire.MarkerAttrs{Kind: wire.MarkerSideEffect, MarkerID: id, Value: raw}})
	return v
}

// ReceiveChannel is a workflow channel a Selector can wait on
// (AddChannel): a *Channel made with NewChannel, or a WorkflowContext's
// Done.
type ReceiveChannel interface {
	readyTick() (int, bool)
	// wait is what a receive on the channel waits for.
	wait() api.WaitCase
}

// Channel passes values of T between workflow goroutines, as a Go channel
// does between goroutines, deterministically. Make one with NewChannel or
// NewBufferedChannel; it lives in the workflow's memory and is not
// recorded (a replay makes it again).
type Channel[T any] struct {
	x      *execution
	size   int
	buf    []chanItem[T]
	send   []*pendingSend[T] // senders waiting, in order
	closed bool
}

type chanItem[T any] struct {
	v    T
	tick int
}

type pendingSend[T any] struct {
	chanItem[T]
	taken bool
}

// NewChannel returns an unbuffered channel: Send blocks until a receiver
// takes the value.
func NewChannel[T any](ctx *WorkflowContext) *Channel[T] { return &Channel[T]{x: ctx.x} }

// NewBufferedChannel returns a channel that holds up to size values
// before Send blocks.
func NewBufferedChannel[T any](ctx *WorkflowContext, size int) *Channel[T] {
	return &Channel[T]{x: ctx.x, size: max(size, 0)}
}

// Send sends v, blocking until a receiver takes it (unbuffered) or the
// buffer has room. Sending on a closed channel panics, as in Go.
func (c *Channel[T]) Send(ctx *WorkflowContext, v T) {
	if c.closed {
		panic("harvest: send on closed channel")
	}
	c.x.tick++
	item := chanItem[T]{v: v, tick: c.x.tick}
	if len(c.buf) < c.size {
		c.buf = append(c.buf, item)
		return
	}
	p := &pendingSend[T]{chanItem: item}
	c.send = append(c.send, p)
	ctx.x.d.block(api.Wait{WaitCase: api.WaitCase{Kind: api.WaitChannel}}, func() bool { return p.taken })
}

// SendAsync sends v if that does not block (a receiver's room in the
// buffer); ok is false when it would.
func (c *Channel[T]) SendAsync(v T) (ok bool) {
	if c.closed {
		panic("harvest: send on closed channel")
	}
	if len(c.buf) >= c.size {
		return false
	}
	c.x.tick++
	c.buf = append(c.buf, chanItem[T]{v: v, tick: c.x.tick})
	return true
}

func (c *Channel[T]) wait() api.WaitCase { return api.WaitCase{Kind: api.WaitChannel} }

func (c *Channel[T]) readyTick() (int, bool) {
	switch {
	case len(c.buf) > 0:
		return c.buf[0].tick, true
	case len(c.send) > 0:
		return c.send[0].tick, true
	case c.closed:
		return 0, true
	}
	return 0, false
}

// Receive blocks until a value comes, and returns it with more true; on
// a closed channel with nothing left it returns the zero value and false.
func (c *Channel[T]) Receive(ctx *WorkflowContext) (v T, more bool) {
	ctx.x.d.block(api.Wait{WaitCase: c.wait()}, func() bool { _, ok := c.readyTick(); return ok })
	v, ok := c.take()
	return v, ok
}

// ReceiveAsync receives a value if one is waiting; ok is false when none
// is (or the channel is closed and empty).
func (c *Channel[T]) ReceiveAsync() (v T, ok bool) { return c.take() }

func (c *Channel[T]) take() (v T, ok bool) {
	if len(c.buf) > 0 {
		v = c.buf[0].v
		c.buf = c.buf[1:]
		// A waiting sender's value moves into the room made.
		if len(c.send) > 0 {
			p := c.send[0]
			c.send = c.send[1:]
			c.buf = append(c.buf, p.chanItem)
			p.taken = true
		}
		return v, true
	}
	if len(c.send) > 0 {
		p := c.send[0]
		c.send = c.send[1:]
		p.taken = true
		return p.v, true
	}
	return v, false
}

// Len is how many values wait to be received.
func (c *Channel[T]) Len() int { return len(c.buf) + len(c.send) }

// Close closes the channel: receivers get what is left, then the zero
// value and more false.
func (c *Channel[T]) Close() { c.closed = true }

// replayHandler is the handler of a workflow's Logger: it writes nothing
// while the workflow replays.
type replayHandler struct {
	x *execution
	h slog.Handler
}

func (h *replayHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return !h.x.replaying && !h.x.d.closing && h.h.Enabled(ctx, l)
}

func (h *replayHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.x.replaying || h.x.d.closing {
		return nil
	}
	return h.h.Handle(ctx, r)
}

func (h *replayHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &replayHandler{x: h.x, h: h.h.WithAttrs(attrs)}
}

func (h *replayHandler) WithGroup(name string) slog.Handler {
	return &replayHandler{x: h.x, h: h.h.WithGroup(name)}
}
