package wire

import "encoding/json"

// Child workflows and signals between workflows
// (docs/children.md). A workflow task's start_child decision records
// ChildWorkflowInitiated and puts a start command, keyed by the parent
// execution and the child's id (ChildKey), on the child's shard; that
// shard reports to the parent's (KindReport) the child's start, or why
// it was refused, and, when the child's chain closes, how. A
// signal_external decision likewise puts a keyed signal on the target's
// shard, which reports whether it was delivered.

// Parent-close policies: what becomes of a child still open when its
// parent's chain of runs closes.
const (
	// ParentCloseTerminate terminates it (the default).
	ParentCloseTerminate = "terminate"
	// ParentCloseRequestCancel asks it to cancel: its code cleans up.
	ParentCloseRequestCancel = "request_cancel"
	// ParentCloseAbandon leaves it running.
	ParentCloseAbandon = "abandon"
)

// ValidParentClosePolicy says whether p names a parent-close policy (""
// is the default, terminate).
func ValidParentClosePolicy(p string) bool {
	switch p {
	case "", ParentCloseTerminate, ParentCloseRequestCancel, ParentCloseAbandon:
		return true
	}
	return false
}

// Events of children and external signals.
const (
	// EventChildWorkflowInitiated records a start_child decision.
	EventChildWorkflowInitiated = "ChildWorkflowInitiated"
	// EventChildWorkflowStarted: the child's start was applied on its
	// shard (ChildAttrs.ExecutionID is its execution).
	EventChildWorkflowStarted = "ChildWorkflowStarted"
	// EventChildWorkflowStartFailed: the child's start was refused
	// (ChildAttrs.Error says why: workflow_id_conflict, unknown_workflow).
	EventChildWorkflowStartFailed = "ChildWorkflowStartFailed"
	// The child's chain of runs closed, and how.
	EventChildWorkflowCompleted  = "ChildWorkflowCompleted"
	EventChildWorkflowFailed     = "ChildWorkflowFailed"
	EventChildWorkflowCancelled  = "ChildWorkflowCancelled"
	EventChildWorkflowTerminated = "ChildWorkflowTerminated"
	EventChildWorkflowTimedOut   = "ChildWorkflowTimedOut"
	// EventChildWorkflowCancelRequested records a request_cancel_child
	// decision: the parent's code gave the child up (its context was
	// cancelled), and the child is asked to cancel.
	EventChildWorkflowCancelRequested = "ChildWorkflowCancelRequested"
	// EventExternalSignalInitiated records a signal_external decision.
	EventExternalSignalInitiated = "ExternalSignalInitiated"
	// EventExternalSignalDelivered and EventExternalSignalFailed: how
	// the signal went (ExternalSignalAttrs.Error says why it did not).
	EventExternalSignalDelivered = "ExternalSignalDelivered"
	EventExternalSignalFailed    = "ExternalSignalFailed"
)

// ChildClosedEvent is the event that records a child's close with status.
func ChildClosedEvent(status string) string {
	switch status {
	case StatusCompleted:
		return EventChildWorkflowCompleted
	case StatusFailed:
		return EventChildWorkflowFailed
	case StatusCancelled:
		return EventChildWorkflowCancelled
	case StatusTimedOut:
		return EventChildWorkflowTimedOut
	}
	return EventChildWorkflowTerminated
}

// Decision types of children and external signals.
const (
	// DecisionStartChild starts a child workflow (Decision.Child).
	DecisionStartChild = "start_child"
	// DecisionRequestCancelChild asks the child ChildID to cancel.
	DecisionRequestCancelChild = "request_cancel_child"
	// DecisionSignalExternal signals another execution (Decision.Signal).
	DecisionSignalExternal = "signal_external"
)

