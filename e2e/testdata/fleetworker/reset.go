package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples/fakepay"
)

// workflowReset is chaos_reset: the chaos suite's load of resets
// (e2e/chaos_reset_test.go).
const workflowReset = "chaos_reset"

// resetSteps are chaos_reset's steps, in order; each runs the activity
// chaos_reset_<step>.
var resetSteps = []string{"a", "b", "c"}

// ResetInput is chaos_reset's input: Order names it in its effects (the
// load's start key).
type ResetInput struct {
	Order string `json:"order"`
}

// ResetCall is the input of one of chaos_reset's activities.
type ResetCall struct {
	Order string `json:"order"`
	Step  string `json:"step"`
}

// resetCustomer is the customer an effect of step of order is charged
// to, at the payment provider the chaos suite serves: its witness.
func resetCustomer(order, step string) string { return "reset_" + order + "/" + step }

// ResetPermitKey is the idempotency key of the charge that lets step b
// of order succeed: the load makes it at the provider before it resets
// the execution, as an operator fixes a provider before resetting.
func ResetPermitKey(order string) string { return "reset-permit:" + order }

// registerReset registers chaos_reset and its activities. Each step
// charges the provider, keyed by the activity's idempotency key. Step b
// then asks the provider for its order's permit and fails for good
// without it: its charge went through, and the run fails after it, as a
// step does whose confirmation is lost to a provider outage. A reset to
// b runs it again; with the key it had, the provider answers from its
// dedupe and b's charge is made once.
func registerReset(w *harvest.Worker, payments fakepay.API) {
	opts := harvest.ActivityOptions{StartToClose: 10 * time.Second, RetryPolicy: &harvest.RetryPolicy{
		InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 2 * time.Second}}
	for _, step := range resetSteps {
		harvest.RegisterActivity(w, "chaos_reset_"+step, func(ctx *harvest.ActivityContext, in ResetCall) (string, error) {
			c, err := payments.CreateCharge(ctx, ctx.IdempotencyKey().String(), 1, resetCustomer(in.Order, in.Step))
			if errors.Is(err, fakepay.ErrInvalidRequest) || errors.Is(err, fakepay.ErrKeyReused) {
				return "", harvest.NonRetryable(err)
			}
			if err != nil {
				return "", fmt.Errorf("%s of %s: %w", in.Step, in.Order, err)
			}
			if in.Step == "b" {
				_, ok, err := payments.FindCharge(ctx, ResetPermitKey(in.Order))
				if err != nil {
					return "", fmt.Errorf("permit of %s: %w", in.Order, err)
				}
				if !ok {
					return "", harvest.NewNonRetryableError("ProviderOutage", "no confirmation for %s", in.Order)
				}
			}
			return c.ID, nil
		}, opts)
	}
	// The steps in order; a step that fails fails the execution, which
	// the load then resets to it.
	harvest.RegisterWorkflow(w, workflowReset, func(ctx *harvest.WorkflowContext, in ResetInput) ([]string, error) {
		var charges []string
		for i, step := range resetSteps {
			var id string
			if err := harvest.ExecuteActivity(ctx, "chaos_reset_"+step, ResetCall{Order: in.Order, Step: step}).Get(&id); err != nil {
				return nil, err
			}
			charges = append(charges, id)
			// What it reached, as search attributes: a run reset after a
			// step keeps what the kept events set.
			if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"stage": step, "steps": i + 1}); err != nil {
				return nil, err
			}
		}
		return charges, nil
	})
}
