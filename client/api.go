package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// Execution statuses. Every status but Running and Pending is terminal.
const (
	StatusRunning = api.StatusRunning
	// StatusPending is api.StatusPending: the execution waits for a
	// slot of its concurrency start policy's key (Execution.WaitingFor)
	// and begins, Running, as a running one closes.
	StatusPending    = api.StatusPending
	StatusCompleted  = api.StatusCompleted
	StatusFailed     = api.StatusFailed
	StatusCancelled  = api.StatusCancelled
	StatusTerminated = api.StatusTerminated
	StatusTimedOut   = api.StatusTimedOut
	// StatusContinuedAsNew is api.StatusContinuedAsNew.
	StatusContinuedAsNew = api.StatusContinuedAsNew
)

// IsTerminal reports whether status is a closed execution's status.
func IsTerminal(status string) bool { return api.IsTerminal(status) }

// Reuse policies for StartOptions.ReusePolicy and
// SignalWithStartOptions.ReusePolicy: what a start does when its
// workflow_id already has an execution. Empty means ReuseAllowDuplicate.
const (
	// ReuseAllowDuplicate returns the existing execution (the default).
	ReuseAllowDuplicate = api.ReuseAllowDuplicate
	// ReuseAllowDuplicateFailedOnly starts anew only if the prior run
	// Failed or was Cancelled, else returns it.
	ReuseAllowDuplicateFailedOnly = api.ReuseAllowDuplicateFailedOnly
	// ReuseRejectDuplicate refuses the start (409 workflow_id_conflict).
	ReuseRejectDuplicate = api.ReuseRejectDuplicate
	// ReuseTerminateIfRunning terminates a running prior run and starts
	// anew.
	ReuseTerminateIfRunning = api.ReuseTerminateIfRunning
)

const apiPrefix = "/api/harvest"

// StartOptions tunes a start. The zero value is an unkeyed start with a
// minted workflow_id that runs at once.
type StartOptions struct {
	// IdempotencyKey makes the start idempotent: every start of the
	// workflow with the key, within the key's window, answers with the
	// same execution. Sent as the Idempotency-Key header.
	IdempotencyKey string
	// WorkflowID is the business identifier of the execution; empty
	// mints one.
	WorkflowID string
	// ReusePolicy is one of the Reuse constants; empty is the server's
	// default (allow_duplicate).
	ReusePolicy string
	// Delay defers the first workflow task; zero means now. Give Delay
	// or StartAt, not both.
	Delay time.Duration
	// StartAt is when the first workflow task may run.
	StartAt *time.Time
	// CompletionCallback is an http(s) URL the outcome is POSTed to when
	// the execution closes.
	CompletionCallback string
	// StartPolicy admits this start by its own policy instead of its
	// workflow's configured one.
	StartPolicy *StartPolicy
	// Store pins the start to a PostgreSQL store of a deployment with
	// several.
	Store string
	// TaskQueue is the task queue the execution's tasks go to; empty is
	// the workflow's configured queue, else "default".
	TaskQueue string
	// Versioning is VersioningPinned or VersioningAutoUpgrade; empty is
	// the workflow's configured versioning, else auto_upgrade.
	Versioning string
	// BuildID pins the execution to a build a live worker of which
	// registers the workflow (it implies VersioningPinned).
	BuildID string
	// RunTimeout bounds the run, ExecutionTimeout the whole chain of
	// runs that continue as new: past it the execution closes TimedOut
	// (docs/cancellation.md#timeouts). Zero: the workflow's configured
	// ones, else none.
	RunTimeout       time.Duration
	ExecutionTimeout time.Duration
	// Priority orders the execution's tasks among the others of its task
	// queue, from api.MinPriority (1) to api.MaxPriority (5), higher
	// taken first (docs/start-policies.md#priorities); zero is the
	// default, 3. Another is refused: 400 invalid_priority.
	Priority int
	// SearchAttributes are the execution's search attributes
	// (docs/search-attributes.md), each declared by its workflow with a
	// type: a string for a keyword, a number, a bool, a time.Time. One it
	// does not declare, or of another type: 400 invalid_search_attribute.
	SearchAttributes map[string]any
}

