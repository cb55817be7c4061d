package ingest

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// handleConcurrency is GET /api/harvest/workflows/{name}/concurrency?key=:
// how many executions of the workflow run, and wait (Pending), under
// the concurrency start policy's key value key ("" or absent: the
// policy without a key), and its limit. A key no start used is 0 of
// everything.
func (s *Server) handleConcurrency(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if dedup.ValidateName(name) != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidWorkflowName, "name", fmt.Sprintf("workflow %q is not a workflow name", shownName(name)))
		return
	}
	key := r.URL.Query().Get("key")
	if len(key) > startpolicy.MaxKeyBytes || storable.CheckText(key) != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidStartPolicy, "key",
			fmt.Sprintf("key must be UTF-8 text without U+0000, at most %d bytes", startpolicy.MaxKeyBytes))
		return
	}
	if !s.mayUse(w, r, name) || !s.readable(w) {
		return
	}
	shard, err := startpolicy.Shard(s.cfg.Topology.Layout(), name, &wire.StartPolicy{Kind: wire.PolicyConcurrency, Key: key})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
		return
	}
	rctx, cancel := s.readContext(r.Context())
	defer cancel()
	out := api.ConcurrencyResponse{Workflow: name, Key: key}
	out.Running, out.Pending, out.Limit, err = store.ConcurrencyState(rctx, s.poolOfShard(shard), name, key)
	if err != nil && !errors.Is(err, store.ErrNoConcurrencyKey) {
		s.readError(w, "", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
