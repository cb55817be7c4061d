package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples/fakepay"
)

// chaos_family and its children: the chaos suite's load of child
// workflows (e2e/chaos_family_test.go), and the long check of a parent
// that fans out many children (e2e/long_test.go).
const (
	// workflowFamily fans out children of workflowFamilyChild and
	// returns their results.
	workflowFamily = "chaos_family"
	// workflowFamilyChild makes one effect and returns a value of its
	// input.
	workflowFamilyChild = "chaos_family_child"
	// workflowFamilyWaiter waits for a signal that never comes, until
	// its parent's close policy closes it.
	workflowFamilyWaiter = "chaos_family_waiter"
	// activityFamilyEffect makes a child's effect, or a waiter's
	// cleanup.
	activityFamilyEffect = "chaos_family_effect"
)

// familyPolicies are the parent-close policies a chaos_family that
// starts waiters starts one waiter of each, in this order.
var familyPolicies = []string{harvest.ParentCloseTerminate, harvest.ParentCloseRequestCancel, harvest.ParentCloseAbandon}

// FamilyInput is chaos_family's input, and what its first run passes
// the second when it continues as new.
type FamilyInput struct {
	// Family names the family in its effects: the load's start key.
	Family string `json:"family"`
	// Children is how many chaos_family_child children it starts.
	Children int `json:"children"`
	// Continue makes the first run start the first half of the children,
	// collect their results and continue as new; the second run starts
	// the rest.
	Continue bool `json:"continue,omitempty"`
	// Waiters makes the first run start, before its children, one
	// chaos_family_waiter of each parent-close policy (familyPolicies).
	Waiters bool `json:"waiters,omitempty"`
	// ChildMS is how long each child's effect takes, by index (0 past
	// its end). The load decides every delay, so that a replay decides
	// as the first run did.
	ChildMS []int `json:"child_ms,omitempty"`
	// Run and Results are the run's number and the results so far, as
	// the first run passes them to the second.
	Run     int           `json:"run,omitempty"`
	Results []FamilyChild `json:"results,omitempty"`
}

// FamilyCall is the input of a chaos_family_child or a
// chaos_family_waiter, and of their activity.
type FamilyCall struct {
	Family string `json:"family"`
	// Index is a child's index, from 0; Policy a waiter's close policy.
	Index  int    `json:"index"`
	Policy string `json:"policy,omitempty"`
	MS     int    `json:"ms,omitempty"`
}

// FamilyChild is a chaos_family_child's result: its index, a value of
// it, and the charge of its effect.
type FamilyChild struct {
	Index  int    `json:"index"`
	Square int    `json:"square"`
	Charge string `json:"charge"`
}

// familyCustomer is the customer the effect of a family's child (what
// "<index>", or "cleanup-<policy>" for a waiter's cleanup) is charged to
// at the payment provider: its witness.
func familyCustomer(family, what string) string { return "family_" + family + "/" + what }

// registerFamily registers chaos_family, its child workflows and their
// activity.
func registerFamily(w *harvest.Worker, payments fakepay.API) {
	opts := harvest.ActivityOptions{StartToClose: 10 * time.Second, RetryPolicy: &harvest.RetryPolicy{
		InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 2 * time.Second}}
	// The effect: a charge at the provider, keyed by the activity's
	// idempotency key, so that every attempt of one activity is one
	// effect, and a child started twice makes two.
	harvest.RegisterActivity(w, activityFamilyEffect, func(ctx *harvest.ActivityContext, in FamilyCall) (string, error) {
		if in.MS > 0 {
			t := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		what := strconv.Itoa(in.Index)
		if in.Policy != "" {
			what = "cleanup-" + in.Policy
		}
		c, err := payments.CreateCharge(ctx, ctx.IdempotencyKey().String(), 1, familyCustomer(in.Family, what))
		if errors.Is(err, fakepay.ErrInvalidRequest) || errors.Is(err, fakepay.ErrKeyReused) {
			return "", harvest.NonRetryable(err)
		}
		if err != nil {
			return "", fmt.Errorf("effect %s of %s: %w", what, in.Family, err)
		}
		return c.ID, nil
	}, opts)
	harvest.RegisterWorkflow(w, workflowFamilyChild, func(ctx *harvest.WorkflowContext, in FamilyCall) (FamilyChild, error) {
		out := FamilyChild{Index: in.Index, Square: in.Index * in.Index}
		err := harvest.ExecuteActivity(ctx, activityFamilyEffect, in).Get(&out.Charge)
		return out, err
	})
	// A child its parent never signals: only its parent's close policy
	// closes it. Asked to cancel, it cleans up (an effect) in a context
	// the cancellation does not reach.
	harvest.RegisterWorkflow(w, workflowFamilyWaiter, func(ctx *harvest.WorkflowContext, in FamilyCall) (string, error) {
		_, err := harvest.NewSignal[string]("never").Receive(ctx)
		if !harvest.IsCanceled(err) {
			return "signalled", err
		}
		cleanup := harvest.NewDisconnectedContext(ctx)
		if err := harvest.ExecuteActivity(cleanup, activityFamilyEffect, in).Get(nil); err != nil {
			return "", err
		}
		return "cleaned up", nil
	})
	// A parent under the chaos suite's faults: it starts its children at
	// once and collects their results in order; with Continue its first
	// run does so for the first half, then continues as new with them,
	// passing its waiters on to the second run.
	harvest.RegisterWorkflow(w, workflowFamily, func(ctx *harvest.WorkflowContext, in FamilyInput) ([]FamilyChild, error) {
		in.Run++
		if in.Run == 1 && in.Waiters {
			for _, p := range familyPolicies {
				harvest.ExecuteChildWorkflow(ctx, workflowFamilyWaiter, FamilyCall{Family: in.Family, Policy: p},
					harvest.ChildOptions{ParentClosePolicy: p})
			}
		}
		from, to := len(in.Results), in.Children
		if in.Continue && in.Run == 1 {
			to = in.Children / 2
		}
		futures := make([]*harvest.Future, 0, to-from)
		for i := from; i < to; i++ {
			call := FamilyCall{Family: in.Family, Index: i}
			if i < len(in.ChildMS) {
				call.MS = in.ChildMS[i]
			}
			futures = append(futures, harvest.ExecuteChildWorkflow(ctx, workflowFamilyChild, call))
		}
		for _, f := range futures {
			var r FamilyChild
			if err := f.Get(&r); err != nil {
				return nil, err
			}
			in.Results = append(in.Results, r)
		}
		if in.Continue && in.Run == 1 {
			return nil, harvest.ContinueAsNew(ctx, in)
		}
		return in.Results, nil
	})
}
