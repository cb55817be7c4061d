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
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/dedup"
	"github.com/harvest-engine/harvest/store"
	"github.com/harvest-engine/harvest/streams"
	"github.com/harvest-engine/harvest/wire"
)

// Defaults for Config's zero values.
const (
	DefaultOutcomeWait  = 5 * time.Second
	DefaultMaxBodyBytes = 1 << 20
	maxWorkflowIDBytes  = 256
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	Topology *streams.Topology
	// NC is the connection outcomes are received on.
	NC *nats.Conn
	// DB serves the read endpoints; ingest never writes it. Nil makes the
	// read endpoints answer 503.
	DB *pgxpool.Pool
	// OutcomeWait bounds how long a start waits for its outcome before it
	// answers 202 with a command id to poll, default 5 s.
	OutcomeWait time.Duration
	// MaxBodyBytes caps request bodies, default 1 MiB.
	MaxBodyBytes int64
	Logger       *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.OutcomeWait == 0 {
		c.OutcomeWait = DefaultOutcomeWait
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
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
	return nil
}

// Server serves Harvest's HTTP API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	waiters *outcomeWaiters
	sub     *nats.Subscription
	mux     *http.ServeMux
}

// New checks cfg and returns a Server; Start subscribes to outcomes.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, log: cfg.Logger, waiters: newOutcomeWaiters(), mux: http.NewServeMux()}
	s.mux.HandleFunc("POST /api/harvest/workflows/{name}/start", s.handleStart)
	s.mux.HandleFunc("GET /api/harvest/executions/{execution_id}", s.handleGetExecution)
	s.mux.HandleFunc("GET /api/harvest/executions/{execution_id}/history", s.handleGetHistory)
	s.mux.HandleFunc("GET /api/harvest/commands/{command_id}", s.handleGetCommand)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return s, nil
}

// Start subscribes to command outcomes.
func (s *Server) Start(_ context.Context) error {
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
	return nil
}

// Handler is the API's http.Handler.
func (s *Server) Handler() http.Handler { return s.mux }

// startRequest is the body of a start.
type startRequest struct {
	Input          json.RawMessage `json:"input"`
	WorkflowID     *string         `json:"workflow_id"`
	IdempotencyKey *string         `json:"idempotency_key"`
}

// startResponse answers a start.
type startResponse struct {
	ExecutionID  string `json:"execution_id"`
	WorkflowName string `json:"workflow_name"`
	WorkflowID   string `json:"workflow_id"`
	Status       string `json:"status"`
	StartedFresh *bool  `json:"started_fresh,omitempty"`
	Deduplicated *bool  `json:"deduplicated,omitempty"`
}

