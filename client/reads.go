package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// Execution is api.Execution.
type Execution = api.Execution

// HistoryWarning is api.HistoryWarning.
type HistoryWarning = api.HistoryWarning

// FailureHistoryLimitExceeded is the failure type of an execution whose
// history passed its hard limit (api.FailureHistoryLimitExceeded).
const FailureHistoryLimitExceeded = api.FailureHistoryLimitExceeded

// KeyClaim is api.KeyClaim.
type KeyClaim = api.KeyClaim

// DuplicateCounts is api.DuplicateCounts.
type DuplicateCounts = api.DuplicateCounts

// SignalKey is api.SignalKey.
type SignalKey = api.SignalKey

// CallbackDelivery is api.CallbackDelivery.
type CallbackDelivery = api.CallbackDelivery

// Event is api.Event.
type Event = api.Event

// WaitingFor is api.WaitingFor.
type WaitingFor = api.WaitingFor

// Completion callback delivery states: CallbackDelivery.Status.
const (
	CallbackWaiting   = api.CallbackWaiting
	CallbackPending   = api.CallbackPending
	CallbackDelivered = api.CallbackDelivered
	CallbackFailed    = api.CallbackFailed
)

// Kinds of WaitingFor.
const (
	WaitingForWorkflow = api.WaitingForWorkflow
	WaitingForActivity = api.WaitingForActivity
)

