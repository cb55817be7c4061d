package ingest

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
)

// Query states (harvest.SetQueryState) are read from PostgreSQL, where the
// scheduler upserts them with the workflow task that set them: a read
// needs no worker, and works after the execution closed. A read given
// after_seq waits, up to wait, for a value newer than that seq. The
// scheduler announces on core NATS (broker.StateSubject) the executions
// whose states a batch changed, once it committed; a waiting read is woken
// by the announcement and reads PostgreSQL again, and also reads it every
// defaultStateRecheck, since core NATS may lose a message.

// stateRoute is the route of one query state. It waits, so it is not
// under the read routes' deadline (deadline.go): each of its reads is.
const stateRoute = "GET /api/harvest/executions/{execution_id}/state/{name}"

// defaultStateRecheck is how often a read waiting for a newer state
// reads PostgreSQL again without an announcement (Server.stateRecheck).
const defaultStateRecheck = 2 * time.Second

// handleGetState is GET
// /api/harvest/executions/{execution_id}/state/{name}[?after_seq=&wait=]:
// the state's latest value, with the seq it reflects. Given after_seq
// (0 when only wait is given), it answers at once with a value whose seq
// is greater; else it waits up to wait for one, and answers the value it
// has at the end (the caller compares seq), or 404 state_not_found when
// the state was never set. A closed execution's states change no more:
// it answers at once.
func (s *Server) handleGetState(w http.ResponseWriter, r *http.Request) {
	id, ok := pathExecutionID(w, r, "execution_id")
	if !ok {
		return
	}
	name := r.PathValue("name")
	if err := dedup.ValidateName(name); err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidStateName, "name", fmt.Sprintf("state name: %v", err))
		return
	}
	after, wait, ok := stateWait(w, queryOf(r))
	if !ok || !s.readable(w) {
		return
	}
	ctx := r.Context()
	var woken <-chan struct{}
	if wait > 0 {
		// Registered before the first read, so that a change committed
		// after it wakes this request.
		var stop func()
		woken, stop = s.states.wait(id)
		defer stop()
		// The server's timeouts bound requests that end quickly (its read
		// timeout, 60 s from the request's start, would end this one's
		// context; its write timeout, the commands' waits): this one's
		// are moved past its wait.
		rc, until := http.NewResponseController(w), time.Now().Add(wait+writeMargin)
		_ = rc.SetReadDeadline(until)
		_ = rc.SetWriteDeadline(until)
	}
	deadline := time.Now().Add(wait)
	for {
		st, err := s.readStates(ctx, id, name)
		if err != nil {
			if ctx.Err() == nil {
				s.readError(w, id, err)
			}
			return
		}
		var cur *store.StateRow
		if len(st.States) > 0 {
			cur = &st.States[0]
		}
		remaining := time.Until(deadline)
		if woken == nil || (cur != nil && cur.Seq > after) || api.IsTerminal(st.Status) || remaining <= 0 {
			if cur == nil {
				writeError(w, http.StatusNotFound, api.CodeStateNotFound, fmt.Sprintf("execution %q has no state %q: its workflow code has not set it", id, name))
				return
			}
			writeJSON(w, http.StatusOK, stateView(id, st.Status, *cur))
			return
		}
		t := time.NewTimer(min(remaining, s.stateRecheck))
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
			// The caller went away.
			t.Stop()
			return
		}
		t.Stop()
	}
}

// stateWait reads a state read's after_seq and wait: after_seq a whole
// number (0 when absent: any value is newer than none), wait a Go
// duration from 0 to api.MaxStateWait (0 when absent: no wait). It
// answers 400 and reports false for anything else.
func stateWait(w http.ResponseWriter, q url.Values) (after int, wait time.Duration, ok bool) {
	if v, given := q["after_seq"]; given {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 0 {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidAfterSeq, "after_seq", "after_seq must be a whole number from 0: the seq of the value you have")
			return 0, 0, false
		}
		after = n
	}
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > api.MaxStateWait {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidWait, "wait",
				fmt.Sprintf("wait must be a duration from 0s to %s, such as 30s", api.MaxStateWait))
			return 0, 0, false
		}
		wait = d
	}
	return after, wait, true
}

// handleListStates is GET /api/harvest/executions/{execution_id}/state:
// every query state of the execution, by name.
func (s *Server) handleListStates(w http.ResponseWriter, r *http.Request) {
	id, ok := pathExecutionID(w, r, "execution_id")
	if !ok || !s.readable(w) {
		return
	}
	st, err := s.readStates(r.Context(), id, "")
	if err != nil {
		s.readError(w, id, err)
		return
	}
	out := api.ListStatesResponse{ExecutionID: id, Status: st.Status, States: make([]api.State, 0, len(st.States))}
	for _, row := range st.States {
		out.States = append(out.States, stateView(id, st.Status, row))
	}
	writeJSON(w, http.StatusOK, out)
}

// readStates reads execution id's state name (all of them for ""), under
// the read deadline; an execution the caller's token may not see is not
// found.
func (s *Server) readStates(ctx context.Context, id, name string) (*store.ExecutionStates, error) {
	rctx, cancel := s.readContext(ctx)
	defer cancel()
	st, err := store.GetStates(rctx, s.poolOf(id), id, name)
	if err == nil && !sees(ctx, st.WorkflowName) {
		err = store.ErrExecutionNotFound
	}
	return st, err
}

// stateView is a stored state as the API answers it.
func stateView(id, status string, row store.StateRow) api.State {
	return api.State{ExecutionID: id, Name: row.Name, Value: row.Value, Seq: row.Seq, UpdatedAt: row.UpdatedAt.UTC(), Status: status}
}