// Versionings of StartOptions.Versioning.
const (
	VersioningPinned      = "pinned"
	VersioningAutoUpgrade = "auto_upgrade"
)

// StartResult is a start's answer.
type StartResult struct {
	ExecutionID  string
	WorkflowName string
	WorkflowID   string
	// Status is the execution's status when the start was answered.
	Status string
	// WaitingFor is WaitingForConcurrency when Status is StatusPending:
	// the execution waits for a slot of its concurrency start policy's
	// key, and begins as a running one of the key closes.
	WaitingFor string
	// StartedFresh says this call created the execution (HTTP 201).
	StartedFresh bool
	// Deduplicated says a keyed start was a retry: the execution is the
	// one the key's first start created.
	Deduplicated bool
	// Keyed says the server treated the start as keyed (it reported
	// started_fresh and deduplicated).
	Keyed bool
	// FirstSeenAt and ExpiresAt are the key's claim window, on a
	// deduplicated start.
	FirstSeenAt *time.Time
	ExpiresAt   *time.Time
	// Deferred says the workflow's start policy holds the start back:
	// there is no execution yet. Command(CommandID) tells, once it is
	// applied, the execution it became part of.
	Deferred  bool
	CommandID string
	// Raw is the server's JSON answer (the polled outcome if the answer
	// came late).
	Raw json.RawMessage
}

// optional is s, or nil when it is empty: a member to leave out.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Start starts workflow with input (encoded as JSON; nil sends none, a
// json.RawMessage is sent as it is). When the server answers 202, Start
// polls the command until it is applied, within ctx.
func (c *Client) Start(ctx context.Context, workflow string, input any, opts StartOptions) (*StartResult, error) {
	if workflow == "" {
		return nil, errors.New("client: Start: workflow name is required")
	}
	in, err := encodeJSON(input)
	if err != nil {
		return nil, fmt.Errorf("client: Start: encode input: %w", err)
	}
	b := StartRequest{Input: in, WorkflowID: optional(opts.WorkflowID), ReusePolicy: opts.ReusePolicy,
		CompletionCallback: optional(opts.CompletionCallback), StartPolicy: opts.StartPolicy, Store: optional(opts.Store),
		TaskQueue: optional(opts.TaskQueue), Versioning: optional(opts.Versioning), BuildID: optional(opts.BuildID)}
	if opts.RunTimeout != 0 {
		b.RunTimeout = optional(opts.RunTimeout.String())
	}
	if opts.ExecutionTimeout != 0 {
		b.ExecutionTimeout = optional(opts.ExecutionTimeout.String())
	}
	b.Priority = optionalInt(opts.Priority)
	if b.SearchAttributes, err = encodeAttributes(opts.SearchAttributes); err != nil {
		return nil, fmt.Errorf("client: Start: %w", err)
	}
	if opts.Delay < 0 {
		return nil, fmt.Errorf("client: Start: Delay %s is negative", opts.Delay)
	}
	if opts.Delay > 0 {
		b.Delay = optional(opts.Delay.String())
	}
	if opts.StartAt != nil {
		b.StartAt = optional(opts.StartAt.UTC().Format(time.RFC3339Nano))
	}
	body, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("client: Start: %w", err)
	}
	path := apiPrefix + "/workflows/" + url.PathEscape(workflow) + "/start"
	status, raw, err := c.submit(ctx, path, opts.IdempotencyKey, body)
	if err != nil {
		return nil, err
	}
	if status == http.StatusAccepted {
		var d AcceptedResponse
		if err := decode(http.MethodPost, path, raw, &d); err != nil {
			return nil, err
		}
		return &StartResult{WorkflowName: workflow, Deferred: d.Status == CommandDeferred, CommandID: d.CommandID, Raw: raw}, nil
	}
	var a StartResponse
	if err := decode(http.MethodPost, path, raw, &a); err != nil {
		return nil, err
	}
	r := &StartResult{
		ExecutionID: a.ExecutionID, WorkflowName: a.WorkflowName, WorkflowID: a.WorkflowID, Status: a.Status, WaitingFor: a.WaitingFor,
		StartedFresh: status == http.StatusCreated, Keyed: a.StartedFresh != nil,
		FirstSeenAt: a.FirstSeenAt, ExpiresAt: a.ExpiresAt, Raw: raw,
	}
	if a.StartedFresh != nil {
		r.StartedFresh = *a.StartedFresh
	}
	if a.Deduplicated != nil {
		r.Deduplicated = *a.Deduplicated
	}
	return r, nil
}