type acceptedResponse struct {
	CommandID string `json:"command_id"`
	Status    string `json:"status"`
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := dedup.ValidateName(name); err != nil {
		writeFieldError(w, http.StatusBadRequest, "invalid_workflow_name", "name", err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, apiError{Error: "body_too_large",
				Message: fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit), Limit: tooBig.Limit})
			return
		}
		writeError(w, http.StatusBadRequest, "unreadable_body", err.Error())
		return
	}
	var req startRequest
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_json", fmt.Sprintf("request body is not a JSON object: %v", err))
			return
		}
	}
	// The header wins over the body field.
	rawKey, keyed := "", false
	if vals, ok := r.Header[http.CanonicalHeaderKey("Idempotency-Key")]; ok {
		rawKey, keyed = strings.Join(vals, ","), true
	} else if req.IdempotencyKey != nil {
		rawKey, keyed = *req.IdempotencyKey, true
	}
	key := ""
	if keyed {
		if key, err = dedup.ValidateKey(rawKey); err != nil {
			writeFieldError(w, http.StatusBadRequest, "invalid_idempotency_key", "idempotency_key", err.Error())
			return
		}
	}
	workflowID, minted := "", false
	if req.WorkflowID != nil {
		workflowID = *req.WorkflowID
		if strings.TrimSpace(workflowID) == "" || len(workflowID) > maxWorkflowIDBytes {
			writeFieldError(w, http.StatusBadRequest, "invalid_workflow_id", "workflow_id",
				fmt.Sprintf("workflow_id must be 1 to %d bytes and not blank", maxWorkflowIDBytes))
			return
		}
	}
	shards := s.cfg.Topology.Shards()
	shard := dedup.StartShard(shards, name, workflowID, key)
	if workflowID == "" {
		workflowID, minted = dedup.MintWorkflowID(shards, shard, name), true
	}
	commandID := dedup.NewID()
	if keyed {
		commandID = dedup.StartCommandID(name, key)
	}
	if len(req.Input) == 0 {
		req.Input = nil
	}
	cmd := &wire.Command{CommandID: commandID, Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: name, WorkflowID: workflowID, WorkflowIDMinted: minted, Input: req.Input,
		IdempotencyKey: key, TaskQueue: wire.DefaultTaskQueue, AcceptedAt: time.Now().UTC(),
	}}

	outcomes, stopWaiting := s.waiters.wait(commandID)
	defer stopWaiting()
	ack, err := s.cfg.Topology.PublishCommand(r.Context(), shard, cmd)
	if err != nil {
		s.log.Warn("start not accepted", "workflow", name, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the command stream did not accept the start; retry")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.OutcomeWait)
	defer cancel()
	out, ok := s.awaitOutcome(ctx, commandID, ack.Sequence, ack.Duplicate, outcomes)
	if !ok {
		s.markPending(commandID)
		writeJSON(w, http.StatusAccepted, acceptedResponse{CommandID: commandID, Status: "accepted"})
		return
	}
	if ack.Duplicate {
		out.StartedFresh, out.Deduplicated = false, true
	}
	if out.Deduplicated {
		s.refreshStatus(r.Context(), &out)
	}
	status, body2 := startAnswer(out)
	writeJSON(w, status, body2)
}

// refreshStatus replaces a replayed outcome's status, recorded when the
// original start was applied, with the execution's current one. Without a
// readable database the recorded status stands.
func (s *Server) refreshStatus(ctx context.Context, out *wire.Outcome) {
	if s.cfg.DB == nil || out.ExecutionID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if e, err := store.GetExecution(ctx, s.cfg.DB, out.ExecutionID); err == nil {
		out.Status = e.Status
	}
}

// startAnswer turns a start's outcome into its HTTP answer.
func startAnswer(out wire.Outcome) (int, any) {
	if out.Error != "" {
		return http.StatusInternalServerError, apiError{Error: out.Error, Message: out.Message}
	}
	resp := startResponse{ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status}
	if out.Keyed {
		resp.StartedFresh, resp.Deduplicated = &out.StartedFresh, &out.Deduplicated
	}
	if out.StartedFresh {
		return http.StatusCreated, resp
	}
	return http.StatusOK, resp
}

// awaitOutcome waits for the outcome of the message at stream sequence seq.
// A broker duplicate's outcome may be stored already, so it is read first.
func (s *Server) awaitOutcome(ctx context.Context, commandID string, seq uint64, duplicate bool, ch <-chan wire.Outcome) (wire.Outcome, bool) {
	if duplicate {
		out, ok, err := s.cfg.Topology.GetOutcome(ctx, commandID)
		if err == nil && ok && out.StreamSeq == seq {
			return out, true
		}
	}
	for {
		select {
		case out := <-ch:
			if out.StreamSeq == seq && !out.Pending {
				return out, true
			}
		case <-ctx.Done():
			return wire.Outcome{}, false
		}
	}
}

// markPending records that a command was accepted, so polling it answers
// "accepted" until the scheduler stores its outcome. It never overwrites
// an outcome already there.
func (s *Server) markPending(commandID string) {
	data, _ := json.Marshal(wire.Outcome{CommandID: commandID, Pending: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.cfg.Topology.Outcomes.Create(ctx, commandID, data); err != nil {
		s.log.Debug("mark command pending", "command_id", commandID, "err", err)
	}
}

func (s *Server) handleGetCommand(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("command_id")
	if _, err := uuid.Parse(id); err != nil {
		writeError(w, http.StatusNotFound, "command_not_found", fmt.Sprintf("no command %q", id))
		return
	}
	out, ok, err := s.cfg.Topology.GetOutcome(r.Context(), id)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, "command_not_found", fmt.Sprintf("no command %q is known (outcomes are kept for a limited time)", id))
		return
	}
	if out.Pending {
		writeJSON(w, http.StatusOK, acceptedResponse{CommandID: id, Status: "accepted"})
		return
	}
	status, body := startAnswer(out)
	writeJSON(w, http.StatusOK, map[string]any{"command_id": id, "status": "applied", "http_status": status, "outcome": body})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.cfg.Topology.JS.AccountInfo(ctx); err != nil {
		writeError(w, http.StatusServiceUnavailable, "not_ready", fmt.Sprintf("JetStream unreachable: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
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

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
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
	writeJSON(w, http.StatusOK, executionView{
		ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, Status: e.Status,
		Input: orNull(e.Input), Result: orNull(e.Result), Error: orNull(e.Error),
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, ClosedAt: e.ClosedAt,
	})
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
