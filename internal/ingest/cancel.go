package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/wire"
)

// handleCancel is POST /api/harvest/executions/{execution_id}/cancel: it
// publishes a cancellation and answers from its outcome.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	var req api.CancelRequest
	s.closeExecution(w, r, wire.KindCancel, &req.Reason, &req, "cancellation")
}

// handleTerminate is POST
// /api/harvest/executions/{execution_id}/terminate: as a cancellation,
// but the execution closes as Terminated.
func (s *Server) handleTerminate(w http.ResponseWriter, r *http.Request) {
	var req api.TerminateRequest
	s.closeExecution(w, r, wire.KindTerminate, &req.Reason, &req, "termination")
}

// closeExecution publishes a command of kind (cancel or terminate) for
// the execution of the path, its reason read from the optional body into
// req (whose Reason is reason), and answers from its outcome: 200 with
// the execution's status (also when it had closed already, which changes
// nothing), 404 for an unknown execution, 202 when the outcome is late.
// A termination's command id is derived from the execution, so a retry
// is dropped by the broker and answered from the first one's outcome. A
// cancellation's is fresh: the scheduler records one request however
// often it comes, and each is answered with the execution as it stands.
func (s *Server) closeExecution(w http.ResponseWriter, r *http.Request, kind string, reason *string, req any, what string) {
	executionID, ok := pathExecutionID(w, r, "execution_id")
	if !ok {
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
	if len(body) > 0 {
		unknown, rej := decodeObject(body, req, "a "+what+"'s body")
		if rej == nil {
			rej = unknown
		}
		if rej == nil {
			rej = unstorableBody(body, closeMembers)
		}
		if rej != nil {
			writeJSON(w, rej.status, rej.body)
			return
		}
	}
	cmd := &wire.Command{Kind: kind}
	switch kind {
	case wire.KindCancel:
		grace, rej := cancelGrace(req.(*api.CancelRequest).CancelGrace)
		if rej != nil {
			writeJSON(w, rej.status, rej.body)
			return
		}
		cmd.CommandID = dedup.NewID()
		cmd.Cancel = &wire.CancelCommand{ExecutionID: executionID, Reason: *reason, GraceMS: grace.Milliseconds()}
	case wire.KindTerminate:
		cmd.CommandID = dedup.TerminateCommandID(executionID)
		cmd.Terminate = &wire.TerminateCommand{ExecutionID: executionID, Reason: *reason}
	}
	shard := s.cfg.Topology.Layout().ExecutionShard(executionID)
	out, _, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	switch {
	case errors.Is(err, errNotAccepted):
		status, body := notAccepted(err, what)
		writeAnswer(w, status, body)
	case errors.Is(err, errOutcomeLate):
		writeJSON(w, http.StatusAccepted, api.AcceptedResponse{CommandID: cmd.CommandID, Status: "accepted"})
	case out.Error != "":
		writeJSON(w, out.HTTPStatus, api.ErrorResponse{Error: out.Error, Message: out.Message})
	case kind == wire.KindTerminate:
		writeJSON(w, http.StatusOK, api.TerminateResponse{
			ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status,
		})
	default:
		writeJSON(w, http.StatusOK, api.CancelResponse{
			ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status,
			CancelRequested: out.CancelRequested,
		})
	}
}

// maxCancelGrace bounds a cancel's cancel_grace.
const maxCancelGrace = 10 * 365 * 24 * time.Hour

// cancelGrace reads a cancel's cancel_grace: 0 when it has none.
func cancelGrace(v string) (time.Duration, *rejection) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, reject(http.StatusBadRequest, api.CodeInvalidCancelGrace, "cancel_grace", fmt.Sprintf("cancel_grace %q: want a duration such as \"30s\" or \"5m\"", v))
	case d < time.Millisecond:
		return 0, reject(http.StatusBadRequest, api.CodeInvalidCancelGrace, "cancel_grace", fmt.Sprintf("cancel_grace %s: want a positive duration of at least 1ms", d))
	case d > maxCancelGrace:
		return 0, reject(http.StatusBadRequest, api.CodeInvalidCancelGrace, "cancel_grace", fmt.Sprintf("cancel_grace %s is beyond the maximum of ten years", d))
	}
	return d, nil
}
