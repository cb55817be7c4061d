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
	// Token is sent as the bearer token of every request
	// (Authorization: Bearer <token>), for an API that requires one;
	// empty sends none.
	Token string
}

// Client talks to one Harvest API. It is safe for concurrent use.
type Client struct {
	base  string
	hc    *http.Client
	token string
}

// Option tunes a Client.
//
// Deprecated: set the field of Config instead; options are structs in
// Harvest's API (CONTRIBUTING.md).
type Option func(*Client)

// WithToken sends token as the bearer token of every request.
//
// Deprecated: use Config{Token: token}.
func WithToken(token string) Option {
	return func(c *Client) { c.token = strings.TrimSpace(token) }
}

// New checks cfg and returns a Client.
func New(cfg Config, opts ...Option) (*Client, error) {
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
	c := &Client{base: strings.TrimRight(u.String(), "/"), hc: hc, token: strings.TrimSpace(cfg.Token)}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// BaseURL is the API address the client talks to, without a trailing
// slash.
func (c *Client) BaseURL() string { return c.base }

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
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
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

// get sends GET path and decodes the answer into v: the one shape of
// every read.
func (c *Client) get(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	return decode(http.MethodGet, path, resp.body, v)
}

// withQuery appends q to path, if q holds anything.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
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
