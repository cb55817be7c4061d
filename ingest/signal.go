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
	"github.com/harvest-engine/harvest/wire"
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
		return http.StatusServiceUnavailable, apiError{Error: "unavailable", Message: "the command stream did not accept the signal; retry"}
	case errors.Is(err, errOutcomeLate):
		return http.StatusAccepted, signalResponse{OK: true, CommandID: cmd.CommandID, Status: "accepted"}
	case out.Error != "":
		return out.HTTPStatus, apiError{Error: out.Error, Message: out.Message}
	}
	// A broker duplicate is a retry of a delivery that already landed.
	delivered := out.SignalDelivered && !duplicate
	return http.StatusAccepted, signalResponse{OK: true, SignalDelivered: &delivered}
}

// readPayload reads a signal's JSON payload; an empty body is null.
func (s *Server) readPayload(w http.ResponseWriter, r *http.Request) (json.RawMessage, *rejection) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			rej := reject(http.StatusRequestEntityTooLarge, "body_too_large", "", fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
			rej.body.Limit = tooBig.Limit
			return nil, rej
		}
		return nil, reject(http.StatusBadRequest, "unreadable_body", "", err.Error())
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, nil
	}
	if !json.Valid(body) {
		return nil, reject(http.StatusBadRequest, "invalid_json", "", "the signal payload is not JSON")
	}
	return json.RawMessage(body), nil
}