// CommandStatus is what the server knows of a command it accepted.
type CommandStatus struct {
	CommandID string
	// Applied is false while the command waits to be applied. It is true
	// for a command the scheduler set aside as dead, too: that is final.
	Applied bool
	// Rejected says the scheduler could not apply the command and set it
	// aside as dead (HTTPStatus 422, error command_rejected; see
	// DeadCommands).
	Rejected bool
	// Deferred says the command is a start its workflow's start policy
	// holds back: it is applied once the execution it becomes part of
	// begins.
	Deferred bool
	// HTTPStatus and Outcome are the answer the command's request would
	// have had, once Applied.
	HTTPStatus int
	Outcome    json.RawMessage
}

// Command reads the state of a command the server answered 202 for.
func (c *Client) Command(ctx context.Context, commandID string) (*CommandStatus, error) {
	if commandID == "" {
		return nil, errors.New("client: Command: command id is required")
	}
	path := apiPrefix + "/commands/" + url.PathEscape(commandID)
	var a CommandResponse
	if err := c.get(ctx, path, &a); err != nil {
		return nil, err
	}
	return &CommandStatus{CommandID: a.CommandID, Applied: a.Status == CommandApplied || a.Status == CommandRejected,
		Rejected: a.Status == CommandRejected, Deferred: a.Status == CommandDeferred, HTTPStatus: a.HTTPStatus, Outcome: a.Outcome}, nil
}

// unknownCommandGrace is how long a command the server just accepted may
// read as unknown before that is taken as final.
const unknownCommandGrace = 10 * time.Second

// submit posts a command-making request with its idempotency key, if any,
// and returns the answer: the server's own, or, when it answered 202, the
// applied command's outcome, polled until known.
func (c *Client) submit(ctx context.Context, path, key string, body []byte) (int, []byte, error) {
	header := http.Header{}
	if key != "" {
		header.Set("Idempotency-Key", key)
	}
	resp, err := c.do(ctx, http.MethodPost, path, header, body)
	if err != nil {
		return 0, nil, err
	}
	if resp.status != http.StatusAccepted {
		return resp.status, resp.body, nil
	}
	var acc AcceptedResponse
	if err := decode(http.MethodPost, path, resp.body, &acc); err != nil {
		return 0, nil, err
	}
	if acc.CommandID == "" || acc.Status != CommandAccepted {
		return resp.status, resp.body, nil // a 202 that is the answer itself
	}
	cmd, err := c.awaitCommand(ctx, acc.CommandID)
	if err != nil {
		return 0, nil, err
	}
	if cmd.Deferred {
		// Held back by a start policy: that is the answer, for now.
		deferred, _ := json.Marshal(AcceptedResponse{CommandID: cmd.CommandID, Status: CommandDeferred})
		return http.StatusAccepted, deferred, nil
	}
	return cmd.HTTPStatus, cmd.Outcome, nil
}

