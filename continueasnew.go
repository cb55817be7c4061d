package harvest

import (
	"encoding/json"
	"fmt"

	"github.com/harvest-engine/harvest/internal/dedup"
)

// ContinueAsNewOptions tune ContinueAsNew. The zero value continues as
// the same workflow on the same task queue.
type ContinueAsNewOptions struct {
	// WorkflowName is the workflow the next run runs; empty: this one.
	WorkflowName string
	// TaskQueue is the next run's task queue; empty: this run's.
	TaskQueue string
}

// ContinueAsNewError is the error ContinueAsNew returns, which a
// workflow function returns to end its run and start the next: it is
// not a failure. Inspect it with errors.As.
type ContinueAsNewError struct {
	// WorkflowName and TaskQueue are the next run's, empty for this
	// run's own.
	WorkflowName string
	TaskQueue    string
	// Input is the next run's input, as JSON.
	Input json.RawMessage
}

func (e *ContinueAsNewError) Error() string {
	return "continue as new"
}

// ContinueAsNew ends the workflow's run, when the workflow function
// returns what it returns, and starts the next run of the same
// workflow_id with input (docs/long-workflows.md): a new execution_id,
// an empty history, linked both ways to this run (continued_from,
// continued_as). Use it to keep a history short in a workflow that runs
// for ever, or for a very long time:
//
//	if harvest.GetInfo(ctx).ContinueAsNewSuggested {
//		return Out{}, harvest.ContinueAsNew(ctx, state)
//	}
//
// The run closes as ContinuedAsNew. The signals it did not take move to
// the next run, with their keys: those it received after its last
// workflow task began, and those its code saw but left in a channel.
// None is lost, none is delivered twice. Activities and timers still
// pending are abandoned. An input
// that cannot be encoded, or a workflow or task queue name that is not
// one, fails the workflow with the error ContinueAsNew returns.
func ContinueAsNew(ctx *WorkflowContext, input any, opts ...ContinueAsNewOptions) error {
	var o ContinueAsNewOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.WorkflowName != "" {
		if err := dedup.ValidateName(o.WorkflowName); err != nil {
			return fmt.Errorf("ContinueAsNew: workflow: %w", err)
		}
	}
	if o.TaskQueue != "" {
		if err := dedup.ValidateName(o.TaskQueue); err != nil {
			return fmt.Errorf("ContinueAsNew: task queue: %w", err)
		}
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("ContinueAsNew: encode input: %w", err)
	}
	return &ContinueAsNewError{WorkflowName: o.WorkflowName, TaskQueue: o.TaskQueue, Input: raw}
}
