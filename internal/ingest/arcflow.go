package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// ArcFlow-compatible runs: the routes callers written against ArcFlow's
// API use, served by Harvest's own start, signal and read paths. A run
// is an execution; its run_id is the execution id.

// HeaderArcFlowSignature carries the HMAC of an external callback's body
// alone: the old scheme, taken only with
// arcflow.legacy_body_only_signatures (Config.ArcFlowLegacyBodyOnly).
// Callbacks are signed with webhook.HeaderHarvestSignature.
const HeaderArcFlowSignature = "X-ArcFlow-Signature"

// traceID is a run's trace id: stable for the run, so every answer about
// it (a retried create included) carries the same one.
func traceID(runID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("harvest:run-trace:"+runID)).String()
}

// handleCreateRun is POST /v1/runs: a start of body.workflow, deduplicated
// by the Idempotency-Key header through the same claims as the Harvest
// API, so concurrent retries of one key collapse into one run.
func (s *Server) handleCreateRun(w http.ResponseWriter, r *http.Request) {
	var p parsedStart
	if vals, ok := r.Header[http.CanonicalHeaderKey("Idempotency-Key")]; ok {
		var err error
		if p.key, err = dedup.ValidateKey(strings.Join(vals, ",")); err != nil {
			s.metrics.starts.WithLabelValues("refused").Inc()
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidIdempotencyKey, "idempotency_key", err.Error())
			return
		}
	}
	body, rej := s.readBody(w, r)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	req, unknown, rej := parseRunRequest(body)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	if !s.mayUse(w, r, req.Workflow) {
		return
	}
	p.name, p.req = req.Workflow, api.StartRequest{Input: req.Input}
	var status int
	var answer any
	// As for a start, a keyed retry of a committed run is answered before
	// the body's own faults.
	rej = unknown
	if rej == nil {
		rej = unstorableBody(body, runMembers)
	}
	if rej == nil {
		rej = s.checkStart(r.Context(), &p)
	}
	if rej != nil {
		status, answer = s.refuseOrReplay(w, r, p, rej)
	} else {
		status, answer = s.start(r.Context(), p)
	}
	if sr, ok := answer.(api.StartResponse); ok {
		answer = api.RunResponse{RunID: sr.ExecutionID, TraceID: traceID(sr.ExecutionID), Status: sr.Status}
	}
	writeAnswer(w, status, answer)
}

// handleGetRun is GET /v1/runs/{run_id}: the run's status, as a create
// answers it (its run_id, trace_id and the execution's status), so an
// ArcFlow client can poll the run. A run of a workflow the token is not
// limited to is unknown, as an execution is.
func (s *Server) handleGetRun(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("run_id")
	if !s.readable(w) {
		return
	}
	runID, err := canonicalExecutionID(runID)
	if err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidExecutionID, "run_id", err.Error())
		return
	}
	e, err := store.GetExecution(r.Context(), s.poolOf(runID), runID)
	if err == nil && !sees(r.Context(), e.WorkflowName) {
		err = store.ErrExecutionNotFound
	}
	switch {
	case errors.Is(err, store.ErrExecutionNotFound):
		writeError(w, http.StatusNotFound, api.CodeExecutionNotFound, fmt.Sprintf("no run %q", runID))
	case err != nil:
		s.readError(w, runID, err)
	default:
		writeJSON(w, http.StatusOK, api.RunResponse{RunID: e.ExecutionID, TraceID: traceID(e.ExecutionID), Status: e.Status})
	}
}

// parseRunRequest reads the body of POST /v1/runs: one JSON object naming
// the workflow to run. unknown refuses a member the body should not have;
// it is answered after a keyed replay, as a start's is.
func parseRunRequest(body []byte) (req api.RunRequest, unknown, rej *rejection) {
	if unknown, rej = decodeObject(body, &req, "a run's body"); rej != nil {
		return req, nil, rej
	}
	if req.Workflow == "" {
		return req, nil, reject(http.StatusBadRequest, api.CodeMissingWorkflow, "workflow", `the body names no "workflow" to run`)
	}
	if err := dedup.ValidateName(req.Workflow); err != nil {
		return req, nil, reject(http.StatusBadRequest, api.CodeInvalidWorkflowName, "workflow", err.Error())
	}
	return req, unknown, nil
}

// arcFlowSource is how an external callback's legacy X-ArcFlow-Signature
// is verified: "sha256=" and the hex HMAC-SHA256 of the body as sent,
// under one of the secrets.
func arcFlowSource(secrets []string) webhook.Source {
	return webhook.Source{Name: "arcflow", Kind: webhook.KindHMAC, Secrets: secrets,
		Header: HeaderArcFlowSignature, Prefix: "sha256=", Encoding: webhook.EncodingHex}
}

