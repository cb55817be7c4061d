package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// CloseResult is the answer to Cancel or Terminate: the execution and its
// status (Terminated; Running while a cancelled execution's code cleans
// up, or Cancelled when it never ran), or how it had closed before the
// call (closing a closed execution changes nothing).
type CloseResult struct {
	ExecutionID  string
	WorkflowName string
	WorkflowID   string
	Status       string
	// CancelRequested says a Cancel found the execution running and
	// asked it to cancel (this call or an earlier one): its workflow code
	// is told, and closes it Cancelled (WaitResult waits for that).
	CancelRequested bool
	// Raw is the server's JSON answer (the polled outcome if it came
	// late).
	Raw json.RawMessage
}

// Cancel asks a running execution to cancel, with reason (empty:
// "cancelled"): its workflow code is told (docs/cancellation.md), gives
// up the activities and timers it waits for, may clean up, and closes it
// Cancelled; an execution whose code never ran closes at once. Asking
// again changes nothing. Cancelling a closed execution changes nothing
// and answers its status; an unknown execution is an *APIError matching
// ErrExecutionNotFound. When the server answers 202, Cancel polls the
// command until it is applied, within ctx.
func (c *Client) Cancel(ctx context.Context, executionID, reason string) (*CloseResult, error) {
	return c.closeExecution(ctx, "Cancel", "cancel", executionID, reason != "", CancelRequest{Reason: reason})
}

// CancelWithGrace is Cancel bounded by grace: the execution is
// terminated if its code has not closed it grace after the request. It
// overrides the workflow's configured cancel_grace.
func (c *Client) CancelWithGrace(ctx context.Context, executionID, reason string, grace time.Duration) (*CloseResult, error) {
	return c.closeExecution(ctx, "CancelWithGrace", "cancel", executionID, true, CancelRequest{Reason: reason, CancelGrace: grace.String()})
}

// Terminate terminates a running execution: it closes as Terminated at
// once, with reason (empty: "terminated"), without its workflow code
// running again; its pending activities and timers are abandoned and its
// running activities' contexts cancelled. Terminating a closed execution
// changes nothing and answers its status; an unknown execution is an
// *APIError matching ErrExecutionNotFound. When the server answers 202,
// Terminate polls the command until it is applied, within ctx.
func (c *Client) Terminate(ctx context.Context, executionID, reason string) (*CloseResult, error) {
	return c.closeExecution(ctx, "Terminate", "terminate", executionID, reason != "", TerminateRequest{Reason: reason})
}

// closeExecution is Cancel and Terminate (op names the method in errors):
// it posts req, or no body when withBody is false, to
// /executions/{id}/{action} and reads the answer, a CancelResponse or a
// TerminateResponse (its members less cancel_requested).
func (c *Client) closeExecution(ctx context.Context, op, action, executionID string, withBody bool, req any) (*CloseResult, error) {
	if executionID == "" {
		return nil, fmt.Errorf("client: %s: execution id is required", op)
	}
	var body []byte
	if withBody {
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
	var a CancelResponse
	if err := decode(http.MethodPost, path, raw, &a); err != nil {
		return nil, err
	}
	return &CloseResult{ExecutionID: a.ExecutionID, WorkflowName: a.WorkflowName, WorkflowID: a.WorkflowID, Status: a.Status,
		CancelRequested: a.CancelRequested, Raw: raw}, nil
}

// Reset resets an execution to a point of its history (docs/reset.md): a
// new run of its workflow_id starts from there, and a running execution
// closes Terminated. req.To names the point. The answer names the new
// run (deduplicated when the same reset was applied before). A point no
// reset can go to is an *APIError matching ErrInvalidResetPoint, whose
// NearestPoints name valid ones; a run that is not its chain's newest,
// ErrExecutionNotLatest. When the server answers 202, Reset polls the
// command until it is applied, within ctx.
func (c *Client) Reset(ctx context.Context, executionID string, req ResetRequest) (*ResetResponse, error) {
	var a ResetResponse
	if err := c.postReset(ctx, "Reset", executionID, "", req, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// PlanReset answers what Reset with req would do, changing nothing
// (?dry_run=true).
func (c *Client) PlanReset(ctx context.Context, executionID string, req ResetRequest) (*ResetPlan, error) {
	var p ResetPlan
	if err := c.postReset(ctx, "PlanReset", executionID, "?dry_run=true", req, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// postReset posts req to the execution's reset route (with query) and
// decodes the answer into out; op names the method in errors.
func (c *Client) postReset(ctx context.Context, op, executionID, query string, req ResetRequest, out any) error {
	if executionID == "" {
		return fmt.Errorf("client: %s: execution id is required", op)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	path := apiPrefix + "/executions/" + url.PathEscape(executionID) + "/reset" + query
	_, raw, err := c.submit(ctx, path, "", body)
	if err != nil {
		return err
	}
	return decode(http.MethodPost, path, raw, out)
}
