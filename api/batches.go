package api

import (
	"encoding/json"
	"time"
)

// Batch operations: BatchRequest.Operation (docs/batches.md).
const (
	BatchOpCancel    = "cancel"
	BatchOpTerminate = "terminate"
	BatchOpSignal    = "signal"
	BatchOpReset     = "reset"
)

// Batch states: BatchOperation.State.
const (
	BatchRunning   = "running"
	BatchCompleted = "completed"
	BatchCancelled = "cancelled"
)

// BatchRequest is the body of POST /api/harvest/batches: an operation
// applied to every execution the filter matches, at a bounded rate.
type BatchRequest struct {
	// Operation is cancel, terminate, signal or reset.
	Operation string      `json:"operation"`
	Filter    BatchFilter `json:"filter"`
	// All must be true for a filter that names no condition: every
	// execution.
	All bool `json:"all,omitempty"`
	// Signal is a signal batch's signal.
	Signal *BatchSignalSpec `json:"signal,omitempty"`
	// Reset is a reset batch's point, resolved against each execution's
	// history, as a reset's body names it.
	Reset  *BatchResetSpec `json:"reset,omitempty"`
	Reason string          `json:"reason,omitempty"`
	// Rate is how many executions a second the batch applies its
	// operation to, in each store: 1 to 1,000, default 50.
	Rate int `json:"rate,omitempty"`
}

// BatchFilter says which executions a batch matches: every condition
// given holds. Times are RFC 3339; created_after is inclusive,
// created_before exclusive.
type BatchFilter struct {
	Workflow         string `json:"workflow,omitempty"`
	Status           string `json:"status,omitempty"`
	CreatedAfter     string `json:"created_after,omitempty"`
	CreatedBefore    string `json:"created_before,omitempty"`
	KeyPrefix        string `json:"key_prefix,omitempty"`
	WorkflowIDPrefix string `json:"workflow_id_prefix,omitempty"`
	// SearchAttributes filter on search attributes
	// (docs/search-attributes.md): each a value the attribute equals, or
	// an object of bounds {"gt", "gte", "lt", "lte"} for an int, double
	// or time.
	SearchAttributes map[string]json.RawMessage `json:"search_attributes,omitempty"`
}

// BatchSignalSpec is the signal a signal batch sends to each execution, under
// a key of the batch's own, so that it is delivered once.
type BatchSignalSpec struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// BatchResetSpec is where a reset batch resets each execution to.
type BatchResetSpec struct {
	// To is as a reset's (ResetRequest.To).
	To             json.RawMessage `json:"to"`
	ReapplySignals *bool           `json:"reapply_signals,omitempty"`
}

// BatchOperation is a batch operation as it stands.
type BatchOperation struct {
	BatchID   string      `json:"batch_id"`
	Operation string      `json:"operation"`
	Filter    BatchFilter `json:"filter"`
	Reason    string      `json:"reason,omitempty"`
	Rate      int         `json:"rate"`
	// State is running, completed (every matching execution was sent the
	// operation and reported how it went) or cancelled.
	State string `json:"state"`
	// Matched counts the executions the batch has found so far (all of
	// them once it has completed), Done those its operation was applied
	// to, Failed those it was refused on (Errors lists them).
	Matched    int64        `json:"matched"`
	Done       int64        `json:"done"`
	Failed     int64        `json:"failed"`
	Errors     []BatchError `json:"errors"`
	CreatedAt  time.Time    `json:"created_at"`
	FinishedAt *time.Time   `json:"finished_at"`
}

// BatchError is an execution a batch's operation was refused on, with
// the refusal's code and message.
type BatchError struct {
	ExecutionID string `json:"execution_id"`
	Error       string `json:"error"`
	Message     string `json:"message"`
}

// ListBatchesResponse answers GET /api/harvest/batches, newest first.
type ListBatchesResponse struct {
	Batches []BatchOperation `json:"batches"`
}
