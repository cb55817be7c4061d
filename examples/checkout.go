package examples

import (
	"slices"
	"time"

	"github.com/harvest-engine/harvest"
)

// WorkflowCheckout is the name of checkout, which travels on the wire.
const WorkflowCheckout = "checkout"

// The activities of checkout: a step each, and the step that undoes it.
const (
	ActivityCheckoutReserve = "checkout_reserve"
	ActivityCheckoutCharge  = "checkout_charge"
	ActivityCheckoutShip    = "checkout_ship"
	ActivityCheckoutRelease = "checkout_release"
	ActivityCheckoutRefund  = "checkout_refund"
)

// ShipSignal lets checkout ship: the warehouse's go-ahead.
var ShipSignal = harvest.NewSignal[string]("ship")

// CheckoutInput is checkout's input.
type CheckoutInput struct {
	OrderID string `json:"order_id"`
	// StepMS makes each step's activity take this long (0: at once), so
	// that a cancellation can land while one runs.
	StepMS int `json:"step_ms,omitempty"`
	// Slow, when given, names the activities that take StepMS; the others
	// run at once. So one step can run until its context is cancelled
	// while the steps before it have completed.
	Slow []string `json:"slow,omitempty"`
}

// CheckoutResult says how checkout ended: the steps it took, and those
// it undid when it was cancelled, most recent first.
type CheckoutResult struct {
	Done   []string `json:"done"`
	Undone []string `json:"undone,omitempty"`
}

// checkoutSteps are checkout's steps in order, each with the activity
// that undoes it ("" for none: shipping is the last step).
var checkoutSteps = []struct{ do, undo string }{
	{ActivityCheckoutReserve, ActivityCheckoutRelease},
	{ActivityCheckoutCharge, ActivityCheckoutRefund},
	{"", ""}, // waits for the warehouse's "ship" signal
	{ActivityCheckoutShip, ""},
}

// Checkout is a saga: it reserves the stock, charges the card, waits for
// the warehouse's "ship" signal, and ships. Cancelled at any point
// (POST …/cancel), it undoes the steps that completed, most recent first
// (a refund, then the stock released), in a disconnected context that
// the cancellation does not reach, and returns what it undid: the
// execution closes Cancelled with that result (docs/cancellation.md). A
// step given up while it ran is not undone: its activity's context was
// cancelled before it reported.
func Checkout(ctx *harvest.WorkflowContext, in CheckoutInput) (CheckoutResult, error) {
	var out CheckoutResult
	for _, step := range checkoutSteps {
		var err error
		if step.do == "" {
			_, err = ShipSignal.Receive(ctx)
		} else {
			err = harvest.ExecuteActivity(ctx, step.do, in).Get(nil)
		}
		switch {
		case harvest.IsCanceled(err):
			return compensate(ctx, in, out)
		case err != nil:
			return out, err
		}
		if step.do != "" {
			out.Done = append(out.Done, step.do)
		}
	}
	return out, nil
}

// compensate undoes, in a context cancellation does not reach, the steps
// of out that completed, most recent first.
func compensate(ctx *harvest.WorkflowContext, in CheckoutInput, out CheckoutResult) (CheckoutResult, error) {
	cleanup := harvest.NewDisconnectedContext(ctx)
	for _, step := range slices.Backward(checkoutSteps) {
		if step.undo == "" || !slices.Contains(out.Done, step.do) {
			continue
		}
		if err := harvest.ExecuteActivity(cleanup, step.undo, in).Get(nil); err != nil {
			return out, err
		}
		out.Undone = append(out.Undone, step.undo)
	}
	return out, nil
}

// registerCheckout registers checkout and its activities: each takes
// the input's StepMS (if it is one of the input's Slow, when given), or
// until its context is cancelled.
func registerCheckout(r registrar) {
	workflow(r, WorkflowCheckout, Checkout)
	opts := harvest.ActivityOptions{StartToClose: time.Minute}
	for _, name := range []string{ActivityCheckoutReserve, ActivityCheckoutCharge, ActivityCheckoutShip, ActivityCheckoutRelease, ActivityCheckoutRefund} {
		activity(r, name, func(ctx *harvest.ActivityContext, in CheckoutInput) (string, error) {
			if in.StepMS > 0 && (len(in.Slow) == 0 || slices.Contains(in.Slow, name)) {
				t := time.NewTimer(time.Duration(in.StepMS) * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return name + ":" + in.OrderID, nil
		}, opts)
	}
}
