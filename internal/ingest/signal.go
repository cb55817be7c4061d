package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/harvest-engine/harvest/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// signalResponse answers a signal.
type signalResponse struct {
	OK              bool   `json:"ok"`
	SignalDelivered *bool  `json:"signal_delivered,omitempty"`
	CommandID       string `json:"command_id,omitempty"`
	Status          string `json:"status,omitempty"`
}

// signalKey reads a signal's idempotency key: the Idempotency-Key header,
// else the idempotency_key query parameter. A header that is present but
// empty is an error, as is an empty parameter.
func signalKey(r *http.Request) (string, error) {
	if vals, ok := r.Header[http.CanonicalHeaderKey("Idempotency-Key")]; ok {
		return dedup.ValidateKey(strings.Join(vals, ","))
	}
	if vals, ok := r.URL.Query()["idempotency_key"]; ok {
		return dedup.ValidateKey(vals[0])
	}
	return "", nil
}

func (s *Server) handleSignal(w http.ResponseWriter, r *http.Request) {
	executionID := r.PathValue("execution_id")
	name := r.PathValue("signal_name")
	key, err := signalKey(r)
	if err != nil {
		writeFieldError(w, http.StatusBadRequest, "invalid_idempotency_key", "idempotency_key", err.Error())
		return
	}
	if _, err := uuid.Parse(executionID); err != nil {
		writeError(w, http.StatusNotFound, "execution_not_found", fmt.Sprintf("no execution %q", executionID))
		return
	}
	if err := dedup.ValidateName(name); err != nil {
		writeFieldError(w, http.StatusBadRequest, "invalid_signal_name", "signal_name", err.Error())
		return
	}
	payload, rej := s.readPayload(w, r)
	if rej == nil && payload != nil {
		rej = unstorablePayload(payload, "payload")
	}
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignal, Signal: &wire.SignalCommand{
		ExecutionID: executionID, SignalName: name, Payload: payload, IdempotencyKey: key,
	}}
	if key != "" {
		cmd.CommandID = dedup.SignalCommandID(executionID, key)
	}
	status, body := s.sendSignal(r, cmd)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

// sendSignal publishes a signal command and answers from its outcome.
func (s *Server) sendSignal(r *http.Request, cmd *wire.Command) (int, any) {
	shard := dedup.ExecutionShard(s.cfg.Topology.Shards(), cmd.Signal.ExecutionID)
	out, duplicate, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	switch {
	case errors.Is(err, errNotAccepted):
		return notAccepted(err, "signal")
	case errors.Is(err, errOutcomeLate):
		return http.StatusAccepted, signalResponse{OK: true, CommandID: cmd.CommandID, Status: "accepted"}
	case out.Error != "":
		return out.HTTPStatus, apiError{Error: out.Error, Message: out.Message}
	}
	// A broker duplicate is a retry of a delivery that already landed.
	delivered := out.SignalDelivered && !duplicate
	return http.StatusAccepted, signalResponse{OK: true, SignalDelivered: &delivered}
}

// readBody reads a request body up to MaxBodyBytes, trimmed of white
// space.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *rejection) {
	body, rej := readRaw(w, r, s.cfg.MaxBodyBytes)
	return bytes.TrimSpace(body), rej
}

// readRaw reads a request body, as sent, up to limit bytes.
func readRaw(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *rejection) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			rej := reject(http.StatusRequestEntityTooLarge, "body_too_large", "", fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
			rej.body.Limit = tooBig.Limit
			return nil, rej
		}
		return nil, reject(http.StatusBadRequest, "unreadable_body", "", err.Error())
	}
	return body, nil
}

// readPayload reads a signal's JSON payload; an empty body is null.
func (s *Server) readPayload(w http.ResponseWriter, r *http.Request) (json.RawMessage, *rejection) {
	body, rej := s.readBody(w, r)
	if rej != nil {
		return nil, rej
	}
	if len(body) == 0 {
		return nil, nil
	}
	if !json.Valid(body) {
		return nil, reject(http.StatusBadRequest, "invalid_json", "", "the signal payload is not JSON")
	}
	return json.RawMessage(body), nil
}

// signalWithStartRequest is the body of a signal-with-start.
type signalWithStartRequest struct {
	WorkflowID     *string         `json:"workflow_id"`
	Input          json.RawMessage `json:"input"`
	SignalName     string          `json:"signal_name"`
	SignalPayload  json.RawMessage `json:"signal_payload"`
	IdempotencyKey *string         `json:"idempotency_key"`
	ReusePolicy    string          `json:"reuse_policy"`
}

// signalWithStartResponse answers a signal-with-start.
type signalWithStartResponse struct {
	ExecutionID     string `json:"execution_id"`
	WorkflowName    string `json:"workflow_name"`
	WorkflowID      string `json:"workflow_id"`
	Status          string `json:"status"`
	StartedFresh    bool   `json:"started_fresh"`
	SignalDelivered bool   `json:"signal_delivered"`
}