// callbackTarget is what an external callback's X-Harvest-Signature is
// bound to besides its body: the method, the path as sent (which names
// the run and the binding) and the X-Idempotency-Key as sent ("" for
// none).
func callbackTarget(r *http.Request, key string) webhook.Target {
	return webhook.Target{Method: r.Method, Path: r.URL.EscapedPath(), IdempotencyKey: key}
}

// verifyCallback checks an external callback's signature: its
// X-Harvest-Signature, bound to the request and no older than the
// tolerance; or, only with ArcFlowLegacyBodyOnly and when the request
// carries no X-Harvest-Signature, its X-ArcFlow-Signature over the body
// alone.
func (s *Server) verifyCallback(r *http.Request, key string, body []byte) error {
	_, bound := r.Header[http.CanonicalHeaderKey(webhook.HeaderHarvestSignature)]
	if s.cfg.ArcFlowLegacyBodyOnly && !bound {
		_, err := webhook.Verify(arcFlowSource(s.cfg.ArcFlowSecrets), r.Header, body, time.Now())
		return err
	}
	err := webhook.VerifyBound(s.cfg.ArcFlowSecrets, webhook.DefaultTolerance, r.Header, callbackTarget(r, key), body, time.Now())
	if err != nil && !bound && r.Header.Get(HeaderArcFlowSignature) != "" {
		return fmt.Errorf("%w: %s, which signs the body alone, is not taken here; sign the callback with %s (docs/arcflow.md)",
			err, HeaderArcFlowSignature, webhook.HeaderHarvestSignature)
	}
	return err
}

// externalPayload checks an external callback's body, as sent: blank is
// no payload, anything else must be one JSON value PostgreSQL can store.
func externalPayload(raw []byte) (json.RawMessage, *rejection) {
	body := bytes.TrimSpace(raw)
	if len(body) == 0 {
		return nil, nil
	}
	if !json.Valid(body) {
		return nil, reject(http.StatusBadRequest, api.CodeInvalidJSON, "", "the callback body is not JSON")
	}
	if rej := unstorablePayload(body, "payload"); rej != nil {
		return nil, rej
	}
	return body, nil
}

// handleRunExternal is POST /v1/runs/{run_id}/external/{binding_id}: the
// body is delivered to the run as the signal binding_id, deduplicated by
// X-Idempotency-Key through the scheduler's durable signal claims (per
// run), so a duplicate is caught whichever replica takes it, and after a
// restart.
func (s *Server) handleRunExternal(w http.ResponseWriter, r *http.Request) {
	runID, bindingID := r.PathValue("run_id"), r.PathValue("binding_id")
	// The signature is over the body exactly as sent.
	raw, rej := readRaw(w, r, s.cfg.MaxBodyBytes)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	keyVals, keyed := r.Header[http.CanonicalHeaderKey("X-Idempotency-Key")]
	if len(s.cfg.ArcFlowSecrets) > 0 {
		if err := s.verifyCallback(r, strings.Join(keyVals, ","), raw); err != nil {
			// A run is an execution (its run_id the execution id), whose
			// workflow is not read for a refused request.
			logattr.With(s.log, runID, "", "").Warn("external callback refused", "binding_id", bindingID, "err", err)
			writeError(w, http.StatusUnauthorized, api.CodeInvalidSignature, err.Error())
			return
		}
	}
	var key string
	if keyed {
		var err error
		if key, err = dedup.ValidateKey(strings.Join(keyVals, ",")); err != nil {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidIdempotencyKey, "idempotency_key", err.Error())
			return
		}
	}
	runID, err := canonicalExecutionID(runID)
	if err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidExecutionID, "run_id", err.Error())
		return
	}
	if err := dedup.ValidateName(bindingID); err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidBindingID, "binding_id", err.Error())
		return
	}
	if !s.executionVisible(w, r, runID) {
		return
	}
	payload, rej := externalPayload(raw)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	status, answer := s.sendSignal(r, signalCommand(runID, bindingID, payload, key))
	if sr, ok := answer.(api.SignalResponse); ok {
		resp := api.ExternalResponse{RunID: runID, BindingID: bindingID, Status: "accepted"}
		switch {
		case sr.SignalDelivered == nil:
			// Durable, not applied yet: it will be, once.
			resp.CommandID = sr.CommandID
		case !*sr.SignalDelivered:
			resp.Status = "already_processed"
		}
		answer = resp
	}
	writeAnswer(w, status, answer)
}
