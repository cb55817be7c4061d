package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// CloseResult is the answer to Cancel or Terminate: the execution and its
// status, Cancelled or Terminated, or how it had closed before the call
// (closing a closed execution changes nothing).
type CloseResult struct {
	ExecutionID  string
	WorkflowName string
	WorkflowID   string
	Status       string
	// Raw is the server's JSON answer (the polled outcome if it came
	// late).
	Raw json.RawMessage
}

// Cancel cancels a running execution: it closes as Cancelled, with
// reason (empty: "cancelled"), and its running activities' contexts are
// cancelled. Cancelling a closed execution changes nothing and answers
// its status; an unknown execution is an *APIError matching
// ErrExecutionNotFound. When the server answers 202, Cancel polls the
// command until it is applied, within ctx.
func (c *Client) Cancel(ctx context.Context, executionID, reason string) (*CloseResult, error) {
	return c.closeExecution(ctx, "Cancel", "cancel", executionID, reason, CancelRequest{Reason: reason})
}

// Terminate terminates a running execution: it closes as Terminated at
// once, with reason (empty: "terminated"), without its workflow code
// running again; its pending activities and timers are abandoned and its
// running activities' contexts cancelled. Terminating a closed execution
// changes nothing and answers its status; an unknown execution is an
// *APIError matching ErrExecutionNotFound. When the server answers 202,
// Terminate polls the command until it is applied, within ctx.
func (c *Client) Terminate(ctx context.Context, executionID, reason string) (*CloseResult, error) {
	return c.closeExecution(ctx, "Terminate", "terminate", executionID, reason, TerminateRequest{Reason: reason})
}

// closeExecution is Cancel and Terminate (op names the method in errors):
// it posts req, or no body when reason is empty, to
// /executions/{id}/{action} and reads the answer, a CancelResponse or a
// TerminateResponse (the same members).
func (c *Client) closeExecution(ctx context.Context, op, action, executionID, reason string, req any) (*CloseResult, error) {
	if executionID == "" {
		return nil, fmt.Errorf("client: %s: execution id is required", op)
	}
	var body []byte
	if reason != "" {
		var err error
		if body, err = json.Marshal(req); err != nil {
			return nil, fmt.Errorf("client: %s: %w", action, err)
		}
	}
	path := apiPrefix + "/executions/" + url.PathEscape(executionID) + "/" + action
	_, raw, err := c.submit(ctx, path, "", body)
	if err != nil {
		return nil, err
	}
	var a TerminateResponse
	if err := decode(http.MethodPost, path, raw, &a); err != nil {
		return nil, err
	}
	return &CloseResult{ExecutionID: a.ExecutionID, WorkflowName: a.WorkflowName, WorkflowID: a.WorkflowID, Status: a.Status, Raw: raw}, nil
}