func (s *Server) handleSignalWithStart(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := dedup.ValidateName(name); err != nil {
		writeFieldError(w, http.StatusBadRequest, "invalid_workflow_name", "name", err.Error())
		return
	}
	raw, rej := s.readPayload(w, r)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	var req signalWithStartRequest
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_json", fmt.Sprintf("request body is not a JSON object: %v", err))
			return
		}
	}
	key := ""
	if vals, ok := r.Header[http.CanonicalHeaderKey("Idempotency-Key")]; ok {
		req.IdempotencyKey = &vals[0]
	}
	if req.IdempotencyKey != nil {
		var err error
		if key, err = dedup.ValidateKey(*req.IdempotencyKey); err != nil {
			writeFieldError(w, http.StatusBadRequest, "invalid_idempotency_key", "idempotency_key", err.Error())
			return
		}
	}
	if raw != nil {
		if rej := unstorableBody(raw, signalWithStartMembers); rej != nil {
			writeJSON(w, rej.status, rej.body)
			return
		}
	}
	var idErr error
	if req.WorkflowID != nil {
		idErr = storable.CheckIdentifier(*req.WorkflowID)
	}
	switch {
	case req.WorkflowID == nil || strings.TrimSpace(*req.WorkflowID) == "" || len(*req.WorkflowID) > maxWorkflowIDBytes:
		writeFieldError(w, http.StatusBadRequest, "invalid_workflow_id", "workflow_id",
			fmt.Sprintf("workflow_id is required: 1 to %d bytes, not blank", maxWorkflowIDBytes))
		return
	case idErr != nil:
		writeFieldError(w, http.StatusBadRequest, "invalid_workflow_id", "workflow_id", "workflow_id "+idErr.Error())
		return
	case dedup.ValidateName(req.SignalName) != nil:
		writeFieldError(w, http.StatusBadRequest, "invalid_signal_name", "signal_name", "signal_name is required: letters, digits, '_' and '-'")
		return
	case !wire.ValidReusePolicy(req.ReusePolicy):
		writeFieldError(w, http.StatusBadRequest, "invalid_reuse_policy", "reuse_policy",
			fmt.Sprintf("reuse_policy %q: want allow_duplicate, allow_duplicate_failed_only, reject_duplicate or terminate_if_running", req.ReusePolicy))
		return
	}
	if len(req.Input) == 0 {
		req.Input = nil
	}
	if len(req.SignalPayload) == 0 {
		req.SignalPayload = nil
	}
	if sch, ok := s.schemas.get(name); ok && req.Input != nil {
		if violations := sch.Validate(req.Input); len(violations) > 0 {
			writeJSON(w, http.StatusUnprocessableEntity, apiError{Error: "input_invalid", Field: "input", Violations: violations,
				Message: fmt.Sprintf("input does not match the schema of %s: %s at %q", name, violations[0].Message, violations[0].Field)})
			return
		}
	}
	workflowID := *req.WorkflowID
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignalWithStart, SignalWithStart: true,
		Start:  &wire.StartCommand{WorkflowName: name, WorkflowID: workflowID, Input: req.Input, TaskQueue: wire.DefaultTaskQueue, ReusePolicy: req.ReusePolicy},
		Signal: &wire.SignalCommand{SignalName: req.SignalName, Payload: req.SignalPayload, IdempotencyKey: key},
	}
	if key != "" {
		cmd.CommandID = dedup.SignalWithStartCommandID(name, workflowID, key)
	}
	shard := dedup.StartShard(s.cfg.Topology.Shards(), name, workflowID, "")
	out, duplicate, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	switch {
	case errors.Is(err, errNotAccepted):
		status, body := notAccepted(err, "signal")
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, status, body)
		return
	case errors.Is(err, errOutcomeLate):
		writeJSON(w, http.StatusAccepted, signalResponse{OK: true, CommandID: cmd.CommandID, Status: "accepted"})
		return
	case out.Error != "":
		writeJSON(w, out.HTTPStatus, apiError{Error: out.Error, Message: out.Message})
		return
	}
	resp := signalWithStartResponse{
		ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status,
		StartedFresh: out.StartedFresh && !duplicate, SignalDelivered: out.SignalDelivered && !duplicate,
	}
	status := http.StatusOK
	if resp.StartedFresh {
		status = http.StatusCreated
	}
	writeJSON(w, status, resp)
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	executionID := r.PathValue("execution_id")
	if _, err := uuid.Parse(executionID); err != nil {
		writeError(w, http.StatusNotFound, "execution_not_found", fmt.Sprintf("no execution %q", executionID))
		return
	}
	body, rej := s.readBody(w, r)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	var req struct {
		Reason string `json:"reason"`
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_json", fmt.Sprintf("request body is not a JSON object: %v", err))
			return
		}
		if rej := unstorableBody(body, cancelMembers); rej != nil {
			writeJSON(w, rej.status, rej.body)
			return
		}
	}
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindCancel, Cancel: &wire.CancelCommand{ExecutionID: executionID, Reason: req.Reason}}
	shard := dedup.ExecutionShard(s.cfg.Topology.Shards(), executionID)
	out, _, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	switch {
	case errors.Is(err, errNotAccepted):
		status, body := notAccepted(err, "cancellation")
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, status, body)
	case errors.Is(err, errOutcomeLate):
		writeJSON(w, http.StatusAccepted, acceptedResponse{CommandID: cmd.CommandID, Status: "accepted"})
	case out.Error != "":
		writeJSON(w, out.HTTPStatus, apiError{Error: out.Error, Message: out.Message})
	default:
		writeJSON(w, http.StatusOK, map[string]string{
			"execution_id": out.ExecutionID, "workflow_name": out.WorkflowName, "workflow_id": out.WorkflowID, "status": out.Status,
		})
	}
}
