package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Updates (docs/long-workflows.md#updating-a-running-workflow): POST
// /api/harvest/executions/{execution_id}/updates/{name} publishes an
// update command, which the scheduler admits (or refuses: 404, 409, 429)
// on the execution's shard; the request then waits for the update's
// answer, which the workflow gives in a workflow task, announced by the
// scheduler on broker.UpdateSubject once stored. GET
// /api/harvest/executions/{execution_id}/updates/{update_id} reads an
// update, and can wait for its answer.

// maxUpdateArgsBytes bounds an update's arguments: an update in flight
// rides on its execution's row and on every workflow task until one
// takes it, up to update_max_in_flight of them.
const maxUpdateArgsBytes = 64 << 10

// updateWait bounds how long a request waits for an update's answer
// before it answers 202 with the update as it stands: under the API's
// write timeout.
const updateWait = 20 * time.Second

// maxLongPoll bounds a read's wait parameter.
const maxLongPoll = 30 * time.Second

// updateRecheck is how often a request waiting for an update reads it
// again without an announcement (core NATS may drop one).
const updateRecheck = 2 * time.Second

// handleUpdate is POST /api/harvest/executions/{execution_id}/updates/{name}.
func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request) {
	executionID, ok := pathExecutionID(w, r, "execution_id")
	if !ok {
		return
	}
	name := r.PathValue("name")
	if err := dedup.ValidateName(name); err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidUpdateName, "name", err.Error())
		return
	}
	key, err := signalKey(r)
	if err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidIdempotencyKey, "idempotency_key", err.Error())
		return
	}
	wait := api.UpdateWaitCompleted
	if vals, ok := queryOf(r)["wait"]; ok {
		wait = vals[0]
	}
	if wait != api.UpdateWaitCompleted && wait != api.UpdateWaitAccepted {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidWait, "wait",
			fmt.Sprintf("wait %q: want %s (the default) or %s", wait, api.UpdateWaitCompleted, api.UpdateWaitAccepted))
		return
	}
	if !s.readable(w) || !s.executionVisible(w, r, executionID) {
		return
	}
	args, rej := s.readPayload(w, r)
	if rej == nil && args != nil {
		rej = unstorablePayload(args, "args")
	}
	if rej == nil && len(args) > maxUpdateArgsBytes {
		rej = reject(http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge, "args",
			fmt.Sprintf("an update's arguments are %d bytes, more than the %d an update carries", len(args), maxUpdateArgsBytes))
		rej.body.Limit = maxUpdateArgsBytes
	}
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	id := dedup.NewID()
	if key != "" {
		id = dedup.UpdateCommandID(executionID, key)
	}
	cmd := &wire.Command{CommandID: id, Kind: wire.KindUpdate, Update: &wire.UpdateCommand{
		ExecutionID: executionID, UpdateID: id, Name: name, Args: args, IdempotencyKey: key}}
	shard := s.cfg.Topology.Layout().ExecutionShard(executionID)
	changed, stopWaiting := s.updates.wait(id)
	defer stopWaiting()
	out, duplicate, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	switch {
	case errors.Is(err, errNotAccepted):
		status, body := notAccepted(err, "update")
		writeAnswer(w, status, body)
		return
	case errors.Is(err, errOutcomeLate):
		writeJSON(w, http.StatusAccepted, api.Update{UpdateID: id, ExecutionID: executionID, Name: name, Status: api.UpdateRequested})
		return
	case out.Error != "":
		writeAnswer(w, out.HTTPStatus, api.ErrorResponse{Error: out.Error, Message: out.Message})
		return
	}
	if out.UpdateID != id {
		// The key names an update asked of another run of the chain.
		stopWaiting()
		changed, stopWaiting = s.updates.wait(out.UpdateID)
		defer stopWaiting()
	}
	done := func(u *store.Update) bool {
		return u.Closed() || (wait == api.UpdateWaitAccepted && u.Status != store.UpdateRequested)
	}
	ctx, cancel := context.WithTimeout(r.Context(), updateWait)
	defer cancel()
	u, err := s.awaitUpdate(ctx, executionID, out.UpdateID, changed, done)
	if err != nil {
		s.readError(w, executionID, err)
		return
	}
	view := u.View()
	// A broker duplicate is a retry of the request that asked for it.
	view.Deduplicated = out.Deduplicated || duplicate
	if status, body, refused := view.Refusal(); refused {
		writeJSON(w, status, body)
		return
	}
	status := http.StatusOK
	if !u.Closed() {
		status = http.StatusAccepted
	}
	writeJSON(w, status, view)
}

// awaitUpdate reads update id, of a chain of runs of which executionID
// is one (a chain's runs share its store), until done says it is what
// the caller waits for, or ctx ends (then it returns the update as it
// stands): after each announcement of a change, and every updateRecheck.
func (s *Server) awaitUpdate(ctx context.Context, executionID, id string, changed <-chan struct{}, done func(*store.Update) bool) (*store.Update, error) {
	tick := time.NewTicker(updateRecheck)
	defer tick.Stop()
	for {
		rctx, cancel := s.readContext(context.WithoutCancel(ctx))
		u, err := store.GetUpdate(rctx, s.poolOf(executionID), id)
		cancel()
		if err != nil || done(u) {
			return u, err
		}
		select {
		case <-ctx.Done():
			return u, nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// handleGetUpdate is GET /api/harvest/executions/{execution_id}/updates/{update_id}:
// the update, at once, or once it has its answer when ?wait= (a duration
// up to 30s) is given.
func (s *Server) handleGetUpdate(w http.ResponseWriter, r *http.Request) {
	executionID, ok := pathExecutionID(w, r, "execution_id")
	if !ok {
		return
	}
	updateID, err := canonicalExecutionID(r.PathValue("update_id"))
	if err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidUpdateName, "update_id", "update_id "+err.Error())
		return
	}
	wait, ok := longPollWait(w, r)
	if !ok || !s.readable(w) {
		return
	}
	rctx, cancel := s.readContext(r.Context())
	e, err := store.GetExecution(rctx, s.poolOf(executionID), executionID)
	cancel()
	if err == nil && !sees(r.Context(), e.WorkflowName) {
		err = store.ErrExecutionNotFound
	}
	if err != nil {
		s.readError(w, executionID, err)
		return
	}
	changed, stop := s.updates.wait(updateID)
	defer stop()
	ctx, cancelWait := context.WithTimeout(r.Context(), wait)
	defer cancelWait()
	u, err := s.awaitUpdate(ctx, executionID, updateID, changed, func(u *store.Update) bool { return wait == 0 || u.Closed() })
	if err == nil && u.ChainID != e.Chain() {
		err = store.ErrUpdateNotFound
	}
	switch {
	case errors.Is(err, store.ErrUpdateNotFound):
		writeError(w, http.StatusNotFound, api.CodeUpdateNotFound, fmt.Sprintf("execution %s has no update %s", executionID, updateID))
	case err != nil:
		s.readError(w, executionID, err)
	default:
		writeJSON(w, http.StatusOK, u.View())
	}
}

// longPollWait reads a read's wait parameter: a duration from 0 to
// maxLongPoll (0 when absent). It has answered 400 when it is not one.
func longPollWait(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	vals, ok := queryOf(r)["wait"]
	if !ok {
		return 0, true
	}
	d, err := time.ParseDuration(vals[0])
	if err != nil || d < 0 || d > maxLongPoll {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidWait, "wait",
			fmt.Sprintf("wait %q: want a duration from 0s to %s, such as 30s", vals[0], maxLongPoll))
		return 0, false
	}
	return d, true
}
