package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// signalKey reads a signal's idempotency key: the Idempotency-Key header,
// else the idempotency_key query parameter. A header that is present but
// empty is an error, as is an empty parameter.
func signalKey(r *http.Request) (string, error) {
	if vals, ok := r.Header[http.CanonicalHeaderKey("Idempotency-Key")]; ok {
		return dedup.ValidateKey(strings.Join(vals, ","))
	}
	if vals, ok := queryOf(r)["idempotency_key"]; ok {
		return dedup.ValidateKey(vals[0])
	}
	return "", nil
}

// handleSignal serves the signal routes, POST
// /api/harvest/executions/{execution_id}/signals/{name} and the same under
// its deprecated path, /api/harvest/workflows/{execution_id}/signal/{signal_name}:
// nameParam is the path parameter that names the signal.
func (s *Server) handleSignal(nameParam string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw := r.PathValue("execution_id")
		name := r.PathValue(nameParam)
		key, err := signalKey(r)
		if err != nil {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidIdempotencyKey, "idempotency_key", err.Error())
			return
		}
		executionID, err := canonicalExecutionID(raw)
		switch {
		case err != nil && mayBeWorkflowID(raw):
			// What a sender that has the workflow_id, not the execution
			// id, sends: no execution has that id, and the answer says
			// how to reach the one the sender means.
			writeFieldError(w, http.StatusNotFound, api.CodeExecutionNotFound, "execution_id", signalByWorkflowID(raw, name))
			return
		case err != nil:
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidExecutionID, "execution_id", err.Error())
			return
		}
		if err := dedup.ValidateName(name); err != nil {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidSignalName, nameParam, err.Error())
			return
		}
		if !s.executionVisible(w, r, executionID) {
			return
		}
		payload, rej := s.readSignalPayload(w, r)
		if rej != nil {
			writeJSON(w, rej.status, rej.body)
			return
		}
		status, body := s.sendSignal(r, signalCommand(executionID, name, payload, key))
		writeAnswer(w, status, body)
	}
}

// mayBeWorkflowID says whether raw, which is no execution id, could be a
// workflow_id: it is no UUID in any spelling, and a start would take it
// as a workflow_id (1 to 256 bytes, not blank, no control characters).
func mayBeWorkflowID(raw string) bool {
	if _, err := uuid.Parse(raw); err == nil {
		return false // an execution id in another spelling
	}
	return strings.TrimSpace(raw) != "" && len(raw) <= maxWorkflowIDBytes && storable.CheckIdentifier(raw) == nil
}

// signalByWorkflowID is the message of a signal whose path named id,
// which may be a workflow_id, where the execution id goes: how to send
// the signal name to the execution of the workflow_id id.
func signalByWorkflowID(id, name string) string {
	return fmt.Sprintf("no execution %q: a signal's path names an execution id, a UUID; "+
		"if %q is a workflow_id, GET /api/harvest/executions?workflow_id_prefix=%s lists its executions with their execution ids, "+
		`or POST /api/harvest/workflows/{workflow}/signal-with-start with {"workflow_id": %q, "signal_name": %q} signals it `+
		"(starting an execution if none is running)",
		shownName(id), shownName(id), url.QueryEscape(id), shownName(id), shownName(name))
}

// signalCommand is the command of a signal, from the signal endpoint or an
// external callback: a keyed signal's command id is a function of its
// execution and key, so that a retry is the same command.
func signalCommand(executionID, name string, payload json.RawMessage, key string) *wire.Command {
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignal, Signal: &wire.SignalCommand{
		ExecutionID: executionID, SignalName: name, Payload: payload, IdempotencyKey: key,
	}}
	if key != "" {
		cmd.CommandID = dedup.SignalCommandID(executionID, key)
	}
	return cmd
}

// readSignalPayload reads a signal's body: nil when blank, else one JSON
// value PostgreSQL can store.
func (s *Server) readSignalPayload(w http.ResponseWriter, r *http.Request) (json.RawMessage, *rejection) {
	payload, rej := s.readPayload(w, r)
	if rej == nil && payload != nil {
		rej = unstorablePayload(payload, "payload")
	}
	if rej != nil {
		return nil, rej
	}
	return payload, nil
}