// Describe reads an execution; an unknown id is an *APIError matching
// ErrNotFound.
func (c *Client) Describe(ctx context.Context, executionID string) (*Execution, error) {
	if executionID == "" {
		return nil, errors.New("client: Describe: execution id is required")
	}
	path := apiPrefix + "/executions/" + url.PathEscape(executionID)
	var e Execution
	if err := c.get(ctx, path, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// History reads an execution's history, oldest event first.
func (c *Client) History(ctx context.Context, executionID string) ([]Event, error) {
	if executionID == "" {
		return nil, errors.New("client: History: execution id is required")
	}
	path := apiPrefix + "/executions/" + url.PathEscape(executionID) + "/history"
	var a HistoryResponse
	if err := c.get(ctx, path, &a); err != nil {
		return nil, err
	}
	if a.Events == nil {
		a.Events = []Event{}
	}
	return a.Events, nil
}

// MaxStateWait is the longest StateOptions.Wait the server takes
// (api.MaxStateWait).
const MaxStateWait = api.MaxStateWait

// StateOptions tune State. The zero value reads the state as it is.
type StateOptions struct {
	// AfterSeq is the Seq of the value the caller has: with Wait, State
	// waits for a newer one. Zero waits for the state to be set.
	AfterSeq int
	// Wait is how long State waits for a value whose Seq is greater than
	// AfterSeq, up to MaxStateWait; zero answers at once. It is held
	// below the HTTP client's timeout (DefaultTimeout, 30 s, for a
	// Client New made without one), less 5 s for the answer to arrive.
	Wait time.Duration
}

// stateAnswerMargin is the time left, below the HTTP client's timeout,
// for a waiting state read's answer to arrive.
const stateAnswerMargin = 5 * time.Second

// State reads the query state name of an execution
// (harvest.SetQueryState), from PostgreSQL: no worker needs to run. With
// opts.Wait it waits, up to then, for a value whose Seq is greater than
// opts.AfterSeq, and returns the value it has at the end either way:
// compare its Seq, and call again with it to wait longer. A closed
// execution's states change no more (Status says so), and a run that
// continued as new has its own: Describe's ContinuedAs names the next.
// A state the workflow code never set is an *APIError matching
// ErrStateNotFound (after the wait, with one); an unknown execution one
// matching ErrExecutionNotFound.
func (c *Client) State(ctx context.Context, executionID, name string, opts StateOptions) (*State, error) {
	if executionID == "" || name == "" {
		return nil, errors.New("client: State: execution id and state name are required")
	}
	q := url.Values{}
	if opts.AfterSeq != 0 {
		q.Set("after_seq", strconv.Itoa(opts.AfterSeq))
	}
	if wait := opts.Wait; wait != 0 {
		if limit := c.hc.Timeout - stateAnswerMargin; c.hc.Timeout > 0 && wait > limit {
			wait = max(limit, 0)
		}
		q.Set("wait", wait.Round(time.Millisecond).String())
	}
	path := withQuery(apiPrefix+"/executions/"+url.PathEscape(executionID)+"/state/"+url.PathEscape(name), q)
	var st State
	if err := c.get(ctx, path, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// States reads every query state of an execution, by name.
func (c *Client) States(ctx context.Context, executionID string) (*ListStatesResponse, error) {
	if executionID == "" {
		return nil, errors.New("client: States: execution id is required")
	}
	var a ListStatesResponse
	if err := c.get(ctx, apiPrefix+"/executions/"+url.PathEscape(executionID)+"/state", &a); err != nil {
		return nil, err
	}
	if a.States == nil {
		a.States = []State{}
	}
	return &a, nil
}

// Children lists the child workflows an execution started
// (docs/children.md), each with the execution its start became and its
// status as last reported to the parent.
func (c *Client) Children(ctx context.Context, executionID string) (*ListChildrenResponse, error) {
	if executionID == "" {
		return nil, errors.New("client: Children: execution id is required")
	}
	var a ListChildrenResponse
	if err := c.get(ctx, apiPrefix+"/executions/"+url.PathEscape(executionID)+"/children", &a); err != nil {
		return nil, err
	}
	if a.Children == nil {
		a.Children = []Child{}
	}
	return &a, nil
}

// ListOptions filters List and ListPage. Zero values mean no filter and
// the server's default limit (50).
type ListOptions struct {
	Workflow string
	Status   string
	// KeyPrefix and WorkflowIDPrefix keep executions whose idempotency
	// key, or workflow_id, begins with them.
	KeyPrefix        string
	WorkflowIDPrefix string
	// CreatedAfter (inclusive) and CreatedBefore (exclusive) bound the
	// executions' start.
	CreatedAfter, CreatedBefore time.Time
	// SearchAttributes filter on search attributes
	// (docs/search-attributes.md): "NAME" keeps executions whose
	// attribute equals the value, "NAME.gt" (gte, lt, lte) bounds it.
	SearchAttributes map[string]string
	// Cursor continues a listing: the NextCursor of its previous page.
	Cursor string
	// Limit is 1 to 500.
	Limit int
}

// filterQuery is the query of opts' filters, its cursor and limit left
// out.
func (opts ListOptions) filterQuery() url.Values {
	q := url.Values{}
	for name, v := range map[string]string{
		"workflow": opts.Workflow, "status": opts.Status, "key_prefix": opts.KeyPrefix, "workflow_id_prefix": opts.WorkflowIDPrefix,
	} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if !opts.CreatedAfter.IsZero() {
		q.Set("created_after", opts.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !opts.CreatedBefore.IsZero() {
		q.Set("created_before", opts.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	for name, v := range opts.SearchAttributes {
		q.Set("attr."+name, v)
	}
	return q
}

// Count counts the executions opts' filters match (its Cursor and Limit
// left out), across the stores.
func (c *Client) Count(ctx context.Context, opts ListOptions) (int64, error) {
	var a CountExecutionsResponse
	if err := c.get(ctx, withQuery(apiPrefix+"/executions/count", opts.filterQuery()), &a); err != nil {
		return 0, err
	}
	return a.Count, nil
}

// List lists executions, newest first: the first page of ListPage.
func (c *Client) List(ctx context.Context, opts ListOptions) ([]Execution, error) {
	page, err := c.ListPage(ctx, opts)
	if err != nil {
		return nil, err
	}
	return page.Executions, nil
}

// ListPage lists one page of executions, newest first; its NextCursor,
// when not empty, is opts.Cursor for the next page. Pages stay correct
// while new executions arrive: those come before the first page.
func (c *Client) ListPage(ctx context.Context, opts ListOptions) (*ListExecutionsResponse, error) {
	q := opts.filterQuery()
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	path := withQuery(apiPrefix+"/executions", q)
	var a ListExecutionsResponse
	if err := c.get(ctx, path, &a); err != nil {
		return nil, err
	}
	if a.Executions == nil {
		a.Executions = []Execution{}
	}
	return &a, nil
}

// WaitResult polls the execution (every 50 ms at first, backing off to
// 1 s) until it closes, within ctx. When it Completed, its result is
// decoded into out (a pointer, or nil to skip). When it closed otherwise
// the error is an *ExecutionFailedError; the execution is returned in
// both cases. A run that continued as new is followed to the run it
// continued as, until the chain's last run closes: that run is the one
// returned, with the chain's result.
func (c *Client) WaitResult(ctx context.Context, executionID string, out any) (*Execution, error) {
	var e *Execution
	id := executionID
	err := poll(ctx, func() (bool, error) {
		got, err := c.Describe(ctx, id)
		switch {
		case err == nil && got.Status == StatusContinuedAsNew && got.ContinuedAs != "":
			// A chain of runs: its result is its last run's.
			e, id = got, got.ContinuedAs
			return false, nil
		case err == nil:
			e = got
			return got.Terminal(), nil
		case ctx.Err() != nil:
			return false, ctx.Err()
		case transient(err):
			return false, nil
		}
		return false, err
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			status := "unknown"
			if e != nil {
				status = e.Status
			}
			return e, fmt.Errorf("client: wait for execution %s (status %s): %w", executionID, status, ctxErr)
		}
		return e, err
	}
	if e.Status != StatusCompleted {
		fe := &ExecutionFailedError{ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, Status: e.Status, Failure: e.Error}
		var f struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Reason  string `json:"reason"`
		}
		if json.Unmarshal(e.Error, &f) == nil {
			fe.Message, fe.Type = f.Message, f.Type
			if fe.Message == "" {
				fe.Message = f.Reason
			}
		}
		return e, fe
	}
	if out != nil && len(e.Result) > 0 {
		if err := json.Unmarshal(e.Result, out); err != nil {
			return e, fmt.Errorf("client: decode the result of execution %s: %w", executionID, err)
		}
	}
	return e, nil
}
