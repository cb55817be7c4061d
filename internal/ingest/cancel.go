package ingest

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/wire"
)

// handleCancel is POST /api/harvest/executions/{execution_id}/cancel: it
// publishes a cancellation and answers from its outcome.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	executionID := r.PathValue("execution_id")
	if _, err := uuid.Parse(executionID); err != nil {
		writeError(w, http.StatusNotFound, client.CodeExecutionNotFound, fmt.Sprintf("no execution %q", executionID))
		return
	}
	if !s.executionVisible(w, r, executionID) {
		return
	}
	body, rej := s.readBody(w, r)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	var req client.CancelRequest
	if len(body) > 0 {
		unknown, rej := decodeObject(body, &req, "a cancellation's body")
		if rej == nil {
			rej = unknown
		}
		if rej == nil {
			rej = unstorableBody(body, cancelMembers)
		}
		if rej != nil {
			writeJSON(w, rej.status, rej.body)
			return
		}
	}
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindCancel, Cancel: &wire.CancelCommand{ExecutionID: executionID, Reason: req.Reason}}
	shard := dedup.ExecutionShard(s.cfg.Topology.Shards(), executionID)
	out, _, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	switch {
	case errors.Is(err, errNotAccepted):
		status, body := notAccepted(err, "cancellation")
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, status, body)
	case errors.Is(err, errOutcomeLate):
		writeJSON(w, http.StatusAccepted, client.AcceptedResponse{CommandID: cmd.CommandID, Status: "accepted"})
	case out.Error != "":
		writeJSON(w, out.HTTPStatus, client.ErrorResponse{Error: out.Error, Message: out.Message})
	default:
		writeJSON(w, http.StatusOK, client.CancelResponse{
			ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status,
		})
	}
}