// sendSignal publishes a signal command and answers from its outcome.
func (s *Server) sendSignal(r *http.Request, cmd *wire.Command) (int, any) {
	shard := s.cfg.Topology.Layout().ExecutionShard(cmd.Signal.ExecutionID)
	out, duplicate, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	s.metrics.signals.WithLabelValues(signalResult(out, duplicate, err)).Inc()
	s.tallySignal(r.Context(), shard, cmd, out, duplicate, err)
	switch {
	case errors.Is(err, errNotAccepted):
		return notAccepted(err, "signal")
	case errors.Is(err, errOutcomeLate):
		return http.StatusAccepted, api.SignalResponse{OK: true, CommandID: cmd.CommandID, Status: "accepted"}
	case out.Error != "":
		return out.HTTPStatus, api.ErrorResponse{Error: out.Error, Message: out.Message}
	}
	// A broker duplicate is a retry of a delivery that already landed.
	delivered := out.SignalDelivered && !duplicate
	return http.StatusAccepted, api.SignalResponse{OK: true, SignalDelivered: &delivered}
}

// tallySignal reports a keyed signal (or signal-with-start) the broker
// dropped as a duplicate, unless the signal it duplicated was refused.
func (s *Server) tallySignal(ctx context.Context, shard int, cmd *wire.Command, out wire.Outcome, duplicate bool, err error) {
	if duplicate && (errors.Is(err, errOutcomeLate) || (err == nil && out.Error == "")) {
		s.tally(ctx, shard, wire.DuplicateOf(cmd, wire.DuplicateBroker))
	}
}

// signalResult is the result label of a signal submitted.
func signalResult(out wire.Outcome, duplicate bool, err error) string {
	switch {
	case errors.Is(err, errNotAccepted):
		return signalUnavailable
	case errors.Is(err, errOutcomeLate):
		return signalAccepted
	case out.Error != "":
		return signalRefused
	case out.SignalDelivered && !duplicate:
		return signalDelivered
	default:
		return signalDeduplicated
	}
}

// parseSignalWithStart reads and checks a signal-with-start's body and its
// Idempotency-Key header (which wins over the body's idempotency_key). It
// returns the request, with empty input and payload made nil, and the key,
// or the rejection that answers it.
func (s *Server) parseSignalWithStart(w http.ResponseWriter, r *http.Request) (req api.SignalWithStartRequest, key string, rej *rejection) {
	raw, rej := s.readPayload(w, r)
	if rej != nil {
		return req, "", rej
	}
	var unknown *rejection
	if len(raw) > 0 {
		if unknown, rej = decodeObject(raw, &req, "a signal-with-start's body"); rej != nil {
			return req, "", rej
		}
	}
	if vals, ok := r.Header[http.CanonicalHeaderKey("Idempotency-Key")]; ok {
		req.IdempotencyKey = &vals[0]
	}
	if req.IdempotencyKey != nil {
		var err error
		if key, err = dedup.ValidateKey(*req.IdempotencyKey); err != nil {
			return req, "", reject(http.StatusBadRequest, api.CodeInvalidIdempotencyKey, "idempotency_key", err.Error())
		}
	}
	if unknown != nil {
		return req, "", unknown
	}
	if raw != nil {
		if rej := unstorableBody(raw, signalWithStartMembers); rej != nil {
			return req, "", rej
		}
	}
	var idErr error
	if req.WorkflowID != nil {
		idErr = storable.CheckIdentifier(*req.WorkflowID)
	}
	switch {
	case req.WorkflowID == nil || strings.TrimSpace(*req.WorkflowID) == "" || len(*req.WorkflowID) > maxWorkflowIDBytes:
		return req, "", reject(http.StatusBadRequest, api.CodeInvalidWorkflowID, "workflow_id",
			fmt.Sprintf("workflow_id is required: 1 to %d bytes, not blank", maxWorkflowIDBytes))
	case idErr != nil:
		return req, "", reject(http.StatusBadRequest, api.CodeInvalidWorkflowID, "workflow_id", "workflow_id "+idErr.Error())
	case dedup.ValidateName(req.SignalName) != nil:
		return req, "", reject(http.StatusBadRequest, api.CodeInvalidSignalName, "signal_name", "signal_name is required: letters, digits, '_' and '-'")
	case !wire.ValidReusePolicy(req.ReusePolicy):
		return req, "", reject(http.StatusBadRequest, api.CodeInvalidReusePolicy, "reuse_policy",
			fmt.Sprintf("reuse_policy %q: want allow_duplicate, allow_duplicate_failed_only, reject_duplicate or terminate_if_running", req.ReusePolicy))
	}
	if rej := checkPriority(req.Priority); rej != nil {
		return req, "", rej
	}
	if len(req.Input) == 0 {
		req.Input = nil
	}
	if len(req.SignalPayload) == 0 {
		req.SignalPayload = nil
	}
	return req, key, nil
}

