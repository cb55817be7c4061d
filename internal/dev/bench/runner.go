package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harvest-engine/harvest/client"
)

// maxErrorSamples is how many errors a Result quotes.
const maxErrorSamples = 5

// runner is one run.
type runner struct {
	cfg   Config
	hc    *http.Client
	owned *http.Transport // closed at the end when the runner made it
	api   *client.Client
	runID string
	track *tracker

	submissions int // planned
	submitted   atomic.Int64
	// inFlightTop is the most requests an open-loop run had out at once.
	inFlightTop int
	lastAnswer  atomic.Int64 // unix nanos

	errMu      sync.Mutex
	errCount   int
	errSamples []string
}

func newRunner(cfg Config) (*runner, error) {
	r := &runner{cfg: cfg, hc: cfg.HTTPClient}
	if r.hc == nil {
		t := &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          2*cfg.Concurrency + 16,
			MaxIdleConnsPerHost:   2*cfg.Concurrency + 16,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: time.Minute,
			ForceAttemptHTTP2:     false,
		}
		r.owned = t
		r.hc = &http.Client{Transport: t, Timeout: 2 * time.Minute}
	}
	api, err := client.New(client.Config{BaseURL: cfg.BaseURL, HTTPClient: r.hc, Token: cfg.Token})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r.api = api
	var id [4]byte
	_, _ = rand.Read(id[:]) // never fails, per crypto/rand
	r.runID = hex.EncodeToString(id[:])
	return r, nil
}

func (r *runner) close() {
	if r.owned != nil {
		r.owned.CloseIdleConnections()
	}
}

// fail records one error.
func (r *runner) fail(err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	r.errCount++
	if len(r.errSamples) < maxErrorSamples {
		r.errSamples = append(r.errSamples, err.Error())
	}
}

// answer is one request's answer.
type answer struct {
	status  int
	body    []byte
	at      time.Time     // when it was sent
	latency time.Duration // of the call itself, without polling a 202
}

// accepted is a 202 that names a command whose outcome came too late.
type accepted struct {
	CommandID string `json:"command_id"`
	Status    string `json:"status"`
}

// submit posts body to path with an Idempotency-Key. A 202 naming a
// command is followed by polling the command until it is applied, and
// the answer is then the command's outcome. Transport errors and non-2xx
// answers are errors.
func (r *runner) submit(ctx context.Context, path, key string, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, fmt.Errorf("POST %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	a := answer{at: time.Now()}
	resp, err := r.hc.Do(req)
	if err != nil {
		return a, fmt.Errorf("POST %s: %w", path, err)
	}
	a.body, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	a.latency = time.Since(a.at)
	a.status = resp.StatusCode
	r.submitted.Add(1)
	r.lastAnswer.Store(time.Now().UnixNano())
	if err != nil {
		return a, fmt.Errorf("POST %s: read the answer: %w", path, err)
	}
	if a.status/100 != 2 {
		return a, fmt.Errorf("POST %s: %d %s", path, a.status, bytes.TrimSpace(a.body))
	}
	var acc accepted
	if a.status == http.StatusAccepted && json.Unmarshal(a.body, &acc) == nil && acc.CommandID != "" && acc.Status == "accepted" {
		status, outcome, err := r.awaitCommand(ctx, acc.CommandID)
		if err != nil {
			return a, fmt.Errorf("POST %s: command %s: %w", path, acc.CommandID, err)
		}
		a.status, a.body = status, outcome
		if status/100 != 2 {
			return a, fmt.Errorf("POST %s: command %s: %d %s", path, acc.CommandID, status, bytes.TrimSpace(outcome))
		}
	}
	return a, nil
}

// awaitCommand polls a command until it is applied.
func (r *runner) awaitCommand(ctx context.Context, commandID string) (int, []byte, error) {
	deadline := time.Now().Add(r.cfg.StallTimeout)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		c, err := r.api.Command(ctx, commandID)
		switch {
		case err == nil && c.Applied:
			return c.HTTPStatus, c.Outcome, nil
		case err != nil && !errors.Is(err, client.ErrNotFound):
			return 0, nil, err
		case time.Now().After(deadline):
			return 0, nil, fmt.Errorf("not applied within %s", r.cfg.StallTimeout)
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-t.C:
		}
	}
}

// startAnswer is what a start's answer says.
type startAnswer struct {
	ExecutionID  string `json:"execution_id"`
	Deduplicated bool   `json:"deduplicated"`
}

// start starts workflow with input under key.
func (r *runner) start(ctx context.Context, workflow, key string, input any) (answer, startAnswer, error) {
	body, err := json.Marshal(map[string]any{"input": input})
	if err != nil {
		return answer{}, startAnswer{}, err
	}
	a, err := r.submit(ctx, "/api/harvest/workflows/"+url.PathEscape(workflow)+"/start", key, body)
	if err != nil {
		return a, startAnswer{}, err
	}
	var s startAnswer
	if err := json.Unmarshal(a.body, &s); err != nil || s.ExecutionID == "" {
		return a, s, fmt.Errorf("start %s: answer without an execution_id: %s", workflow, a.body)
	}
	return a, s, nil
}

// signal sends a keyed signal; delivered is false when the answer says it
// had already landed.
func (r *runner) signal(ctx context.Context, executionID, name, key string, payload any) (answer, bool, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		return answer{}, false, err
	}
	a, err := r.submit(ctx, "/api/harvest/executions/"+url.PathEscape(executionID)+"/signals/"+url.PathEscape(name), key, body)
	if err != nil {
		return a, false, err
	}
	var s struct {
		SignalDelivered *bool `json:"signal_delivered"`
	}
	if err := json.Unmarshal(a.body, &s); err != nil || s.SignalDelivered == nil {
		return a, false, fmt.Errorf("signal %s: answer without signal_delivered: %s", name, a.body)
	}
	return a, *s.SignalDelivered, nil
}

// reportProgress calls cfg.Progress about ten times a second until stop
// is closed, then once more.
func (r *runner) reportProgress(stop <-chan struct{}) {
	if r.cfg.Progress == nil {
		return
	}
	report := func() {
		r.cfg.Progress(Progress{
			Workload: r.cfg.Workload, Submitted: int(r.submitted.Load()), Submissions: r.submissions,
			Completed: r.track.closedCount(), Expected: r.cfg.N,
		})
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			report()
			return
		case <-t.C:
			report()
		}
	}
}
