package wire

import (
	"encoding/json"
	"time"
)

// KindBatch creates or cancels a batch operation (docs/batches.md) on
// one of its shards: a batch has a part on one shard of each store,
// which applies the operation to that store's matching executions.
const KindBatch = "batch"

// Batch command ops.
const (
	BatchOpCreate = "create"
	BatchOpCancel = "cancel"
)

// Batch operations: what a batch does to each execution it matches.
const (
	BatchOperationCancel    = "cancel"
	BatchOperationTerminate = "terminate"
	BatchOperationSignal    = "signal"
	BatchOperationReset     = "reset"
)

// BatchCommand creates (Spec) or cancels the batch BatchID's part on the
// shard it goes to.
type BatchCommand struct {
	Op      string     `json:"op"`
	BatchID string     `json:"batch_id"`
	Spec    *BatchSpec `json:"spec,omitempty"`
}

// BatchSpec is what a batch does, to which executions, how fast.
type BatchSpec struct {
	Operation string        `json:"operation"`
	Filter    BatchFilter   `json:"filter"`
	Signal    *BatchSignal  `json:"signal,omitempty"`
	Reset     *BatchResetTo `json:"reset,omitempty"`
	Reason    string        `json:"reason,omitempty"`
	// Rate is how many executions a second the batch sends its
	// operation to, on each part.
	Rate int `json:"rate"`
	// Before is when the batch was created: it matches only executions
	// created before it, so that the runs it makes (a reset's) or that
	// start meanwhile are not its.
	Before time.Time `json:"before"`
}

// BatchFilter says which executions a batch matches: every condition
// set holds. All says that a filter with no condition is meant.
type BatchFilter struct {
	Workflow         string     `json:"workflow,omitempty"`
	Status           string     `json:"status,omitempty"`
	CreatedAfter     *time.Time `json:"created_after,omitempty"`
	CreatedBefore    *time.Time `json:"created_before,omitempty"`
	KeyPrefix        string     `json:"key_prefix,omitempty"`
	WorkflowIDPrefix string     `json:"workflow_id_prefix,omitempty"`
	// Search are conditions on search attributes, each holding;
	// SearchAsGiven is the request's filter they come from, as shown.
	Search        []SearchCondition          `json:"search,omitempty"`
	SearchAsGiven map[string]json.RawMessage `json:"search_as_given,omitempty"`
	All           bool                       `json:"all,omitempty"`
}

// BatchSignal is the signal a signal batch sends.
type BatchSignal struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// BatchResetTo is where a reset batch resets each execution to, resolved
// against each one's history by the scheduler that applies it.
type BatchResetTo struct {
	Target         ResetTarget `json:"to"`
	ReapplySignals bool        `json:"reapply_signals"`
}

// BatchRef names the batch, and the shard of its part, that sent a
// command: the shard that applies it reports how it went there
// (Report.Batch).
type BatchRef struct {
	BatchID string `json:"batch_id"`
	Shard   int    `json:"shard"`
}

// BatchReport tells a batch's part how its operation went on one
// execution: Error and Message say why it was refused, empty when it was
// applied.
type BatchReport struct {
	BatchID     string `json:"batch_id"`
	ExecutionID string `json:"execution_id"`
	Error       string `json:"error,omitempty"`
	Message     string `json:"message,omitempty"`
}

// ReportBatchItem is a Report's What when it tells a batch's part how
// its operation went on an execution (Report.Batch).
const ReportBatchItem = "batch_item"
