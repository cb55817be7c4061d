package examples

import (
	"github.com/harvest-engine/harvest"
)

// WorkflowCheckoutBatch is the name of checkout_batch, which travels on
// the wire.
const WorkflowCheckoutBatch = "checkout_batch"

// CheckoutBatchInput is checkout_batch's input: the orders to check out,
// and whether to tell the warehouse to ship them.
type CheckoutBatchInput struct {
	Orders []string `json:"orders"`
	Ship   bool     `json:"ship"`
}

// CheckoutBatchResult is what each order's checkout returned, by order.
type CheckoutBatchResult struct {
	Orders map[string]CheckoutResult `json:"orders"`
}

// CheckoutBatch checks out each order as a child workflow (checkout,
// workflow_id "checkout-<order>"), and, when Ship says so, signals each
// child "ship" by its workflow_id, then waits for every child and
// returns their results: fan-out, reuse of a workflow as a step, and a
// signal from a parent to its children (docs/children.md). Its children
// are asked to cancel if the batch closes before them
// (ParentCloseRequestCancel): each undoes what it did. Cancelled, the
// batch's cancellation reaches its children the same way.
func CheckoutBatch(ctx *harvest.WorkflowContext, in CheckoutBatchInput) (CheckoutBatchResult, error) {
	futures := make(map[string]*harvest.Future, len(in.Orders))
	for _, order := range in.Orders {
		futures[order] = harvest.ExecuteChildWorkflow(ctx, WorkflowCheckout, CheckoutInput{OrderID: order},
			harvest.ChildOptions{WorkflowID: "checkout-" + order, ParentClosePolicy: harvest.ParentCloseRequestCancel})
	}
	if in.Ship {
		for _, order := range in.Orders {
			if err := harvest.SignalExternalWorkflowByID(ctx, WorkflowCheckout, "checkout-"+order, ShipSignal.Name, "dock 1").Get(nil); err != nil {
				return CheckoutBatchResult{}, err
			}
		}
	}
	out := CheckoutBatchResult{Orders: map[string]CheckoutResult{}}
	for _, order := range in.Orders {
		var r CheckoutResult
		if err := futures[order].Get(&r); err != nil {
			return out, err
		}
		out.Orders[order] = r
	}
	return out, nil
}
