package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
)

// The retention routes tell what the schedulers' pruners have yet to
// delete, and ask them to delete it now. Ingest reads PostgreSQL and
// publishes on core NATS; the schedulers do the deleting
// (internal/scheduler/retention.go).

// handleRetention answers GET /api/harvest/retention (?as_of=): the
// executions past retention at as_of (default now), by workflow.
func (s *Server) handleRetention(w http.ResponseWriter, r *http.Request) {
	asOf, ok := queryTime(w, queryOf(r), "as_of")
	if !ok {
		return
	}
	at := s.cfg.Now()
	if asOf != nil {
		at = *asOf
	}
	rep, ok := s.retentionReport(w, r, at)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// handlePrune answers POST /api/harvest/retention/prune: it reads what is
// past retention now, then asks every scheduler to prune at once, and
// answers 202 with what it read. A scheduler prunes only the shards it
// holds, so the request goes to all of them; one answering is enough to
// know the request was heard. None answering is 503: nothing would prune.
func (s *Server) handlePrune(w http.ResponseWriter, r *http.Request) {
	if p := principalOf(r.Context()); p != nil && p.Workflows() != nil {
		// A prune acts on every workflow's executions.
		s.metrics.refused.WithLabelValues("forbidden").Inc()
		s.log.Info("request refused", "method", r.Method, "path", r.URL.Path, "token", p.Name(), "reason", "limited to some workflows")
		writeError(w, http.StatusForbidden, api.CodeForbidden,
			fmt.Sprintf("token %q is limited to the workflows %s; a prune acts on every workflow", p.Name(), strings.Join(p.Workflows(), ", ")))
		return
	}
	rep, ok := s.retentionReport(w, r, s.cfg.Now())
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PublishTimeout)
	defer cancel()
	if _, err := s.cfg.NC.RequestWithContext(ctx, broker.PruneSubject, nil); err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			s.unavailable(w, r, "no scheduler is running to prune; start one", err)
			return
		}
		s.unavailable(w, r, "could not ask the schedulers to prune; retry", err)
		return
	}
	s.log.Info("asked the schedulers to prune executions past their retention now",
		"token", callerName(r.Context()), "past_retention", rep.PastRetention, "closed_without_prune_after", rep.ClosedWithoutPruneAfter)
	writeJSON(w, http.StatusAccepted, rep)
}

// retentionReport reads what is past retention at asOf, by the workflows
// the caller may see; it has answered 503 and reports false when it
// cannot.
func (s *Server) retentionReport(w http.ResponseWriter, r *http.Request, asOf time.Time) (api.RetentionResponse, bool) {
	if !s.readable(w) {
		return api.RetentionResponse{}, false
	}
	layout := s.cfg.Topology.Layout()
	per, err := eachStore(r.Context(), s, func(ctx context.Context, i int, db *pgxpool.Pool) ([]store.PastRetention, error) {
		shards := make([]int, layout.Shards)
		for j := range shards {
			shards[j] = layout.Base(i) + j
		}
		return store.ListPastRetention(ctx, db, shards, asOf)
	})
	if err != nil {
		s.readError(w, "", err)
		return api.RetentionResponse{}, false
	}
	rows := mergeRetention(per)
	rep := api.RetentionResponse{AsOf: asOf.UTC(), Workflows: make([]api.WorkflowRetention, 0, len(rows))}
	for _, row := range rows {
		if !sees(r.Context(), row.WorkflowName) {
			continue
		}
		wr := api.WorkflowRetention{WorkflowName: row.WorkflowName, PastRetention: row.Executions, ClosedWithoutPruneAfter: row.Unset}
		if row.Oldest != nil {
			oldest := row.Oldest.UTC()
			wr.OldestPruneAfter = &oldest
		}
		rep.Workflows = append(rep.Workflows, wr)
		rep.PastRetention += row.Executions
		rep.ClosedWithoutPruneAfter += row.Unset
	}
	return rep, true
}

// mergeRetention adds up the stores' rows of each workflow, in the order
// of their names.
func mergeRetention(per [][]store.PastRetention) []store.PastRetention {
	if len(per) == 1 {
		return per[0]
	}
	by := map[string]*store.PastRetention{}
	var names []string
	for _, rows := range per {
		for _, row := range rows {
			have, ok := by[row.WorkflowName]
			if !ok {
				r := row
				by[row.WorkflowName] = &r
				names = append(names, row.WorkflowName)
				continue
			}
			have.Executions += row.Executions
			have.Unset += row.Unset
			if row.Oldest != nil && (have.Oldest == nil || row.Oldest.Before(*have.Oldest)) {
				have.Oldest = row.Oldest
			}
		}
	}
	slices.Sort(names)
	out := make([]store.PastRetention, 0, len(names))
	for _, n := range names {
		out = append(out, *by[n])
	}
	return out
}
