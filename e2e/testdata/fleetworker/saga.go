package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples/fakepay"
)

// workflowSaga is chaos_saga: the chaos suite's load of cooperative
// cancellation (e2e/chaos_saga_test.go).
const workflowSaga = "chaos_saga"

// sagaStep is one of chaos_saga's steps, and the step that undoes it (""
// for none: shipping is the last step).
type sagaStep struct{ do, undo string }

// sagaSteps are chaos_saga's steps, in order. Each runs the activity
// chaos_saga_<name>.
var sagaSteps = []sagaStep{{"reserve", "release"}, {"charge", "refund"}, {"ship", ""}}

// SagaInput is chaos_saga's input. The load decides every delay, so that
// its cancels land during the steps it picks and a replay decides as the
// first run did.
type SagaInput struct {
	// Order names the saga in its effects: the load's start key.
	Order string `json:"order"`
	// StepMS is how long each step's activity takes, in sagaSteps'
	// order.
	StepMS []int `json:"step_ms"`
	// UndoMS is how long each compensation's activity takes.
	UndoMS int `json:"undo_ms"`
}

// SagaCall is the input of one of chaos_saga's activities.
type SagaCall struct {
	Order string `json:"order"`
	Step  string `json:"step"`
	MS    int    `json:"ms"`
}

// SagaResult says how chaos_saga ended: the steps it completed, and the
// compensations it ran, most recent first.
type SagaResult struct {
	Done   []string `json:"done"`
	Undone []string `json:"undone"`
}

// sagaCustomer is the customer an effect of step of order is charged
// to, at the payment provider the chaos suite serves: its witness.
func sagaCustomer(order, step string) string { return "saga_" + order + "/" + step }

// registerSaga registers chaos_saga and its activities. Each activity
// waits its delay, or until its context is cancelled (its step given up),
// then makes its effect: a charge at the provider, keyed by the
// activity's idempotency key, so that every attempt of one activity is
// one effect.
func registerSaga(w *harvest.Worker, payments fakepay.API) {
	opts := harvest.ActivityOptions{StartToClose: 10 * time.Second, RetryPolicy: &harvest.RetryPolicy{
		InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 2 * time.Second}}
	for _, s := range sagaSteps {
		for _, step := range []string{s.do, s.undo} {
			if step == "" {
				continue
			}
			harvest.RegisterActivity(w, "chaos_saga_"+step, func(ctx *harvest.ActivityContext, in SagaCall) (string, error) {
				t := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return "", ctx.Err()
				}
				// A step given up during its delay makes no effect.
				if err := ctx.Err(); err != nil {
					return "", err
				}
				c, err := payments.CreateCharge(ctx, ctx.IdempotencyKey().String(), 1, sagaCustomer(in.Order, in.Step))
				if errors.Is(err, fakepay.ErrInvalidRequest) || errors.Is(err, fakepay.ErrKeyReused) {
					return "", harvest.NonRetryable(err)
				}
				if err != nil {
					return "", fmt.Errorf("%s of %s: %w", in.Step, in.Order, err)
				}
				return c.ID, nil
			}, opts)
		}
	}
	// A saga under the chaos suite's faults, cancelled by the load at a
	// moment it picks: it runs its steps, and once the cancellation is
	// visible (a step given up, or after a step completed) it undoes the
	// steps it completed, most recent first, in a context the
	// cancellation does not reach, and returns what it did and undid.
	harvest.RegisterWorkflow(w, workflowSaga, func(ctx *harvest.WorkflowContext, in SagaInput) (SagaResult, error) {
		out := SagaResult{Done: []string{}, Undone: []string{}}
		for i, s := range sagaSteps {
			if ctx.Err() != nil {
				break
			}
			call := SagaCall{Order: in.Order, Step: s.do}
			if i < len(in.StepMS) {
				call.MS = in.StepMS[i]
			}
			err := harvest.ExecuteActivity(ctx, "chaos_saga_"+s.do, call).Get(nil)
			if harvest.IsCanceled(err) {
				break
			}
			if err != nil {
				return out, err
			}
			out.Done = append(out.Done, s.do)
		}
		if ctx.Err() == nil {
			return out, nil
		}
		cleanup := harvest.NewDisconnectedContext(ctx)
		for i := len(out.Done) - 1; i >= 0; i-- {
			undo := sagaSteps[i].undo
			if undo == "" {
				continue
			}
			call := SagaCall{Order: in.Order, Step: undo, MS: in.UndoMS}
			if err := harvest.ExecuteActivity(cleanup, "chaos_saga_"+undo, call).Get(nil); err != nil {
				return out, err
			}
			out.Undone = append(out.Undone, undo)
		}
		return out, nil
	})
}
