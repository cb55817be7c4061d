package ingest

import (
	"net/http"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
)

// handleGetHistory is GET /api/harvest/executions/{execution_id}/history:
// the execution's events, oldest first, each its attributes with seq, type
// and at beside them.
func (s *Server) handleGetHistory(w http.ResponseWriter, r *http.Request) {
	id, ok := pathExecutionID(w, r, "execution_id")
	if !ok || !s.readable(w) || !s.executionVisible(w, r, id) {
		return
	}
	events, err := store.GetHistory(r.Context(), s.poolOf(id), id)
	if err != nil {
		s.readError(w, id, err)
		return
	}
	writeJSON(w, http.StatusOK, api.HistoryResponse{Events: store.EventViews(events)})
}
