package api

import (
	"encoding/json"
	"time"
)

// Update statuses (Update.Status).
const (
	// UpdateRequested: admitted; no workflow task has taken it yet.
	UpdateRequested = "requested"
	// UpdateAccepted: the workflow's validator took it and its handler
	// runs.
	UpdateAccepted = "accepted"
	// UpdateCompleted: its handler returned; Result is its answer.
	UpdateCompleted = "completed"
	// UpdateFailed: its handler returned an error (Failure, no Error), or
	// the execution closed first (Error execution_closed).
	UpdateFailed = "failed"
	// UpdateRejected: its validator refused it (Error update_rejected),
	// or the workflow has no handler of its name (Error
	// update_not_found); nothing of it is in the history.
	UpdateRejected = "rejected"
)

// Update is an update of an execution: what POST
// /api/harvest/executions/{execution_id}/updates/{name} answers (200 once
// it has its answer, 202 while it has not) and GET
// /api/harvest/executions/{execution_id}/updates/{update_id} reads.
type Update struct {
	UpdateID string `json:"update_id"`
	// ExecutionID is the run that took it (or will): the newest of the
	// chain of continued runs of the execution it was asked of.
	ExecutionID string `json:"execution_id"`
	Name        string `json:"name"`
	Status      string `json:"status"`
	// Result is the handler's answer (completed); Failure its error
	// (failed), or the refusal (rejected), as {"message", "type"}.
	Result  json.RawMessage `json:"result,omitempty"`
	Failure json.RawMessage `json:"failure,omitempty"`
	// Error is the machine-readable code of a rejected update, or of one
	// that failed because its execution closed.
	Error string `json:"error,omitempty"`
	// Deduplicated says the request repeated an update's key: the answer
	// is that update's.
	Deduplicated bool      `json:"deduplicated,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Closed says whether u has its answer.
func (u *Update) Closed() bool {
	return u.Status == UpdateCompleted || u.Status == UpdateFailed || u.Status == UpdateRejected
}

// Refusal is the error answer of an update that has one: its validator
// refused it (422 update_rejected), the workflow has no handler of its
// name (404 update_not_found), or its execution closed first (409
// execution_closed). ok is false for an update answered by its handler,
// or not answered yet.
func (u *Update) Refusal() (status int, body ErrorResponse, ok bool) {
	var f struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(u.Failure, &f)
	switch u.Error {
	case CodeUpdateRejected:
		return 422, ErrorResponse{Error: u.Error, Message: "the workflow refused the update: " + f.Message}, true
	case CodeUpdateNotFound:
		return 404, ErrorResponse{Error: u.Error, Message: f.Message}, true
	case CodeExecutionClosed:
		return 409, ErrorResponse{Error: u.Error, Message: f.Message}, true
	}
	return 0, ErrorResponse{}, false
}

// The values of POST .../updates/{name}'s wait parameter.
const (
	// UpdateWaitCompleted (the default) answers once the update has its
	// answer, or when the server's wait ends (202 with the update).
	UpdateWaitCompleted = "completed"
	// UpdateWaitAccepted answers once the workflow accepted the update
	// (202 with the update, status accepted), or refused it.
	UpdateWaitAccepted = "accepted"
)
