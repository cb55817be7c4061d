package ingest

import (
	"encoding/json"
	"net/http"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/store"
)

// handleGetHistory is GET /api/harvest/executions/{execution_id}/history:
// the execution's events, oldest first, each its attributes with seq, type
// and at beside them.
func (s *Server) handleGetHistory(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("execution_id")
	if !s.readable(w, id) || !s.executionVisible(w, r, id) {
		return
	}
	events, err := store.GetHistory(r.Context(), s.cfg.DB, id)
	if err != nil {
		s.readError(w, id, err)
		return
	}
	out := make([]client.Event, 0, len(events))
	for _, ev := range events {
		attrs := map[string]any{}
		if len(ev.Attrs) > 0 {
			_ = json.Unmarshal(ev.Attrs, &attrs)
		}
		out = append(out, client.Event{Seq: ev.Seq, Type: ev.Type, At: ev.At, Attrs: attrs})
	}
	writeJSON(w, http.StatusOK, client.HistoryResponse{Events: out})
}
