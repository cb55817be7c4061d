// Package ingest is Harvest's front door: the HTTP API that turns start
// requests into commands on the command stream, waits a bounded time for
// their outcome, and serves executions and their history. Accepting a
// command never touches PostgreSQL; reads do.
package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harvest-engine/harvest/dedup"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/streams"
	"github.com/harvest-engine/harvest/internal/webhook"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Defaults for Config's zero values.
const (
	DefaultOutcomeWait  = 5 * time.Second
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxStartDelay bounds delay and start_at.
	DefaultMaxStartDelay = 30 * 24 * time.Hour
	// DefaultShardFailingAfter is how long a shard's applies keep failing
	// before /readyz reports it.
	DefaultShardFailingAfter = 10 * time.Second
	// DefaultPublishTimeout bounds a command's publish before a 503.
	DefaultPublishTimeout = 5 * time.Second
	// admissionRetryAfter is the Retry-After of a start refused by a
	// closed admission gate, in seconds.
	admissionRetryAfter = "30"
	maxWorkflowIDBytes  = 256
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	Topology *streams.Topology
	// NC is the connection outcomes are received on.
	NC *nats.Conn
	// DB serves the read endpoints and command outcomes; ingest never
	// writes it. Nil makes the read endpoints answer 503, and a start
	// learns its outcome only from the scheduler's announcement.
	DB *pgxpool.Pool
	// OutcomeWait bounds how long a start waits for its outcome before it
	// answers 202 with a command id to poll, default 5 s.
	OutcomeWait time.Duration
	// MaxBodyBytes caps request bodies, default 1 MiB.
	MaxBodyBytes int64
	// PublishTimeout bounds how long a command's publish may try before
	// the request is answered 503 with Retry-After (JetStream down or
	// unreachable), default 5 s.
	PublishTimeout time.Duration
	// MaxStartDelay bounds how far ahead delay or start_at may put a
	// start, default 30 days.
	MaxStartDelay time.Duration
	// CallbackPolicy decides which completion_callback targets are
	// accepted: public addresses only, unless allow-listed.
	CallbackPolicy callback.Policy
	// IdempotencyFingerprint is "reject" to refuse a keyed retry whose
	// input differs from the original's (422 idempotency_key_reused), or
	// "ignore" (the default) to answer it with the original execution.
	IdempotencyFingerprint string
	// FingerprintByWorkflow overrides IdempotencyFingerprint per workflow.
	FingerprintByWorkflow map[string]string
	// Webhooks are the sources POST /hooks/{source} accepts.
	Webhooks []webhook.Endpoint
	// ArcFlowSecrets, when set, make POST /v1/runs/{run_id}/external/{binding_id}
	// require X-ArcFlow-Signature: sha256=<hex HMAC-SHA256 of the body>
	// under one of them (several, for rotation).
	ArcFlowSecrets []string
	// ShardFailingAfter is how long a shard's applies must have kept
	// failing before /readyz answers 503 for it, default 10 s.
	ShardFailingAfter time.Duration
	// Metrics is the registry ingest's counters go to and /metrics
	// serves; default a fresh one.
	Metrics *prometheus.Registry
	Logger  *slog.Logger
}

func (c Config) rejectsFingerprintMismatch(workflow string) bool {
	if mode, ok := c.FingerprintByWorkflow[workflow]; ok {
		return mode == FingerprintReject
	}
	return c.IdempotencyFingerprint == FingerprintReject
}

// Fingerprint modes.
const (
	FingerprintIgnore = "ignore"
	FingerprintReject = "reject"
)

func (c Config) withDefaults() Config {
	if c.OutcomeWait == 0 {
		c.OutcomeWait = DefaultOutcomeWait
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.MaxStartDelay == 0 {
		c.MaxStartDelay = DefaultMaxStartDelay
	}
	if c.ShardFailingAfter == 0 {
		c.ShardFailingAfter = DefaultShardFailingAfter
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Topology == nil:
		return errors.New("ingest config: Topology is required")
	case c.NC == nil:
		return errors.New("ingest config: NC is required")
	case c.OutcomeWait < 0:
		return fmt.Errorf("ingest config: OutcomeWait %s: want a positive duration", c.OutcomeWait)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("ingest config: MaxBodyBytes %d: want a positive size", c.MaxBodyBytes)
	}
	seen := map[string]bool{}
	for _, e := range c.Webhooks {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("ingest config: %w", err)
		}
		if seen[e.Name] {
			return fmt.Errorf("ingest config: webhook source %q is declared twice", e.Name)
		}
		seen[e.Name] = true
	}
	modes := map[string]string{"": c.IdempotencyFingerprint}
	for w, m := range c.FingerprintByWorkflow {
		modes[w] = m
	}
	for w, m := range modes {
		if m != "" && m != FingerprintIgnore && m != FingerprintReject {
			return fmt.Errorf("ingest config: idempotency_fingerprint %q (workflow %q): want ignore or reject", m, w)
		}
	}
	return nil
}

