package ingest

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/store"
)

// handleListWorkflows is GET /api/harvest/workflows: each workflow with
// executions, an input schema, a closed admission gate, a live worker
// that registered it or a declaration in the configuration, with its
// counts by status, its schema, its gate and who serves it; a token
// limited to some workflows sees only those.
func (s *Server) handleListWorkflows(w http.ResponseWriter, r *http.Request) {
	if !s.readable(w) {
		return
	}
	var only []string
	if p := principalOf(r.Context()); p != nil {
		only = p.Workflows()
	}
	per, err := eachStore(r.Context(), s, func(ctx context.Context, _ int, db *pgxpool.Pool) (map[string]map[string]int64, error) {
		return store.CountByWorkflow(ctx, db, only)
	})
	counts := map[string]map[string]int64{}
	for _, c := range per {
		for name, byStatus := range c {
			if counts[name] == nil {
				counts[name] = map[string]int64{}
			}
			for status, n := range byStatus {
				counts[name][status] += n
			}
		}
	}
	if err != nil {
		s.readError(w, "", err)
		return
	}
	names := map[string]bool{}
	for name := range counts {
		names[name] = true
	}
	for _, name := range s.schemas.keys() {
		names[name] = true
	}
	for _, g := range s.admission.all() {
		names[g.Workflow] = true
	}
	for name := range s.declared {
		names[name] = true
	}
	workers := s.workers.Names(registry.KindWorkflow, time.Now())
	for name := range workers {
		names[name] = true
	}
	out := api.ListWorkflowsResponse{Workflows: []api.WorkflowSummary{}}
	for name := range names {
		if !sees(r.Context(), name) {
			continue
		}
		sum := api.WorkflowSummary{Name: name, Counts: counts[name], InputSchema: json.RawMessage("null"),
			Admission: api.AdmissionGate{Workflow: name, State: "open"}, Declared: s.declared[name], Workers: workers[name]}
		if sum.Counts == nil {
			sum.Counts = map[string]int64{}
		}
		if sch, ok := s.schemas.get(name); ok {
			sum.InputSchema = sch.Raw()
		}
		if g, ok := s.admission.get(name); ok {
			sum.Admission = g
		}
		out.Workflows = append(out.Workflows, sum)
	}
	slices.SortFunc(out.Workflows, func(a, b api.WorkflowSummary) int { return cmp.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}
