// Package client is a Go client for Harvest's HTTP API: start workflows
// (keyed starts are idempotent), send signals (keyed signals land once),
// signal-with-start, and read executions and their history.
//
//	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:8080"})
//	run, err := c.Start(ctx, "charge", in, client.StartOptions{IdempotencyKey: "evt-123"})
//	var out ChargeResult
//	_, err = c.WaitResult(ctx, run.ExecutionID, &out)
//
// Every method takes a context, which bounds the call and any polling it
// does. When the server answers 202 (the command is durable but its
// outcome is not known yet), Start, SendSignal, SendSignalIdempotent and
// SignalWithStart poll the command until it is applied; if ctx ends first
// they return a *PendingError naming the command.
//
// Errors the API answers are *APIError values; errors.Is(err, ErrNotFound)
// and errors.Is(err, ErrConflict) test for 404 and 409. WaitResult returns
// an *ExecutionFailedError when the execution closes other than Completed.
//
// The package depends on the standard library only; typed signals
// (harvest.Signal[T].Send) are built on it in the harvest package.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout is the timeout of the HTTP client New makes when
// Config.HTTPClient is nil. It bounds each request, not the polling.
const DefaultTimeout = 30 * time.Second

// maxResponseBytes caps the answers the client reads.
const maxResponseBytes = 64 << 20

// Config configures a Client.
type Config struct {
	// BaseURL is the API's address, such as "http://127.0.0.1:8080"; a
	// bare host:port means http.
	BaseURL string
	// HTTPClient sends the requests; nil means a client with a 30 s
	// timeout on http.DefaultTransport.
	HTTPClient *http.Client
}

// Client talks to one Harvest API. It is safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	base := strings.TrimSpace(cfg.BaseURL)
	if base == "" {
		return nil, errors.New("client: BaseURL is required")
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("client: BaseURL %q: %w", cfg.BaseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("client: BaseURL %q: want an http or https URL", cfg.BaseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("client: BaseURL %q has no host", cfg.BaseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: BaseURL %q: want no query or fragment", cfg.BaseURL)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), hc: hc}, nil
}

// BaseURL is the API address the client talks to, without a trailing
// slash.
func (c *Client) BaseURL() string { return c.base }

// Sentinels for errors.Is on an *APIError.
var (
	// ErrNotFound matches every 404 answer: execution_not_found,
	// command_not_found, not_found.
	ErrNotFound = errors.New("not found")
	// ErrConflict matches every 409 answer: execution_terminal,
	// workflow_id_conflict.
	ErrConflict = errors.New("conflict")
)

// APIError is an error answer of the API.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the machine-readable code ("execution_not_found"); empty if
	// the answer was not the API's JSON error.
	Code string
	// Message is the API's explanation.
	Message string
	// Field names the request field at fault, when there is one.
	Field string
	// Pointer is the JSON Pointer, within the request body, of a value
	// Harvest cannot store (400 payload_unstorable and the invalid_*
	// codes of string members that hold one).
	Pointer string
	// Violations lists what is wrong with an input that fails its
	// workflow's schema (422 input_invalid).
	Violations []Violation
	// RetryAfter is the answer's Retry-After, zero if it had none.
	RetryAfter time.Duration
}

// Violation is one way an input fails its workflow's JSON Schema.
type Violation struct {
	// Field is the JSON Pointer of the offending value.
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d: %s", e.StatusCode, e.Message)
	}
	return e.Code + ": " + e.Message
}

// Is makes errors.Is(err, ErrNotFound) and errors.Is(err, ErrConflict)
// work.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrConflict:
		return e.StatusCode == http.StatusConflict
	}
	return false
}

// errorBody is the JSON of an error answer.
type errorBody struct {
	Error      string      `json:"error"`
	Message    string      `json:"message"`
	Field      string      `json:"field"`
	Pointer    string      `json:"pointer"`
	Violations []Violation `json:"violations"`
}

// apiErrorFrom builds the APIError of a non-2xx answer.
func apiErrorFrom(status int, header http.Header, raw []byte) *APIError {
	e := &APIError{StatusCode: status}
	var body errorBody
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		e.Code, e.Message, e.Field, e.Pointer, e.Violations = body.Error, body.Message, body.Field, body.Pointer, body.Violations
	} else {
		e.Message = http.StatusText(status)
		if text := strings.TrimSpace(string(raw)); text != "" {
			if len(text) > 200 {
				text = text[:200] + "…"
			}
			e.Message += ": " + text
		}
	}
	if header != nil {
		if secs, err := strconv.Atoi(header.Get("Retry-After")); err == nil && secs > 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	return e
}

// PendingError says the server accepted a command durably but ctx ended
// before its outcome was known. The command will still be applied; poll
// it with Command, or retry the call with the same idempotency key.
type PendingError struct {
	CommandID string
	Err       error // why the wait ended: ctx.Err()
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("command %s accepted, outcome not known yet: %v", e.CommandID, e.Err)
}

func (e *PendingError) Unwrap() error { return e.Err }

// ExecutionFailedError is what WaitResult returns for an execution that
// closed as Failed, Cancelled, Terminated or TimedOut.
type ExecutionFailedError struct {
	ExecutionID  string
	WorkflowName string
	// Status is the execution's terminal status.
	Status string
	// Message and Type come from the execution's error, when it has one.
	Message string
	Type    string
	// Failure is the execution's error as stored, null if none.
	Failure json.RawMessage
}

func (e *ExecutionFailedError) Error() string {
	msg := fmt.Sprintf("execution %s (%s) %s", e.ExecutionID, e.WorkflowName, e.Status)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// response is an answer read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// encodeJSON encodes v for a request body: nil is no body, a
// json.RawMessage is sent as it is (after a validity check).
func encodeJSON(v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if v == nil {
			return []byte("null"), nil
		}
		if !json.Valid(v) {
			return nil, errors.New("client: json.RawMessage is not valid JSON")
		}
		return v, nil
	}
	return json.Marshal(v)
}

// do sends one request and reads its answer; non-2xx answers are
// *APIError.
func (c *Client) do(ctx context.Context, method, path string, header http.Header, body []byte) (*response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, apiErrorFrom(resp.StatusCode, resp.Header, raw)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: raw}, nil
}

func decode(method, path string, raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("client: %s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// Poll intervals: polling starts at minPoll and doubles up to maxPoll.
const (
	minPoll = 50 * time.Millisecond
	maxPoll = time.Second
)

// poll calls fn until it reports done or fails, waiting minPoll, doubling
// up to maxPoll, between calls; ctx bounds the whole.
func poll(ctx context.Context, fn func() (done bool, err error)) error {
	delay := minPoll
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		done, err := fn()
		if err != nil || done {
			return err
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		delay = min(delay*2, maxPoll)
	}
}

// transient reports whether a polled read may succeed if tried again.
func transient(err error) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusServiceUnavailable || apiErr.StatusCode == http.StatusTooManyRequests)
}