// Server serves Harvest's HTTP API.
type Server struct {
	cfg       Config
	log       *slog.Logger
	waiters   *outcomeWaiters
	sub       *nats.Subscription
	mux       *http.ServeMux
	metrics   *metrics
	admission *mirror[gate]
	schemas   *mirror[*schema.Schema]
	hooks     map[string]webhook.Endpoint
	// hookSchemas are the compiled payload schemas of the sources that
	// declare one.
	hookSchemas map[string]*schema.Schema
}

// New checks cfg and returns a Server; Start subscribes to outcomes.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("ingest metrics: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, waiters: newOutcomeWaiters(), mux: http.NewServeMux(), metrics: m,
		admission: newMirror(cfg.Topology.Admission, cfg.Logger, decodeGate),
		schemas:   newMirror(cfg.Topology.Schemas, cfg.Logger, schema.Compile)}
	s.hooks, s.hookSchemas = map[string]webhook.Endpoint{}, map[string]*schema.Schema{}
	for _, e := range cfg.Webhooks {
		s.hooks[e.Name] = e
		sch, err := e.CompileSchema()
		if err != nil {
			return nil, err
		}
		if sch != nil {
			s.hookSchemas[e.Name] = sch
		}
		if e.Kind == webhook.KindNone {
			s.log.Warn("webhook source accepts unsigned deliveries", "source", e.Name)
		}
	}
	s.mux.HandleFunc("POST /hooks/{source}", s.handleHook)
	s.mux.HandleFunc("POST /api/harvest/admission/{workflow}/close", s.handleAdmissionClose)
	s.mux.HandleFunc("POST /api/harvest/admission/{workflow}/open", s.handleAdmissionOpen)
	s.mux.HandleFunc("GET /api/harvest/admission", s.handleAdmissionList)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("POST /api/harvest/workflows/{name}/start", s.handleStart)
	s.mux.HandleFunc("POST /api/harvest/workflows/{execution_id}/signal/{signal_name}", s.handleSignal)
	s.mux.HandleFunc("POST /api/harvest/workflows/{name}/signal-with-start", s.handleSignalWithStart)
	s.mux.HandleFunc("POST /v1/runs", s.handleCreateRun)
	s.mux.HandleFunc("POST /v1/runs/{run_id}/external/{binding_id}", s.handleRunExternal)
	s.mux.HandleFunc("GET /api/harvest/executions", s.handleListExecutions)
	s.mux.HandleFunc("POST /api/harvest/executions/{execution_id}/cancel", s.handleCancel)
	s.mux.HandleFunc("GET /api/harvest/executions/{execution_id}", s.handleGetExecution)
	s.mux.HandleFunc("GET /api/harvest/executions/{execution_id}/history", s.handleGetHistory)
	s.mux.HandleFunc("GET /api/harvest/commands/{command_id}", s.handleGetCommand)
	s.mux.HandleFunc("GET /api/harvest/commands/dead", s.handleListDead)
	s.mux.HandleFunc("GET /api/harvest/commands/dead/{id}", s.handleGetDead)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return s, nil
}