// awaitCommand polls a command until it is applied and returns its
// outcome; an applied refusal is returned as an *APIError.
func (c *Client) awaitCommand(ctx context.Context, commandID string) (*CommandStatus, error) {
	if commandID == "" {
		return nil, errors.New("client: the server accepted a command without naming it")
	}
	var cmd *CommandStatus
	unknownSince := time.Time{}
	err := poll(ctx, func() (bool, error) {
		got, err := c.Command(ctx, commandID)
		switch {
		case err == nil:
			cmd = got
			return got.Applied || got.Deferred, nil
		case ctx.Err() != nil:
			return false, ctx.Err()
		case transient(err):
			return false, nil
		case errors.Is(err, ErrNotFound):
			// The pending mark may not be readable yet.
			if unknownSince.IsZero() {
				unknownSince = time.Now()
			}
			if time.Since(unknownSince) < unknownCommandGrace {
				return false, nil
			}
		}
		return false, err
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return nil, &PendingError{CommandID: commandID, Err: ctxErr}
		}
		return nil, err
	}
	if !cmd.Deferred && cmd.HTTPStatus/100 != 2 {
		return nil, apiErrorFrom(cmd.HTTPStatus, nil, cmd.Outcome)
	}
	return cmd, nil
}

// errNoRoute matches the API's answer to a request no route serves (404
// not_found), as a server older than the route gives.
var errNoRoute = sentinel(http.StatusNotFound, CodeNotFound, "no route")

// SendSignal sends the named signal with payload (encoded as JSON; nil
// sends none) to an execution. Without an idempotency key every call
// appends one signal; use SendSignalIdempotent for deliveries that may be
// retried. A 404 answer matches ErrNotFound, a closed execution's 409
// ErrConflict. It posts to /api/harvest/executions/{execution_id}/signals/{name},
// or, to a server that predates that path, to its deprecated one.
func (c *Client) SendSignal(ctx context.Context, executionID, name string, payload any) error {
	_, err := c.signal(ctx, executionID, name, payload, "")
	return err
}

// SendSignalIdempotent sends the named signal under an idempotency key:
// the signal lands once per execution and key, however often it is sent.
// delivered is true for the call that appended it and false for retries.
// When the answer comes late (202), the command is polled for it; a late
// answer to a retry may then report the first delivery's true.
func (c *Client) SendSignalIdempotent(ctx context.Context, executionID, name string, payload any, key string) (delivered bool, err error) {
	if key == "" {
		return false, errors.New("client: SendSignalIdempotent: key is required")
	}
	return c.signal(ctx, executionID, name, payload, key)
}

func (c *Client) signal(ctx context.Context, executionID, name string, payload any, key string) (bool, error) {
	switch {
	case executionID == "":
		return false, errors.New("client: signal: execution id is required")
	case name == "":
		return false, errors.New("client: signal: signal name is required")
	}
	body, err := encodeJSON(payload)
	if err != nil {
		return false, fmt.Errorf("client: signal %s: encode payload: %w", name, err)
	}
	path := apiPrefix + "/executions/" + url.PathEscape(executionID) + "/signals/" + url.PathEscape(name)
	_, raw, err := c.submit(ctx, path, key, body)
	if errors.Is(err, errNoRoute) {
		// A server older than the route answers that no route serves its
		// path, having published nothing: send it where that server
		// serves signals.
		path = apiPrefix + "/workflows/" + url.PathEscape(executionID) + "/signal/" + url.PathEscape(name)
		_, raw, err = c.submit(ctx, path, key, body)
	}
	if err != nil {
		return false, err
	}
	var a SignalResponse
	if err := decode(http.MethodPost, path, raw, &a); err != nil {
		return false, err
	}
	return a.SignalDelivered != nil && *a.SignalDelivered, nil
}

// SignalWithStartOptions describes a signal-with-start: deliver a signal
// to the running execution of WorkflowID, starting one first if there is
// none.
type SignalWithStartOptions struct {
	// WorkflowID is required.
	WorkflowID string
	// Input is the input of the execution, if one starts.
	Input any
	// SignalName is required.
	SignalName    string
	SignalPayload any
	// IdempotencyKey makes the signal land once per key.
	IdempotencyKey string
	ReusePolicy    string
	// TaskQueue is the task queue of the execution, if one starts; empty
	// is the workflow's configured queue, else "default".
	TaskQueue string
	// Versioning, BuildID, Priority and SearchAttributes are as
	// StartOptions', if one starts.
	Versioning       string
	BuildID          string
	Priority         int
	SearchAttributes map[string]any
}

