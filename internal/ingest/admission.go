package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/storable"
)

func decodeGate(_ string, value []byte) (api.AdmissionGate, error) {
	var g api.AdmissionGate
	err := json.Unmarshal(value, &g)
	return g, err
}

func (s *Server) handleAdmissionClose(w http.ResponseWriter, r *http.Request) {
	name, ok := s.pathWorkflow(w, r, "workflow")
	if !ok {
		return
	}
	body, rej := readRaw(w, r, 64<<10)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	var req api.CloseAdmissionRequest
	unknown, rej := decodeObject(bytes.TrimSpace(body), &req, "a gate's body")
	if rej == nil {
		rej = unknown
	}
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	req.Reason = strings.TrimSpace(req.Reason)
	if req.Reason == "" {
		writeFieldError(w, http.StatusBadRequest, api.CodeReasonRequired, "reason", "say why the gate closes: it is shown to refused callers")
		return
	}
	// The reason is shown to refused callers, in the console and in the
	// logs: text, on a line, without U+0000 or other control characters.
	if err := storable.CheckIdentifier(req.Reason); err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidReason, "reason", "reason "+err.Error()+": give it as text on one line")
		return
	}
	g := api.AdmissionGate{Workflow: name, State: "closed", Reason: req.Reason, ClosedAt: time.Now().UTC()}
	data, _ := json.Marshal(g)
	if _, err := s.cfg.Topology.Admission.Put(r.Context(), name, data); err != nil {
		s.unavailable(w, r, "could not store the gate; retry", err)
		return
	}
	// Enforced here at once; the other replicas follow through the watch.
	s.admission.set(name, g)
	s.log.Warn("admission closed", "workflow", name, "reason", req.Reason)
	writeJSON(w, http.StatusOK, g)
}

func (s *Server) handleAdmissionOpen(w http.ResponseWriter, r *http.Request) {
	name, ok := s.pathWorkflow(w, r, "workflow")
	if !ok {
		return
	}
	if err := s.cfg.Topology.Admission.Delete(r.Context(), name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		s.unavailable(w, r, "could not remove the gate; retry", err)
		return
	}
	s.admission.remove(name)
	s.log.Info("admission opened", "workflow", name)
	writeJSON(w, http.StatusOK, api.AdmissionGate{Workflow: name, State: "open"})
}

func (s *Server) handleAdmissionList(w http.ResponseWriter, r *http.Request) {
	gates := []api.AdmissionGate{}
	for _, g := range s.admission.all() {
		if sees(r.Context(), g.Workflow) {
			gates = append(gates, g)
		}
	}
	sort.Slice(gates, func(i, j int) bool { return gates[i].Workflow < gates[j].Workflow })
	writeJSON(w, http.StatusOK, api.ListAdmissionResponse{Closed: gates})
}