func (s *Server) handleSignalWithStart(w http.ResponseWriter, r *http.Request) {
	name, ok := s.pathWorkflow(w, r, "name")
	if !ok {
		return
	}
	req, key, rej := s.parseSignalWithStart(w, r)
	var queue, versioning, pinnedBuild string
	if rej == nil {
		queue, rej = s.startQueue(name, req.TaskQueue)
	}
	if rej == nil {
		rej = s.checkKnown(r.Context(), name, queue)
	}
	if rej == nil {
		versioning, pinnedBuild, rej = s.startVersioning(r.Context(), name, queue, req.Versioning, req.BuildID)
	}
	if rej == nil {
		rej = s.checkSearchAttributes(name, req.SearchAttributes)
	}
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	if sch, ok := s.schemas.get(name); ok && req.Input != nil {
		if violations := sch.Validate(req.Input); len(violations) > 0 {
			writeJSON(w, http.StatusUnprocessableEntity, api.ErrorResponse{Error: api.CodeInputInvalid, Field: "input", Violations: violationsOf(violations),
				Message: fmt.Sprintf("input does not match the schema of %s: %s at %q", name, violations[0].Message, violations[0].Field)})
			return
		}
	}
	workflowID := *req.WorkflowID
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignalWithStart, SignalWithStart: true,
		Start: &wire.StartCommand{WorkflowName: name, WorkflowID: workflowID, Input: req.Input, TaskQueue: queue,
			ReusePolicy: req.ReusePolicy, StartedBy: callerName(r.Context()), Versioning: versioning, PinnedBuild: pinnedBuild,
			Priority: priorityOf(req.Priority), SearchAttributes: req.SearchAttributes},
		Signal: &wire.SignalCommand{SignalName: req.SignalName, Payload: req.SignalPayload, IdempotencyKey: key},
	}
	if key != "" {
		cmd.CommandID = dedup.SignalWithStartCommandID(name, workflowID, key)
	}
	shard, err := s.cfg.Topology.Layout().StartShard(name, workflowID, "")
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, fmt.Sprintf("no store takes the start: %v", err))
		return
	}
	out, duplicate, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	s.metrics.signals.WithLabelValues(signalResult(out, duplicate, err)).Inc()
	s.tallySignal(r.Context(), shard, cmd, out, duplicate, err)
	switch {
	case errors.Is(err, errNotAccepted):
		status, body := notAccepted(err, "signal")
		writeAnswer(w, status, body)
		return
	case errors.Is(err, errOutcomeLate):
		writeJSON(w, http.StatusAccepted, api.SignalResponse{OK: true, CommandID: cmd.CommandID, Status: "accepted"})
		return
	case out.Error != "":
		writeJSON(w, out.HTTPStatus, api.ErrorResponse{Error: out.Error, Message: out.Message})
		return
	}
	resp := api.SignalWithStartResponse{
		ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status,
		StartedFresh: out.StartedFresh && !duplicate, SignalDelivered: out.SignalDelivered && !duplicate,
	}
	status := http.StatusOK
	if resp.StartedFresh {
		status = http.StatusCreated
	}
	writeJSON(w, status, resp)
}