// encodeAttributes encodes search attribute values as JSON, nil for none.
func encodeAttributes(attrs map[string]any) (map[string]json.RawMessage, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(attrs))
	for name, v := range attrs {
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode search attribute %s: %w", name, err)
		}
		out[name] = raw
	}
	return out, nil
}

// optionalInt is v, nil for 0 (absent).
func optionalInt(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}

// SignalWithStartResult is a signal-with-start's answer.
type SignalWithStartResult struct {
	ExecutionID  string
	WorkflowName string
	WorkflowID   string
	Status       string
	// StartedFresh says this call started the execution.
	StartedFresh bool
	// SignalDelivered says this call appended the signal; false for a
	// retry of a key already delivered. When the answer came late (202)
	// and the polled outcome does not say, it is StartedFresh.
	SignalDelivered bool
	// Raw is the server's JSON answer (the polled outcome if late).
	Raw json.RawMessage
}

// SignalWithStart delivers a signal to the running execution of
// opts.WorkflowID, starting one with opts.Input first if none runs.
func (c *Client) SignalWithStart(ctx context.Context, workflow string, opts SignalWithStartOptions) (*SignalWithStartResult, error) {
	switch {
	case workflow == "":
		return nil, errors.New("client: SignalWithStart: workflow name is required")
	case opts.WorkflowID == "":
		return nil, errors.New("client: SignalWithStart: WorkflowID is required")
	case opts.SignalName == "":
		return nil, errors.New("client: SignalWithStart: SignalName is required")
	}
	in, err := encodeJSON(opts.Input)
	if err != nil {
		return nil, fmt.Errorf("client: SignalWithStart: encode input: %w", err)
	}
	payload, err := encodeJSON(opts.SignalPayload)
	if err != nil {
		return nil, fmt.Errorf("client: SignalWithStart: encode signal payload: %w", err)
	}
	attrs, err := encodeAttributes(opts.SearchAttributes)
	if err != nil {
		return nil, fmt.Errorf("client: SignalWithStart: %w", err)
	}
	body, err := json.Marshal(SignalWithStartRequest{WorkflowID: &opts.WorkflowID, Input: in, SignalName: opts.SignalName,
		SignalPayload: payload, ReusePolicy: opts.ReusePolicy, TaskQueue: optional(opts.TaskQueue),
		Versioning: optional(opts.Versioning), BuildID: optional(opts.BuildID), Priority: optionalInt(opts.Priority),
		SearchAttributes: attrs})
	if err != nil {
		return nil, fmt.Errorf("client: SignalWithStart: %w", err)
	}
	path := apiPrefix + "/workflows/" + url.PathEscape(workflow) + "/signal-with-start"
	status, raw, err := c.submit(ctx, path, opts.IdempotencyKey, body)
	if err != nil {
		return nil, err
	}
	var a SignalWithStartResponse
	if err := decode(http.MethodPost, path, raw, &a); err != nil {
		return nil, err
	}
	// A polled outcome recorded as a plain start's answer may lack either
	// flag: StartedFresh then follows the status, SignalDelivered
	// StartedFresh.
	var sent struct {
		StartedFresh    *bool `json:"started_fresh"`
		SignalDelivered *bool `json:"signal_delivered"`
	}
	if err := decode(http.MethodPost, path, raw, &sent); err != nil {
		return nil, err
	}
	r := &SignalWithStartResult{
		ExecutionID: a.ExecutionID, WorkflowName: a.WorkflowName, WorkflowID: a.WorkflowID, Status: a.Status,
		StartedFresh: status == http.StatusCreated, Raw: raw,
	}
	if sent.StartedFresh != nil {
		r.StartedFresh = a.StartedFresh
	}
	r.SignalDelivered = r.StartedFresh
	if sent.SignalDelivered != nil {
		r.SignalDelivered = a.SignalDelivered
	}
	return r, nil
}