// Start subscribes to command outcomes and admission gates.
func (s *Server) Start(ctx context.Context) error {
	if err := s.admission.start(ctx); err != nil {
		return err
	}
	if err := s.schemas.start(ctx); err != nil {
		s.admission.close()
		return err
	}
	sub, err := s.cfg.NC.Subscribe(streams.OutcomeSubjects, s.waiters.deliver)
	if err != nil {
		return fmt.Errorf("subscribe to outcomes: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return fmt.Errorf("subscribe to outcomes: %w", err)
	}
	s.sub = sub
	return nil
}

// Stop ends the outcome subscription. Safe to call twice.
func (s *Server) Stop(_ context.Context) error {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	s.admission.close()
	s.schemas.close()
	return nil
}

// Handler is the API's http.Handler.
func (s *Server) Handler() http.Handler { return s.mux }

// startRequest is the body of a start.
type startRequest struct {
	Input          json.RawMessage `json:"input"`
	WorkflowID     *string         `json:"workflow_id"`
	IdempotencyKey *string         `json:"idempotency_key"`
	ReusePolicy    string          `json:"reuse_policy"`
	Delay          *string         `json:"delay"`
	StartAt        *string         `json:"start_at"`
	// CompletionCallback is an http(s) URL the outcome is POSTed to when
	// the execution closes.
	CompletionCallback *string `json:"completion_callback"`
}

// startResponse answers a start.
type startResponse struct {
	ExecutionID  string     `json:"execution_id"`
	WorkflowName string     `json:"workflow_name"`
	WorkflowID   string     `json:"workflow_id"`
	Status       string     `json:"status"`
	StartedFresh *bool      `json:"started_fresh,omitempty"`
	Deduplicated *bool      `json:"deduplicated,omitempty"`
	FirstSeenAt  *time.Time `json:"first_seen_at,omitempty"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
}

type acceptedResponse struct {
	CommandID string `json:"command_id"`
	Status    string `json:"status"`
}

// rejection is an answer that refuses a start, unless the start is a
// replay of a committed keyed start.
type rejection struct {
	status     int
	body       apiError
	retryAfter string
}

func reject(status int, code, field, message string) *rejection {
	return &rejection{status: status, body: apiError{Error: code, Message: message, Field: field}}
}

// parsedStart is a start request that passed every check of its own.
type parsedStart struct {
	name       string
	key        string
	workflowID string
	startAt    *time.Time
	req        startRequest
}

// parseStart reads and checks a start request. It returns the key it
// found (from the header, or else the body) even when it rejects the
// request, so a replay of a committed keyed start can still be answered.
func (s *Server) parseStart(w http.ResponseWriter, r *http.Request) (p parsedStart, keyErr error, rej *rejection) {
	p.name = r.PathValue("name")
	if vals, ok := r.Header[http.CanonicalHeaderKey("Idempotency-Key")]; ok {
		// The header wins over the body field, and is honoured even when
		// the body does not parse.
		if p.key, keyErr = dedup.ValidateKey(strings.Join(vals, ",")); keyErr != nil {
			return p, keyErr, nil
		}
	}
	if err := dedup.ValidateName(p.name); err != nil {
		return p, nil, reject(http.StatusBadRequest, "invalid_workflow_name", "name", err.Error())
	}
	body, rej := s.readBody(w, r)
	if rej != nil {
		return p, nil, rej
	}
	if len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&p.req); err != nil {
			return p, nil, reject(http.StatusBadRequest, "invalid_json", "", fmt.Sprintf("request body is not a JSON object: %v", err))
		}
		if dec.More() {
			return p, nil, reject(http.StatusBadRequest, "invalid_json", "", "request body holds more than one JSON value")
		}
	}
	var unstorable *rejection
	if len(body) > 0 {
		if unstorable = unstorableBody(body, startMembers); unstorable != nil && p.key == "" {
			if keyErr = unstorableKey(body); keyErr != nil {
				return p, keyErr, nil
			}
		}
	}
	if p.key == "" && p.req.IdempotencyKey != nil {
		if p.key, keyErr = dedup.ValidateKey(*p.req.IdempotencyKey); keyErr != nil {
			return p, keyErr, nil
		}
	}
	if unstorable != nil {
		return p, nil, unstorable
	}
	return p, nil, s.checkStart(r.Context(), &p)
}

// checkStart checks a decoded start request's fields, the workflow's input
// schema and its admission gate.
func (s *Server) checkStart(ctx context.Context, p *parsedStart) (rej *rejection) {
	if p.req.WorkflowID != nil {
		p.workflowID = *p.req.WorkflowID
		if strings.TrimSpace(p.workflowID) == "" || len(p.workflowID) > maxWorkflowIDBytes {
			return reject(http.StatusBadRequest, "invalid_workflow_id", "workflow_id",
				fmt.Sprintf("workflow_id must be 1 to %d bytes and not blank", maxWorkflowIDBytes))
		}
		if err := storable.CheckIdentifier(p.workflowID); err != nil {
			return reject(http.StatusBadRequest, "invalid_workflow_id", "workflow_id", "workflow_id "+err.Error())
		}
	}
	if !wire.ValidReusePolicy(p.req.ReusePolicy) {
		return reject(http.StatusBadRequest, "invalid_reuse_policy", "reuse_policy",
			fmt.Sprintf("reuse_policy %q: want allow_duplicate, allow_duplicate_failed_only, reject_duplicate or terminate_if_running", p.req.ReusePolicy))
	}
	if p.startAt, rej = s.parseSchedule(p.req); rej != nil {
		return rej
	}
	if len(p.req.Input) == 0 {
		p.req.Input = nil
	}
	if p.req.CompletionCallback != nil {
		if rej := s.checkCallback(ctx, *p.req.CompletionCallback); rej != nil {
			return rej
		}
	}
	if sch, ok := s.schemas.get(p.name); ok {
		if violations := sch.Validate(p.req.Input); len(violations) > 0 {
			rej := reject(http.StatusUnprocessableEntity, "input_invalid", "input",
				fmt.Sprintf("input does not match the schema of %s: %s at %q", p.name, violations[0].Message, violations[0].Field))
			rej.body.Violations = violations
			return rej
		}
	}
	if g, closed := s.admission.get(p.name); closed {
		rej := reject(http.StatusServiceUnavailable, "admission_blocked", "",
			fmt.Sprintf("starts of %s are paused since %s: %s", p.name, g.ClosedAt.Format(time.RFC3339), g.Reason))
		rej.retryAfter = admissionRetryAfter
		return rej
	}
	return nil
}

// checkCallback vets a completion_callback target: it must resolve to
// public addresses unless its host is allow-listed.
func (s *Server) checkCallback(ctx context.Context, target string) *rejection {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.cfg.CallbackPolicy.Validate(ctx, target)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, callback.ErrRejected):
		return reject(http.StatusUnprocessableEntity, "callback_rejected", "completion_callback", err.Error())
	default:
		rej := reject(http.StatusServiceUnavailable, "callback_unverifiable", "completion_callback",
			fmt.Sprintf("could not check the completion_callback target; retry: %v", err))
		rej.retryAfter = "5"
		return rej
	}
}

// parseSchedule reads delay or start_at into the time the first workflow
// task may run; nil means now.
func (s *Server) parseSchedule(req startRequest) (*time.Time, *rejection) {
	now := time.Now().UTC()
	limit := now.Add(s.cfg.MaxStartDelay)
	switch {
	case req.Delay != nil && req.StartAt != nil:
		return nil, reject(http.StatusBadRequest, "invalid_schedule", "delay", "give delay or start_at, not both")
	case req.Delay != nil:
		d, err := time.ParseDuration(*req.Delay)
		if err != nil {
			return nil, reject(http.StatusBadRequest, "invalid_delay", "delay", fmt.Sprintf("delay %q: want a duration such as \"10s\" or \"1h30m\"", *req.Delay))
		}
		if d < 0 {
			return nil, reject(http.StatusBadRequest, "invalid_delay", "delay", fmt.Sprintf("delay %s is negative", d))
		}
		if d > s.cfg.MaxStartDelay {
			return nil, reject(http.StatusBadRequest, "invalid_delay", "delay", fmt.Sprintf("delay %s is beyond the maximum of %s", d, s.cfg.MaxStartDelay))
		}
		at := now.Add(d)
		return &at, nil
	case req.StartAt != nil:
		at, err := time.Parse(time.RFC3339Nano, *req.StartAt)
		if err != nil {
			return nil, reject(http.StatusBadRequest, "invalid_start_at", "start_at", fmt.Sprintf("start_at %q: want an RFC 3339 time such as \"2026-12-24T18:00:00Z\"", *req.StartAt))
		}
		if at.After(limit) {
			return nil, reject(http.StatusBadRequest, "invalid_start_at", "start_at", fmt.Sprintf("start_at %s is beyond the maximum of %s ahead", at.Format(time.RFC3339), s.cfg.MaxStartDelay))
		}
		at = at.UTC()
		return &at, nil
	}
	return nil, nil
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	p, keyErr, rej := s.parseStart(w, r)
	if keyErr != nil {
		s.metrics.starts.WithLabelValues("refused").Inc()
		writeFieldError(w, http.StatusBadRequest, "invalid_idempotency_key", "idempotency_key", keyErr.Error())
		return
	}
	var status int
	var body any
	if rej != nil {
		status, body = s.refuseOrReplay(w, r, p, rej)
	} else {
		status, body = s.start(r.Context(), p)
	}
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

// start publishes a checked start and answers it.
func (s *Server) start(ctx context.Context, p parsedStart) (int, any) {
	shards := s.cfg.Topology.Shards()
	shard := dedup.StartShard(shards, p.name, p.workflowID, p.key)
	minted := false
	if p.workflowID == "" {
		p.workflowID, minted = dedup.MintWorkflowID(shards, shard, p.name), true
	}
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: p.name, WorkflowID: p.workflowID, WorkflowIDMinted: minted, Input: p.req.Input,
		TaskQueue: wire.DefaultTaskQueue, ReusePolicy: p.req.ReusePolicy, StartAt: p.startAt, AcceptedAt: time.Now().UTC(),
	}}
	if p.req.CompletionCallback != nil {
		cmd.Start.CompletionCallback = *p.req.CompletionCallback
	}
	if p.key != "" {
		cmd.CommandID = dedup.StartCommandID(p.name, p.key)
		cmd.Start.IdempotencyKey = p.key
		cmd.Start.Fingerprint = dedup.Fingerprint(p.req.Input)
		cmd.Start.RejectFingerprintMismatch = s.cfg.rejectsFingerprintMismatch(p.name)
	}
	return s.publishStart(ctx, shard, cmd, cmd.CommandID, true)
}

// publishStart publishes a start and answers it from its outcome, or with
// 202 when the outcome does not come within OutcomeWait. A broker
// duplicate is answered from the original's outcome, checked against the
// claim in PostgreSQL; if that claim has expired, the start is published
// once more under a message id derived from the original's sequence, so
// concurrent retries still collapse.
func (s *Server) publishStart(ctx context.Context, shard int, cmd *wire.Command, msgID string, mayRepublish bool) (int, any) {
	out, duplicate, err := s.submit(ctx, shard, cmd, msgID)
	if errors.Is(err, errNotAccepted) {
		return notAccepted(err, "start")
	}
	if errors.Is(err, errOutcomeLate) {
		s.metrics.starts.WithLabelValues("accepted").Inc()
		return http.StatusAccepted, acceptedResponse{CommandID: cmd.CommandID, Status: "accepted"}
	}
	if !duplicate {
		if out.Deduplicated {
			s.metrics.duplicates.WithLabelValues("claim").Inc()
			s.withClaim(ctx, cmd.Start, &out)
		}
		s.metrics.starts.WithLabelValues(startResult(out)).Inc()
		return startAnswer(out)
	}
	// The broker dropped this start as a duplicate of one it holds; out is
	// the newest outcome for the key. It answers the retry unless it was a
	// refusal or its claim has lapsed since: then the start is evaluated
	// anew, under a message id derived from that outcome, so concurrent
	// retries still collapse into one message.
	var claim *store.Claim
	if out.Error == "" {
		claim = s.withClaim(ctx, cmd.Start, &out)
	}
	if mayRepublish && (out.Error != "" || (claim == nil && s.cfg.DB != nil)) {
		return s.publishStart(ctx, shard, cmd, fmt.Sprintf("%s/%d", cmd.CommandID, out.StreamSeq), false)
	}
	if out.Error == "" {
		if claim != nil && cmd.Start.RejectFingerprintMismatch && claim.Fingerprint != "" && claim.Fingerprint != cmd.Start.Fingerprint {
			s.metrics.starts.WithLabelValues("refused").Inc()
			return http.StatusUnprocessableEntity, apiError{Error: "idempotency_key_reused",
				Message: fmt.Sprintf("idempotency key %q was first used with a different input", cmd.Start.IdempotencyKey)}
		}
		out.StartedFresh, out.Deduplicated = false, true
	}
	s.metrics.starts.WithLabelValues(startResult(out)).Inc()
	return startAnswer(out)
}

// withClaim brings a replayed start's answer up to date from the claim in
// PostgreSQL (the execution's current status, the claim's window) and
// returns the claim; nil if it has lapsed or cannot be read (then the
// answer stands as recorded).
func (s *Server) withClaim(ctx context.Context, st *wire.StartCommand, out *wire.Outcome) *store.Claim {
	if s.cfg.DB == nil || st.IdempotencyKey == "" {
		return nil
	}
	claim, e, err := s.liveClaim(ctx, st)
	if err != nil {
		s.log.Warn("read claim", "workflow", st.WorkflowName, "idempotency_key", st.IdempotencyKey, "err", err)
		return nil
	}
	if claim != nil {
		out.ExecutionID, out.WorkflowName, out.WorkflowID, out.Status = e.ExecutionID, e.WorkflowName, e.WorkflowID, e.Status
		out.FirstSeenAt, out.ExpiresAt = &claim.CreatedAt, &claim.ExpiresAt
	}
	return claim
}

// notAccepted answers a command the command stream did not take: 413
// command_too_large when it is larger than NATS carries (retrying cannot
// help), else 503 unavailable (JetStream down or unreachable: retry).
func notAccepted(err error, what string) (int, apiError) {
	var big *streams.TooLargeError
	if errors.As(err, &big) {
		return http.StatusRequestEntityTooLarge, apiError{Error: "command_too_large", Limit: big.Limit,
			Message: fmt.Sprintf("the %s, encoded as a command, is %d bytes: more than the %d the command stream carries", what, big.Size, big.Limit)}
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return http.StatusRequestEntityTooLarge, apiError{Error: "command_too_large",
			Message: fmt.Sprintf("the %s, encoded as a command, is larger than the command stream carries", what)}
	}
	return http.StatusServiceUnavailable, apiError{Error: "unavailable", Message: fmt.Sprintf("the command stream did not accept the %s; retry", what)}
}

var (
	// errNotAccepted: the command stream did not take the command.
	errNotAccepted = errors.New("command not accepted")
	// errOutcomeLate: the command is durable, its outcome not known yet.
	errOutcomeLate = errors.New("outcome not known yet")
)

// submit publishes cmd under msgID and waits, up to OutcomeWait, for its
// outcome. duplicate says the broker already held a message with the id;
// out is then the newest outcome of the command id. errOutcomeLate means
// the command is accepted and its outcome can be polled.
func (s *Server) submit(ctx context.Context, shard int, cmd *wire.Command, msgID string) (out wire.Outcome, duplicate bool, err error) {
	outcomes, stopWaiting := s.waiters.wait(cmd.CommandID)
	defer stopWaiting()
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	ack, err := s.publishCommand(pctx, shard, cmd, msgID)
	cancel()
	if err != nil {
		s.log.Warn("command not accepted", "kind", cmd.Kind, "err", err)
		return out, false, fmt.Errorf("%w: %w", errNotAccepted, err)
	}
	if ack.Duplicate {
		s.metrics.duplicates.WithLabelValues("broker").Inc()
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.OutcomeWait)
	defer cancel()
	out, ok := s.awaitOutcome(wctx, cmd.CommandID, ack.Sequence, ack.Duplicate, outcomes)
	if !ok {
		s.markPending(cmd.CommandID)
		return out, ack.Duplicate, errOutcomeLate
	}
	return out, ack.Duplicate, nil
}

// publishCommand publishes cmd under msgID. When the broker answers that
// it holds the id already, and the message it names has left the command
// stream without an outcome, the command was lost unapplied (the stream
// only lets a command go once the transaction that applied it and stored
// its outcome has committed): it is published again, under an id derived
// from the lost message's sequence, so that concurrent retries collapse
// into one message and the broker's duplicate window does not swallow the
// key's retries. The claims in PostgreSQL keep it to one execution.
func (s *Server) publishCommand(ctx context.Context, shard int, cmd *wire.Command, msgID string) (*jetstream.PubAck, error) {
	ack, err := s.cfg.Topology.PublishCommandAs(ctx, shard, cmd, msgID)
	if err != nil || !ack.Duplicate || s.cfg.DB == nil {
		return ack, err
	}
	lost, err := s.lost(ctx, cmd.CommandID, ack.Sequence)
	if err != nil {
		s.log.Debug("tell a lost command from a pending one", "command_id", cmd.CommandID, "err", err)
		return ack, nil
	}
	if !lost {
		return ack, nil
	}
	s.log.Warn("a command accepted earlier left the command stream unapplied: accepting it again",
		"command_id", cmd.CommandID, "kind", cmd.Kind, "stream_seq", ack.Sequence)
	s.metrics.lost.Inc()
	return s.cfg.Topology.PublishCommandAs(ctx, shard, cmd, fmt.Sprintf("%s/lost/%d", msgID, ack.Sequence))
}

// lost says whether the command whose message was at seq left the stream
// without being applied.
func (s *Server) lost(ctx context.Context, commandID string, seq uint64) (bool, error) {
	gone, err := s.cfg.Topology.CommandGone(ctx, seq)
	if err != nil || !gone {
		return false, err
	}
	// Read after the message was seen gone: the outcome committed before
	// the scheduler acknowledged it.
	out, ok, err := store.GetOutcome(ctx, s.cfg.DB, commandID)
	if err != nil {
		return false, err
	}
	return !ok || out.StreamSeq < seq, nil
}

func (s *Server) liveClaim(ctx context.Context, st *wire.StartCommand) (*store.Claim, *store.Execution, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return store.LiveClaim(ctx, s.cfg.DB, store.ClaimRef{WorkflowName: st.WorkflowName, IdempotencyKey: st.IdempotencyKey})
}

// refuseOrReplay answers a start that fails its own checks: with the
// original execution if its key names a committed claim (a keyed replay
// short-circuits every check), else with the rejection. It sets
// Retry-After on w when the answer asks for a retry.
func (s *Server) refuseOrReplay(w http.ResponseWriter, r *http.Request, p parsedStart, rej *rejection) (int, any) {
	if p.key != "" && s.cfg.DB != nil && p.name != "" && dedup.ValidateName(p.name) == nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		claim, e, err := store.LiveClaim(ctx, s.cfg.DB, store.ClaimRef{WorkflowName: p.name, IdempotencyKey: p.key})
		if err != nil {
			s.log.Warn("read claim for a refused start", "workflow", p.name, "idempotency_key", p.key, "err", err)
			w.Header().Set("Retry-After", "1")
			return http.StatusServiceUnavailable, apiError{Error: "unavailable", Message: "could not tell whether this key was used before; retry"}
		}
		if claim != nil {
			s.metrics.duplicates.WithLabelValues("claim").Inc()
			s.metrics.starts.WithLabelValues("deduplicated").Inc()
			return startAnswer(wire.Outcome{
				ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, Status: e.Status,
				Keyed: true, Deduplicated: true, FirstSeenAt: &claim.CreatedAt, ExpiresAt: &claim.ExpiresAt,
			})
		}
	}
	s.metrics.starts.WithLabelValues("refused").Inc()
	if rej.retryAfter != "" {
		w.Header().Set("Retry-After", rej.retryAfter)
	}
	return rej.status, rej.body
}

func startResult(out wire.Outcome) string {
	switch {
	case out.Error != "":
		return "refused"
	case out.StartedFresh:
		return "started_fresh"
	case out.Deduplicated:
		return "deduplicated"
	default:
		return "existing"
	}
}

// startAnswer turns a start's outcome into its HTTP answer.
func startAnswer(out wire.Outcome) (int, any) {
	if out.Error != "" {
		status := out.HTTPStatus
		if status == 0 {
			status = http.StatusInternalServerError
		}
		return status, apiError{Error: out.Error, Message: out.Message}
	}
	resp := startResponse{ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status}
	if out.Keyed {
		resp.StartedFresh, resp.Deduplicated = &out.StartedFresh, &out.Deduplicated
		if out.Deduplicated {
			resp.FirstSeenAt, resp.ExpiresAt = out.FirstSeenAt, out.ExpiresAt
		}
	}
	if out.StartedFresh {
		return http.StatusCreated, resp
	}
	return http.StatusOK, resp
}

// awaitOutcome waits for the outcome of the message at stream sequence seq,
// announced by the scheduler on core NATS once stored. A broker
// duplicate's outcome may be stored already, so it is read from
// PostgreSQL at once; any other is read from there too once the
// announcement is late (it is lost if the scheduler stops between its
// commit and the announcement).
func (s *Server) awaitOutcome(ctx context.Context, commandID string, seq uint64, duplicate bool, ch <-chan wire.Outcome) (wire.Outcome, bool) {
	// A fresh message is answered by its own outcome; a duplicate by the
	// newest outcome for the command id, which is at least as new as the
	// original message's.
	matches := func(out wire.Outcome) bool {
		if duplicate {
			return out.StreamSeq >= seq
		}
		return out.StreamSeq == seq
	}
	// Waiting began before the publish, so an outcome stored after it is
	// announced to ch; one stored before (a duplicate's original) is read
	// at once. Later reads only cover a lost announcement.
	first := lateOutcome
	if duplicate {
		first = 0
	}
	backoff := lateOutcome
	poll := time.NewTimer(first)
	defer poll.Stop()
	if s.cfg.DB == nil {
		poll.Stop()
	}
	for {
		select {
		case <-poll.C:
			out, ok, err := store.GetOutcome(ctx, s.cfg.DB, commandID)
			if err == nil && ok && matches(out) {
				return out, true
			}
			poll.Reset(backoff)
			backoff = min(backoff*2, time.Second)
		case out := <-ch:
			if matches(out) {
				return out, true
			}
		case <-ctx.Done():
			return wire.Outcome{}, false
		}
	}
}

// lateOutcome is how long a start waits for the announcement of its
// outcome before it also reads PostgreSQL for it.
const lateOutcome = 250 * time.Millisecond

// markPending records that a command was accepted, so polling it answers
// "accepted" until the scheduler stores its outcome.
func (s *Server) markPending(commandID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Topology.MarkAccepted(ctx, commandID); err != nil {
		s.log.Debug("mark command pending", "command_id", commandID, "err", err)
	}
}

func (s *Server) handleGetCommand(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("command_id")
	if _, err := uuid.Parse(id); err != nil {
		writeError(w, http.StatusNotFound, "command_not_found", fmt.Sprintf("no command %q", id))
		return
	}
	var out wire.Outcome
	ok, err := false, errors.New("no database configured")
	if s.cfg.DB != nil {
		out, ok, err = store.GetOutcome(r.Context(), s.cfg.DB, id)
	}
	if !ok {
		// Not applied yet, or PostgreSQL cannot say: a command ingest
		// accepted without knowing its outcome is "accepted" either way.
		accepted, aerr := s.cfg.Topology.WasAccepted(r.Context(), id)
		switch {
		case aerr == nil && accepted:
			writeJSON(w, http.StatusOK, acceptedResponse{CommandID: id, Status: "accepted"})
		case err != nil || aerr != nil:
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("could not read command %q: %v", id, errors.Join(err, aerr)))
		default:
			writeError(w, http.StatusNotFound, "command_not_found", fmt.Sprintf("no command %q is known (outcomes are kept for a limited time)", id))
		}
		return
	}
	status, body := startAnswer(out)
	if out.Kind == wire.KindSignalWithStart && out.Error == "" {
		status, body = http.StatusOK, signalWithStartResponse{
			ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status,
			StartedFresh: out.StartedFresh, SignalDelivered: out.SignalDelivered,
		}
		if out.StartedFresh {
			status = http.StatusCreated
		}
	}
	if out.Kind == wire.KindSignal {
		status, body = http.StatusAccepted, signalResponse{OK: true, SignalDelivered: &out.SignalDelivered}
		if out.Error != "" {
			status, body = out.HTTPStatus, apiError{Error: out.Error, Message: out.Message}
		}
	}
	state := "applied"
	if out.Error == "command_rejected" {
		// Set aside by the scheduler: never applied, and never will be.
		state = "rejected"
	}
	writeJSON(w, http.StatusOK, map[string]any{"command_id": id, "status": state, "http_status": status, "outcome": body})
}

// readiness is the body of GET /readyz.
type readiness struct {
	Status string `json:"status"`
	// Error and Message are set when not ready.
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
	// JetStream is "ok" or why it is not.
	JetStream string `json:"jetstream"`
	// Database is "ok", "none" (no database configured) or why it cannot
	// be read. Ingest accepts commands without it (they wait in
	// JetStream), so it alone does not make ingest unready.
	Database string `json:"database"`
	// FailingShards are the shards whose applies have been failing for
	// longer than ShardFailingAfter, as their scheduler recorded it.
	FailingShards []failingShard `json:"failing_shards,omitempty"`
}

type failingShard struct {
	Shard        int       `json:"shard"`
	FailingSince time.Time `json:"failing_since"`
	LastError    string    `json:"last_error"`
}

// handleReady answers 200 when ingest can accept commands and every shard
// applies them: 503 when JetStream is unreachable, or when a shard's
// applies have kept failing for longer than ShardFailingAfter.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	body := readiness{Status: "ready", JetStream: "ok", Database: "none"}
	if _, err := s.cfg.Topology.JS.AccountInfo(ctx); err != nil {
		body.JetStream = err.Error()
		body.Status, body.Error, body.Message = "not_ready", "not_ready", fmt.Sprintf("JetStream unreachable: %v", err)
	}
	if s.cfg.DB != nil {
		failing, err := store.FailingShards(ctx, s.cfg.DB, s.cfg.ShardFailingAfter)
		if err != nil {
			body.Database = err.Error()
		} else {
			body.Database = "ok"
		}
		for _, f := range failing {
			body.FailingShards = append(body.FailingShards, failingShard{Shard: f.Shard, FailingSince: f.FailingSince, LastError: f.LastError})
		}
		if len(failing) > 0 && body.Error == "" {
			f := failing[0]
			body.Status, body.Error = "not_ready", "not_ready"
			body.Message = fmt.Sprintf("%d shard(s) cannot apply commands; shard %d since %s: %s", len(failing), f.Shard, f.FailingSince.Format(time.RFC3339), f.LastError)
		}
	}
	status := http.StatusOK
	if body.Error != "" {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
}

// executionView is the JSON form of an execution.
type executionView struct {
	ExecutionID  string          `json:"execution_id"`
	WorkflowName string          `json:"workflow_name"`
	WorkflowID   string          `json:"workflow_id"`
	Status       string          `json:"status"`
	Input        json.RawMessage `json:"input"`
	Result       json.RawMessage `json:"result"`
	Error        json.RawMessage `json:"error"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	ClosedAt     *time.Time      `json:"closed_at"`
}

func (s *Server) readable(w http.ResponseWriter, id string) bool {
	if s.cfg.DB == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "this ingest has no database to read from")
		return false
	}
	if _, err := uuid.Parse(id); err != nil {
		writeError(w, http.StatusNotFound, "execution_not_found", fmt.Sprintf("no execution %q", id))
		return false
	}
	return true
}

