package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/dedup"
)

// gate is a closed admission gate, as stored in the admission bucket.
type gate struct {
	Workflow string    `json:"workflow"`
	State    string    `json:"state"`
	Reason   string    `json:"reason,omitempty"`
	ClosedAt time.Time `json:"closed_at,omitzero"`
}

// admission mirrors the admission bucket in memory: every ingest replica
// watches it, so a gate closed through one is closed on all.
type admission struct {
	mu     sync.RWMutex
	closed map[string]gate
	kv     jetstream.KeyValue
	stop   func()
}

func newAdmission(kv jetstream.KeyValue) *admission {
	return &admission{closed: map[string]gate{}, kv: kv}
}

// start loads the bucket and follows its changes until stop.
func (a *admission) start(ctx context.Context) error {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := a.kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return fmt.Errorf("watch admission gates: %w", err)
	}
	loaded := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		once := sync.OnceFunc(func() { close(loaded) })
		defer once()
		for e := range w.Updates() {
			if e == nil { // the initial values are in
				once()
				continue
			}
			a.apply(e)
		}
	}()
	a.stop = func() {
		_ = w.Stop()
		cancel()
		<-done
	}
	select {
	case <-loaded:
		return nil
	case <-ctx.Done():
		a.stop()
		return ctx.Err()
	}
}

func (a *admission) apply(e jetstream.KeyValueEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(a.closed, e.Key())
		return
	}
	var g gate
	if err := json.Unmarshal(e.Value(), &g); err != nil {
		return
	}
	a.closed[e.Key()] = g
}

// blocked returns the gate closed for workflow, if any.
func (a *admission) blocked(workflow string) (gate, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	g, ok := a.closed[workflow]
	return g, ok
}

func (s *Server) handleAdmissionClose(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("workflow")
	if err := dedup.ValidateName(name); err != nil {
		writeFieldError(w, http.StatusBadRequest, "invalid_workflow_name", "workflow", err.Error())
		return
	}
	var req struct {
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", fmt.Sprintf("request body is not a JSON object: %v", err))
		return
	}
	req.Reason = strings.TrimSpace(req.Reason)
	if req.Reason == "" {
		writeFieldError(w, http.StatusBadRequest, "reason_required", "reason", "say why the gate closes: it is shown to refused callers")
		return
	}
	g := gate{Workflow: name, State: "closed", Reason: req.Reason, ClosedAt: time.Now().UTC()}
	data, _ := json.Marshal(g)
	e, err := s.cfg.Topology.Admission.Put(r.Context(), name, data)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("store the gate: %v", err))
		return
	}
	s.admission.applyPut(name, g, e)
	s.log.Warn("admission closed", "workflow", name, "reason", req.Reason)
	writeJSON(w, http.StatusOK, g)
}

func (s *Server) handleAdmissionOpen(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("workflow")
	if err := dedup.ValidateName(name); err != nil {
		writeFieldError(w, http.StatusBadRequest, "invalid_workflow_name", "workflow", err.Error())
		return
	}
	if err := s.cfg.Topology.Admission.Delete(r.Context(), name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		writeError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("remove the gate: %v", err))
		return
	}
	s.admission.mu.Lock()
	delete(s.admission.closed, name)
	s.admission.mu.Unlock()
	s.log.Info("admission opened", "workflow", name)
	writeJSON(w, http.StatusOK, gate{Workflow: name, State: "open"})
}

func (s *Server) handleAdmissionList(w http.ResponseWriter, _ *http.Request) {
	s.admission.mu.RLock()
	gates := make([]gate, 0, len(s.admission.closed))
	for _, g := range s.admission.closed {
		gates = append(gates, g)
	}
	s.admission.mu.RUnlock()
	sort.Slice(gates, func(i, j int) bool { return gates[i].Workflow < gates[j].Workflow })
	writeJSON(w, http.StatusOK, map[string]any{"closed": gates})
}

// applyPut records a gate this replica just stored, before the watch
// delivers it, so the closing request's own replica enforces it at once.
func (a *admission) applyPut(name string, g gate, _ uint64) {
	a.mu.Lock()
	a.closed[name] = g
	a.mu.Unlock()
}
