package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// handleGetCommand is GET /api/harvest/commands/{command_id}: "accepted"
// while the command waits, else the answer its request would have had.
func (s *Server) handleGetCommand(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("command_id")
	if _, err := uuid.Parse(id); err != nil {
		writeError(w, http.StatusNotFound, api.CodeCommandNotFound, fmt.Sprintf("no command %q", id))
		return
	}
	out, ok, err := s.findOutcome(r.Context(), id)
	if !ok {
		// Not applied yet, or PostgreSQL cannot say: a command ingest
		// accepted without knowing its outcome is "accepted" either way.
		accepted, aerr := s.cfg.Topology.WasAccepted(r.Context(), id)
		switch {
		case aerr == nil && accepted:
			writeJSON(w, http.StatusOK, api.AcceptedResponse{CommandID: id, Status: api.CommandAccepted})
		case err != nil || aerr != nil:
			s.unavailable(w, r, fmt.Sprintf("could not read command %q; retry", id), errors.Join(err, aerr))
		default:
			writeError(w, http.StatusNotFound, api.CodeCommandNotFound, fmt.Sprintf("no command %q is known (outcomes are kept for a limited time)", id))
		}
		return
	}
	if out.WorkflowName != "" && !sees(r.Context(), out.WorkflowName) {
		writeError(w, http.StatusNotFound, api.CodeCommandNotFound, fmt.Sprintf("no command %q is known (outcomes are kept for a limited time)", id))
		return
	}
	if out.Deferred {
		// Held back by its workflow's start policy: the execution it
		// becomes part of replaces this outcome when it begins.
		writeJSON(w, http.StatusOK, api.AcceptedResponse{CommandID: id, Status: api.CommandDeferred})
		return
	}
	status, body := startAnswer(out)
	if out.Kind == wire.KindSignalWithStart && out.Error == "" {
		status, body = http.StatusOK, api.SignalWithStartResponse{
			ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status,
			StartedFresh: out.StartedFresh, SignalDelivered: out.SignalDelivered,
		}
		if out.StartedFresh {
			status = http.StatusCreated
		}
	}
	if out.Kind == wire.KindReset && out.Error == "" {
		status, body = http.StatusCreated, api.ResetResponse{ExecutionID: out.ExecutionID, Status: out.Status, WorkflowID: out.WorkflowID,
			WorkflowName: out.WorkflowName, ResetFrom: out.ResetFrom, PointSeq: out.PointSeq, Deduplicated: out.Deduplicated}
	}
	if out.Kind == wire.KindSignal {
		status, body = http.StatusAccepted, api.SignalResponse{OK: true, SignalDelivered: &out.SignalDelivered}
		if out.Error != "" {
			status, body = out.HTTPStatus, api.ErrorResponse{Error: out.Error, Message: out.Message}
		}
	}
	state := api.CommandApplied
	if out.Error == api.CodeCommandRejected {
		// Set aside by the scheduler: never applied, and never will be.
		state = api.CommandRejected
	}
	// body is one of package api's answer types, which always encode.
	outcome, _ := json.Marshal(body)
	writeJSON(w, http.StatusOK, api.CommandResponse{CommandID: id, Status: state, HTTPStatus: status, Outcome: outcome})
}

// findOutcome reads a command's outcome in whichever store applied it.
func (s *Server) findOutcome(ctx context.Context, id string) (wire.Outcome, bool, error) {
	if !s.hasDB() {
		return wire.Outcome{}, false, errors.New("no database configured")
	}
	type found struct {
		out wire.Outcome
		ok  bool
	}
	per, err := eachStore(ctx, s, func(ctx context.Context, _ int, db *pgxpool.Pool) (found, error) {
		out, ok, err := store.GetOutcome(ctx, db, id)
		return found{out, ok}, err
	})
	for _, f := range per {
		if f.ok {
			return f.out, true, nil
		}
	}
	return wire.Outcome{}, false, err
}
