package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// Update is api.Update.
type Update = api.Update

// Update statuses: Update.Status.
const (
	UpdateRequested = api.UpdateRequested
	UpdateAccepted  = api.UpdateAccepted
	UpdateCompleted = api.UpdateCompleted
	UpdateFailed    = api.UpdateFailed
	UpdateRejected  = api.UpdateRejected
)

// UpdateOptions are the options of Client.Update.
type UpdateOptions struct {
	// IdempotencyKey makes the update keyed: asked again with the same
	// key, of any run of the execution's chain, it is the same update,
	// answered with its answer. Without one, every call is a new update.
	IdempotencyKey string
	// WaitAccepted returns as soon as the workflow accepted the update
	// (status accepted), rather than when its handler answers; read it
	// later with GetUpdate.
	WaitAccepted bool
}

// Update asks the running execution for the update name with args
// (encoded as JSON), and waits for its answer: the update, completed
// (its handler's Result) or failed (its handler's Failure). An update
// the server stops waiting for (202: the handler still runs) is read
// again with GetUpdate until it has its answer or ctx ends. A refused
// update is an *APIError: ErrUpdateRejected (422, the validator's
// refusal), ErrUpdateNotFound (404, no handler of the name),
// ErrExecutionClosed (409), ErrUpdateLimit (429).
func (c *Client) Update(ctx context.Context, executionID, name string, args any, opts UpdateOptions) (*Update, error) {
	switch {
	case executionID == "":
		return nil, errors.New("client: update: execution id is required")
	case name == "":
		return nil, errors.New("client: update: name is required")
	}
	body, err := encodeJSON(args)
	if err != nil {
		return nil, fmt.Errorf("client: update %s: encode args: %w", name, err)
	}
	wait := api.UpdateWaitCompleted
	if opts.WaitAccepted {
		wait = api.UpdateWaitAccepted
	}
	path := apiPrefix + "/executions/" + url.PathEscape(executionID) + "/updates/" + url.PathEscape(name)
	header := http.Header{}
	if opts.IdempotencyKey != "" {
		header.Set("Idempotency-Key", opts.IdempotencyKey)
	}
	resp, err := c.do(ctx, http.MethodPost, withQuery(path, url.Values{"wait": {wait}}), header, body)
	if err != nil {
		return nil, err
	}
	var u Update
	if err := decode(http.MethodPost, path, resp.body, &u); err != nil {
		return nil, err
	}
	if opts.WaitAccepted || u.Closed() {
		return &u, nil
	}
	return c.AwaitUpdate(ctx, u.ExecutionID, u.UpdateID)
}

// GetUpdate reads an update of an execution as it stands.
func (c *Client) GetUpdate(ctx context.Context, executionID, updateID string) (*Update, error) {
	return c.getUpdate(ctx, executionID, updateID, 0)
}

// AwaitUpdate waits until an update has its answer, and returns it as
// Update does (a refusal as an *APIError).
func (c *Client) AwaitUpdate(ctx context.Context, executionID, updateID string) (*Update, error) {
	for {
		u, err := c.getUpdate(ctx, executionID, updateID, 30*time.Second)
		if err != nil {
			return nil, err
		}
		if u.Closed() {
			if status, body, refused := u.Refusal(); refused {
				return u, &APIError{StatusCode: status, Code: body.Error, Message: body.Message}
			}
			return u, nil
		}
		if err := ctx.Err(); err != nil {
			return u, err
		}
	}
}

func (c *Client) getUpdate(ctx context.Context, executionID, updateID string, wait time.Duration) (*Update, error) {
	if executionID == "" || updateID == "" {
		return nil, errors.New("client: get update: execution id and update id are required")
	}
	path := apiPrefix + "/executions/" + url.PathEscape(executionID) + "/updates/" + url.PathEscape(updateID)
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var u Update
	if err := c.get(ctx, withQuery(path, q), &u); err != nil {
		return nil, err
	}
	return &u, nil
}
