package harvest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Cooperative cancellation.
//
// A client asks to cancel an execution (POST .../cancel); the scheduler
// records WorkflowCancelRequested in its history, and the workflow code
// sees it at its next task, as it sees a signal. From then on its
// WorkflowContext is cancelled: Done is ready, Err is a canceled error,
// the activities and timers it was waiting on are given up
// (request_cancel_activity, cancel_timer, decided as the request becomes
// visible) and their futures and waits return a canceled error, and every
// blocking call made with it returns one at once, without deciding
// anything. The code then compensates with a context cancellation does
// not reach (NewDisconnectedContext) and returns; whatever it returns, a
// result or an error, closes the execution Cancelled (a cancel_workflow
// decision). As in Temporal's Go SDK, the code may also ignore the request
// and go on; the scheduler bounds how long it may (the request's grace).
//
// What the code sees is history: the request becomes visible at the same
// point on every replay, and the decisions it causes are matched there as
// any others are.

// ErrCanceled is what a canceled error matches (errors.Is): the error of
// a call made with a cancelled WorkflowContext, of an activity or timer
// given up by the cancellation, of a timer cancelled with Timer.Cancel,
// and WorkflowContext.Err once the execution's cancellation is visible.
var ErrCanceled = errors.New("canceled")

// IsCanceled says whether err is (or wraps) a canceled error.
func IsCanceled(err error) bool { return errors.Is(err, ErrCanceled) }

// CanceledError is a canceled error: it matches ErrCanceled. A workflow
// that returns one closes Cancelled with a failure of type "Cancelled".
type CanceledError struct {
	// What is what was cancelled: "workflow", `activity "charge"`,
	// "timer 2".
	What string
	// Reason is the cancellation request's reason, "" when it gave none
	// (or a Timer.Cancel cancelled the timer).
	Reason string
}

func (e *CanceledError) Error() string {
	msg := e.What + " canceled"
	if e.What == "" {
		msg = "canceled"
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is makes a *CanceledError match ErrCanceled.
func (e *CanceledError) Is(target error) bool { return target == ErrCanceled }

// cancelFailureType is the failure type of a canceled error.
const cancelFailureType = "Cancelled"

// cancelState is the execution's cancellation request, once the code
// has seen it.
type cancelState struct {
	reason string
	// cause is what asked (wire.CancelCauseRequest, or a timeout's):
	// the code's return after a timeout's closes it TimedOut.
	cause string
	// tick is when it became visible: it orders Done among a Selector's
	// cases.
	tick int
}

// NewDisconnectedContext returns a context on ctx's execution that its
// cancellation does not reach: its Done is never ready and its Err is
// nil, and the activities, timers, signal receives and waits made with it
// run as they would had no cancellation been asked. Use it for the
// cleanup and compensations a cancelled workflow runs before it returns:
//
//	if harvest.IsCanceled(err) {
//		dctx := harvest.NewDisconnectedContext(ctx)
//		_ = harvest.ExecuteActivity(dctx, "refund", order).Get(nil)
//	}
//
// Goroutines it starts (Go) are disconnected too.
func NewDisconnectedContext(ctx *WorkflowContext) *WorkflowContext {
	return &WorkflowContext{x: ctx.x, disconnected: true}
}

// cancelled says whether the execution's cancellation reaches calls made
// with c: it is visible, and c is not disconnected.
func (c *WorkflowContext) cancelled() bool { return !c.disconnected && c.x.cancel != nil }

// Err is nil until the execution's cancellation is visible to the code,
// then an error matching ErrCanceled (a *CanceledError carrying the
// request's reason). It is always nil for a disconnected context
// (NewDisconnectedContext).
func (c *WorkflowContext) Err() error {
	if !c.cancelled() {
		return nil
	}
	return c.x.canceled("workflow")
}

// Done returns what is ready once the execution's cancellation is visible
// to the code: wait on it with Receive, or in a Selector with AddChannel.
// A disconnected context's is never ready.
func (c *WorkflowContext) Done() *DoneChannel { return &DoneChannel{ctx: c} }

// DoneChannel is a WorkflowContext's Done: it is ready once the
// execution's cancellation is visible to the code, and stays ready, as a
// closed Go channel does (a Selector's case for it needs to receive
// nothing, and keeps being chosen).
type DoneChannel struct {
	ctx *WorkflowContext
}

// readyTick makes the channel a Selector's case (ReceiveChannel).
func (d *DoneChannel) readyTick() (int, bool) {
	if !d.ctx.cancelled() {
		return 0, false
	}
	return d.ctx.x.cancel.tick, true
}

// IsReady says whether the cancellation is visible (Receive would not
// block).
func (d *DoneChannel) IsReady() bool { return d.ctx.cancelled() }

// Receive blocks until the execution's cancellation is visible to the
// code; on a disconnected context's, for ever.
func (d *DoneChannel) Receive() { d.ctx.x.d.block(api.Wait{WaitCase: d.wait()}, d.IsReady) }

func (d *DoneChannel) wait() api.WaitCase { return api.WaitCase{Kind: api.WaitCancellation} }

// canceled is the error of what, given up for the execution's
// cancellation.
func (x *execution) canceled(what string) *CanceledError {
	e := &CanceledError{What: what}
	if x.cancel != nil {
		e.Reason = x.cancel.reason
	}
	return e
}

// seeCancelRequest makes the execution's cancellation request visible:
// the code's connected context is cancelled from now on. What it waits on
// with it is given up once every event the task saw is visible (giveUp).
func (x *execution) seeCancelRequest(ev wire.Event) error {
	var a wire.WorkflowCancelRequestedAttrs
	if err := json.Unmarshal(ev.Attrs, &a); err != nil {
		return fmt.Errorf("history event %d: %w", ev.Seq, err)
	}
	if x.cancel != nil {
		return nil // asked again: once is enough
	}
	x.cancel = &cancelState{reason: a.Reason, cause: a.Cause, tick: x.tick}
	x.givingUp = true
	return nil
}

// giveUp gives up, for the execution's cancellation, what the code waits
// on with its connected context, once the task that first saw the
// request has made visible every event it saw: an activity, timer or
// child whose result, firing or close the task saw, even recorded after
// the request, is not given up, so that a step that completed is known
// to the code (and compensated). The rest is given up in a deterministic
// order (activities by id, then timers, then children), the decisions
// taken in that task. A timer's wait ends at once; an activity's Future
// and a child's wait for its end: an activity whose attempt in flight
// completes after all shows its result (the step was taken), else its
// ActivityCancelled fails the Future with a canceled error; a child
// closes as its cancellation leads it to.
func (x *execution) giveUp() {
	x.givingUp = false
	if x.returned {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(x.activities)) {
		st := x.activities[id]
		if !st.scheduled || st.disconnected || st.result != nil || st.canceled || st.cancelRequested {
			continue
		}
		st.cancelRequested = true
		x.decide(wire.Decision{Type: wire.DecisionRequestCancelActivity, ActivityID: id})
	}
	for _, id := range slices.Sorted(maps.Keys(x.timers)) {
		st := x.timers[id]
		if !st.started || st.disconnected || st.fired || st.cancelled {
			continue
		}
		st.cancelled, st.byContext, st.tick = true, true, x.tick
		x.decide(wire.Decision{Type: wire.DecisionCancelTimer, TimerID: id})
	}
	x.cancelChildren()
}