func (s *Server) readError(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, store.ErrExecutionNotFound) {
		writeError(w, http.StatusNotFound, "execution_not_found", fmt.Sprintf("no execution %q", id))
		return
	}
	s.log.Warn("read failed", "execution_id", id, "err", err)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "unavailable", "the database could not be read; retry")
}

func (s *Server) handleGetExecution(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("execution_id")
	if !s.readable(w, id) {
		return
	}
	e, err := store.GetExecution(r.Context(), s.cfg.DB, id)
	if err != nil {
		s.readError(w, id, err)
		return
	}
	writeJSON(w, http.StatusOK, viewOf(e))
}

func (s *Server) handleListExecutions(w http.ResponseWriter, r *http.Request) {
	if s.cfg.DB == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "this ingest has no database to read from")
		return
	}
	q := r.URL.Query()
	f := store.ListFilter{WorkflowName: q.Get("workflow"), Status: q.Get("status"), Limit: 50}
	if f.WorkflowName != "" && dedup.ValidateName(f.WorkflowName) != nil {
		writeFieldError(w, http.StatusBadRequest, "invalid_workflow_name", "workflow", "not a workflow name")
		return
	}
	if f.Status != "" && !wire.ValidStatus(f.Status) {
		writeFieldError(w, http.StatusBadRequest, "invalid_status", "status", "want Running, Completed, Failed, Cancelled, Terminated or TimedOut")
		return
	}
	var ok bool
	if f.Limit, ok = queryLimit(w, q, f.Limit); !ok {
		return
	}
	execs, err := store.ListExecutions(r.Context(), s.cfg.DB, f)
	if err != nil {
		s.readError(w, "", err)
		return
	}
	out := make([]executionView, 0, len(execs))
	for _, e := range execs {
		out = append(out, viewOf(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"executions": out})
}

// queryLimit reads a list's ?limit=, 1 to 500, def when absent; it
// answers 400 invalid_limit and reports false for anything else.
func queryLimit(w http.ResponseWriter, q url.Values, def int) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 500 {
		writeFieldError(w, http.StatusBadRequest, "invalid_limit", "limit", "limit must be 1 to 500")
		return 0, false
	}
	return n, true
}

func viewOf(e *store.Execution) executionView {
	return executionView{
		ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, Status: e.Status,
		Input: wire.OrNull(e.Input), Result: wire.OrNull(e.Result), Error: wire.OrNull(e.Error),
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, ClosedAt: e.ClosedAt,
	}
}

func (s *Server) handleGetHistory(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("execution_id")
	if !s.readable(w, id) {
		return
	}
	events, err := store.GetHistory(r.Context(), s.cfg.DB, id)
	if err != nil {
		s.readError(w, id, err)
		return
	}
	out := make([]map[string]any, 0, len(events))
	for _, ev := range events {
		m := map[string]any{}
		if len(ev.Attrs) > 0 {
			_ = json.Unmarshal(ev.Attrs, &m)
		}
		m["seq"], m["type"], m["at"] = ev.Seq, ev.Type, ev.At
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": out})
}
