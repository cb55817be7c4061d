package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/webhook"
	"github.com/harvest-engine/harvest/internal/wire"
)

// handleHook takes a webhook delivery: verified on the raw body, routed by
// event type to a start or a signal-with-start keyed by the provider's
// event id, and acknowledged as soon as JetStream holds the command.
func (s *Server) handleHook(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("source")
	ep, ok := s.hooks[name]
	if !ok {
		s.metrics.webhooks.WithLabelValues(otherSource, hookRejected).Inc()
		writeError(w, http.StatusNotFound, api.CodeUnknownSource, fmt.Sprintf("no webhook source %q is configured", name))
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	result := s.hook(rec, r, ep)
	s.metrics.webhooks.WithLabelValues(name, result).Inc()
	if result == hookUnverified || result == hookRejected {
		s.metrics.hooksRefused.WithLabelValues(name, refusalReason(rec.code())).Inc()
	}
}

// hook answers a delivery to the configured source ep, and returns the
// result label of its metrics.
func (s *Server) hook(w http.ResponseWriter, r *http.Request, ep webhook.Endpoint) string {
	name := ep.Name
	limit := ep.MaxBodyBytes
	if limit == 0 {
		limit = DefaultMaxBodyBytes
	}
	// Signatures are over the body exactly as sent.
	body, rej := readRaw(w, r, limit)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return hookRejected
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType, "webhook bodies must be application/json")
		return hookRejected
	}
	delivery, err := webhook.Verify(ep.Source, r.Header, body, time.Now())
	if err != nil {
		s.log.Warn("webhook refused", "source", name, "err", err)
		writeError(w, http.StatusUnauthorized, api.CodeInvalidSignature, err.Error())
		return hookUnverified
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var event any
	if err := dec.Decode(&event); err != nil {
		writeError(w, http.StatusBadRequest, api.CodeInvalidJSON, fmt.Sprintf("the payload is not JSON: %v", err))
		return hookRejected
	}
	if sch, ok := s.hookSchemas[name]; ok {
		if violations := sch.Validate(body); len(violations) > 0 {
			writeJSON(w, http.StatusUnprocessableEntity, api.ErrorResponse{Error: api.CodePayloadInvalid, Field: violations[0].Field, Violations: violationsOf(violations),
				Message: fmt.Sprintf("the payload does not match the schema of source %s: %s at %q", name, violations[0].Message, violations[0].Field)})
			return hookRejected
		}
	}
	if delivery.ID == "" || delivery.EventType == "" {
		obj, _ := event.(map[string]any)
		if id, ok := obj["id"].(string); ok && delivery.ID == "" {
			delivery.ID = id
		}
		if typ, ok := obj["type"].(string); ok && delivery.EventType == "" {
			delivery.EventType = typ
		}
	}
	if delivery.ID == "" {
		writeError(w, http.StatusBadRequest, api.CodeMissingEventID, "the event carries no id to deduplicate it by")
		return hookRejected
	}
	rule, ok := ep.Rule(delivery.EventType)
	if !ok {
		s.log.Info("webhook event ignored: no rule", "source", name, "event", delivery.EventType)
		s.metrics.hooksIgnored.Inc()
		writeJSON(w, http.StatusAccepted, api.HookResponse{Accepted: true, Ignored: true})
		return hookIgnored
	}
	// What would be stored must be storable: the body (the input or the
	// signal's payload is part of it), the event id (part of the key)
	// and the workflow_id a rule makes of the body.
	if rej := unstorablePayload(body, "payload"); rej != nil {
		s.log.Warn("webhook refused: the payload cannot be stored", "source", name, "event", delivery.EventType, "err", rej.body.Message)
		writeJSON(w, rej.status, rej.body)
		return hookRejected
	}
	if err := storable.CheckIdentifier(delivery.ID); err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidEventID, "event_id", "the event id "+err.Error())
		return hookRejected
	}
	cmd, shard, err := rule.Command(s.cfg.Topology.Layout(), s.configuredQueue(rule.Workflow), dedup.HookKey(name, delivery.ID), event, time.Now())
	var unstorableID *storable.Error
	switch {
	case errors.As(err, &unstorableID), errors.Is(err, webhook.ErrWorkflowID):
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidWorkflowID, "workflow_id", err.Error())
		return hookRejected
	case err != nil:
		writeError(w, http.StatusBadRequest, api.CodeUnroutableEvent, err.Error())
		return hookRejected
	}
	if pol := s.cfg.StartPolicies[rule.Workflow]; pol != nil && cmd.Kind == wire.KindStart {
		// Under a start policy: deduped by its command id, derived from
		// the event's, never by a start key.
		if shard, err = pol.Place(cmd, s.cfg.Topology.Layout()); err != nil {
			writeFieldError(w, http.StatusUnprocessableEntity, api.CodePayloadInvalid, "payload", fmt.Sprintf("%s starts under a %s start policy: %v", rule.Workflow, pol.Kind(), err))
			return hookRejected
		}
	}
	// The checks every fresh start gets: the workflow's input schema and
	// its admission gate. (A redelivery of a committed start is dropped by
	// the broker or answered from its claim either way.)
	if sch, ok := s.schemas.get(rule.Workflow); ok && cmd.Start.Input != nil {
		if violations := sch.Validate(cmd.Start.Input); len(violations) > 0 {
			writeJSON(w, http.StatusUnprocessableEntity, api.ErrorResponse{Error: api.CodeInputInvalid, Field: "input", Violations: violationsOf(violations),
				Message: fmt.Sprintf("the event does not match the input schema of %s: %s at %q", rule.Workflow, violations[0].Message, violations[0].Field)})
			return hookRejected
		}
	}
	if g, closed := s.admission.get(rule.Workflow); closed {
		w.Header().Set("Retry-After", admissionRetryAfter)
		writeError(w, http.StatusServiceUnavailable, api.CodeAdmissionBlocked, fmt.Sprintf("starts of %s are paused: %s", rule.Workflow, g.Reason))
		return hookUnavailable
	}
	pctx, cancel := context.WithTimeout(r.Context(), s.cfg.PublishTimeout)
	ack, err := s.publishCommand(pctx, shard, cmd, cmd.CommandID)
	cancel()
	if err != nil {
		logattr.Command(s.log, cmd).Warn("webhook not accepted", "source", name, "event", delivery.EventType, "err", err)
		if status, body := notAccepted(err, "event"); status != http.StatusServiceUnavailable {
			writeJSON(w, status, body)
			return hookRejected
		}
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the command stream is unavailable; deliver again later")
		return hookUnavailable
	}
	duplicate := ack.Duplicate
	if duplicate {
		s.tally(r.Context(), shard, wire.DuplicateOf(cmd, wire.DuplicateBroker))
	} else if s.hasDB() {
		// A redelivery after the broker's window: the command id's outcome
		// is there already. (The scheduler counts it as it applies it: the
		// claim layer.)
		rctx, cancel := s.readContext(r.Context())
		if out, ok, err := store.GetOutcome(rctx, s.poolOfShard(shard), cmd.CommandID); err == nil && ok && out.StreamSeq < ack.Sequence && out.Error == "" {
			duplicate = true
		}
		cancel()
	}
	if s.log.Enabled(r.Context(), slog.LevelDebug) {
		logattr.Command(s.log, cmd).DebugContext(r.Context(), "webhook event published", "source", name, "event", delivery.EventType, "duplicate", duplicate)
	}
	if duplicate {
		s.duplicate(r.Context(), "broker")
		writeJSON(w, http.StatusOK, api.HookResponse{Accepted: true, Duplicate: true})
		return hookDuplicate
	}
	writeJSON(w, http.StatusAccepted, api.HookResponse{Accepted: true, CommandID: cmd.CommandID})
	return hookAccepted
}