// ChildAttrs are a start_child decision's child and the attributes of
// the child's events on its parent: ChildWorkflowInitiated (what the
// code asked), ChildWorkflowStarted (ExecutionID), ChildWorkflowStartFailed
// (Error, Message), the close events (ExecutionID, Status, Result or
// Failure) and ChildWorkflowCancelRequested (ChildID).
type ChildAttrs struct {
	// ChildID numbers the parent's children from 1, in the order its code
	// starts them: with the parent execution, it makes the start's key.
	ChildID      int             `json:"child_id"`
	WorkflowName string          `json:"workflow_name,omitempty"`
	WorkflowID   string          `json:"workflow_id,omitempty"`
	TaskQueue    string          `json:"task_queue,omitempty"`
	Input        json.RawMessage `json:"input,omitempty"`
	// ParentClosePolicy is one of the ParentClose constants ("":
	// terminate).
	ParentClosePolicy  string `json:"parent_close_policy,omitempty"`
	ReusePolicy        string `json:"reuse_policy,omitempty"`
	RunTimeoutMS       int64  `json:"run_timeout_ms,omitempty"`
	ExecutionTimeoutMS int64  `json:"execution_timeout_ms,omitempty"`
	// Priority is the child's (MinPriority to MaxPriority); 0 means its
	// parent's.
	Priority int `json:"priority,omitempty"`
	// SearchAttributes are the child's, as a start's
	// (StartCommand.SearchAttributes).
	SearchAttributes map[string]json.RawMessage `json:"search_attributes,omitempty"`
	// Served, in a start_child decision, says that the worker that took
	// it registers the child's workflow on its task queue: the child can
	// run, whatever the registrations the scheduler sees say at that
	// moment. It is not recorded.
	Served bool `json:"served,omitempty"`

	ExecutionID string          `json:"execution_id,omitempty"`
	Status      string          `json:"status,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	Failure     *Failure        `json:"failure,omitempty"`
	Error       string          `json:"error,omitempty"`
	Message     string          `json:"message,omitempty"`
}

// ExternalSignalAttrs are a signal_external decision's signal and the
// attributes of its events: ExternalSignalInitiated (what the code
// asked), ExternalSignalDelivered (ExecutionID, the execution it reached)
// and ExternalSignalFailed (Error, Message).
type ExternalSignalAttrs struct {
	// SignalID numbers the execution's external signals from 1: with the
	// execution, it makes the signal's key.
	SignalID int `json:"signal_id"`
	// The target: an execution, or a workflow_id's latest execution.
	ExecutionID  string          `json:"execution_id,omitempty"`
	WorkflowName string          `json:"workflow_name,omitempty"`
	WorkflowID   string          `json:"workflow_id,omitempty"`
	SignalName   string          `json:"signal_name,omitempty"`
	Payload      json.RawMessage `json:"payload,omitempty"`
	Error        string          `json:"error,omitempty"`
	Message      string          `json:"message,omitempty"`
}

// ParentRef is the parent a child's start names: told, on its shard, how
// the child went.
type ParentRef struct {
	ExecutionID string `json:"execution_id"`
	ChildID     int    `json:"child_id"`
	// ClosePolicy is what the parent's close does to the child.
	ClosePolicy string `json:"close_policy,omitempty"`
	// Schedule, instead of a parent execution, is the schedule fire that
	// started it: told how the start went and how the chain closed.
	Schedule *ScheduleRef `json:"schedule,omitempty"`
}

// SenderRef is the execution a workflow code's signal comes from.
type SenderRef struct {
	ExecutionID string `json:"execution_id"`
	SignalID    int    `json:"signal_id"`
}

// What a Report tells (Report.What).
const (
	ReportChildStarted     = "child_started"
	ReportChildStartFailed = "child_start_failed"
	ReportChildClosed      = "child_closed"
	ReportSignalDelivered  = "signal_delivered"
	ReportSignalFailed     = "signal_failed"
)

// Report tells the execution ExecutionID how a child it started (Child:
// the child's id, and its execution, status, result or failure, or the
// refusal) or a signal it sent (Signal: its id, and where it went or why
// not) went.
type Report struct {
	ExecutionID string               `json:"execution_id"`
	What        string               `json:"what"`
	Child       *ChildAttrs          `json:"child,omitempty"`
	Signal      *ExternalSignalAttrs `json:"signal,omitempty"`
	// Schedule, instead, tells a schedule (on its shard) how a fire went;
	// ExecutionID is then empty.
	Schedule *ScheduleReport `json:"schedule,omitempty"`
	// Batch, instead, tells a batch's part how its operation went on an
	// execution; ExecutionID is then empty.
	Batch *BatchReport `json:"batch,omitempty"`
}
