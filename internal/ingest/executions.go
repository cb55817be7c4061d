package ingest

import (
	"net/http"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// handleGetExecution is GET /api/harvest/executions/{execution_id}.
func (s *Server) handleGetExecution(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("execution_id")
	if !s.readable(w, id) {
		return
	}
	e, err := store.GetExecution(r.Context(), s.cfg.DB, id)
	if err == nil && !sees(r.Context(), e.WorkflowName) {
		err = store.ErrExecutionNotFound
	}
	if err != nil {
		s.readError(w, id, err)
		return
	}
	writeJSON(w, http.StatusOK, viewOf(e))
}

// handleListExecutions is GET /api/harvest/executions, newest first
// (?workflow=, ?status=, ?limit=).
func (s *Server) handleListExecutions(w http.ResponseWriter, r *http.Request) {
	if s.cfg.DB == nil {
		writeError(w, http.StatusServiceUnavailable, client.CodeUnavailable, "this ingest has no database to read from")
		return
	}
	q := r.URL.Query()
	f := store.ListFilter{WorkflowName: q.Get("workflow"), Status: q.Get("status"), Limit: 50}
	if f.WorkflowName != "" && dedup.ValidateName(f.WorkflowName) != nil {
		writeFieldError(w, http.StatusBadRequest, client.CodeInvalidWorkflowName, "workflow", "not a workflow name")
		return
	}
	if f.Status != "" && !wire.ValidStatus(f.Status) {
		writeFieldError(w, http.StatusBadRequest, client.CodeInvalidStatus, "status", "want Running, Completed, Failed, Cancelled, Terminated or TimedOut")
		return
	}
	var ok bool
	if f.Limit, ok = queryLimit(w, q, f.Limit); !ok {
		return
	}
	if p := principalOf(r.Context()); p != nil && p.Workflows() != nil {
		// A token limited to some workflows lists only theirs.
		if f.WorkflowName != "" && !p.Sees(f.WorkflowName) {
			writeJSON(w, http.StatusOK, client.ListExecutionsResponse{Executions: []client.Execution{}})
			return
		}
		f.WorkflowNames = p.Workflows()
	}
	execs, err := store.ListExecutions(r.Context(), s.cfg.DB, f)
	if err != nil {
		s.readError(w, "", err)
		return
	}
	out := make([]client.Execution, 0, len(execs))
	for _, e := range execs {
		out = append(out, viewOf(e))
	}
	writeJSON(w, http.StatusOK, client.ListExecutionsResponse{Executions: out})
}

// viewOf is the JSON form of an execution.
func viewOf(e *store.Execution) client.Execution {
	return client.Execution{
		ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, Status: e.Status,
		Input: wire.OrNull(e.Input), Result: wire.OrNull(e.Result), Error: wire.OrNull(e.Error),
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, ClosedAt: e.ClosedAt, StartedBy: deref(e.StartedBy),
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
