package ingest

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// handleListChildren is GET
// /api/harvest/executions/{execution_id}/children: the child workflows
// the execution started, as its row keeps them.
func (s *Server) handleListChildren(w http.ResponseWriter, r *http.Request) {
	id, ok := pathExecutionID(w, r, "execution_id")
	if !ok || !s.readable(w) {
		return
	}
	rctx, cancel := s.readContext(r.Context())
	defer cancel()
	e, err := store.GetExecution(rctx, s.poolOf(id), id)
	if err == nil && !sees(r.Context(), e.WorkflowName) {
		err = store.ErrExecutionNotFound
	}
	if err != nil {
		s.readError(w, id, err)
		return
	}
	out := api.ListChildrenResponse{ExecutionID: id, Status: e.Status, Children: []api.Child{}}
	if e.Children != nil {
		for _, ch := range e.Children.Children {
			out.Children = append(out.Children, api.Child{ChildID: ch.ChildID, StartedBy: ch.StartedBy, WorkflowName: ch.WorkflowName,
				WorkflowID: ch.WorkflowID, ExecutionID: ch.ExecutionID, Status: ch.Status, ParentClosePolicy: cmp.Or(ch.ClosePolicy, wire.ParentCloseTerminate),
				CancelRequested: ch.CancelRequested})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleGetExecution is GET /api/harvest/executions/{execution_id}.
func (s *Server) handleGetExecution(w http.ResponseWriter, r *http.Request) {
	id, ok := pathExecutionID(w, r, "execution_id")
	if !ok || !s.readable(w) {
		return
	}
	e, err := store.GetExecution(r.Context(), s.poolOf(id), id)
	if err == nil && !sees(r.Context(), e.WorkflowName) {
		err = store.ErrExecutionNotFound
	}
	if err != nil {
		s.readError(w, id, err)
		return
	}
	details, err := store.GetExecutionDetails(r.Context(), s.poolOf(id), e, s.cfg.SearchAttributes[e.WorkflowName])
	if err != nil {
		s.readError(w, id, err)
		return
	}
	view := executionView(e)
	view.SearchAttributes = details.SearchAttributes
	view.PendingActivities = pendingActivities(details.OpenActivities)
	view.WaitingForWorker = s.waitingForWorker(r.Context(), e.Status, e.WorkflowName, e.TaskQueue)
	switch {
	case view.WaitingForWorker:
		view.WaitingForWorkers = append(view.WaitingForWorkers, api.WaitingFor{Kind: api.WaitingForWorkflow, Name: e.WorkflowName,
			TaskQueue: e.TaskQueue, BuildID: e.PinnedBuild})
	case s.waitingForPinnedBuild(r.Context(), e.Status, e.WorkflowName, e.TaskQueue, e.PinnedBuild):
		// Workers register the workflow, but none of its pinned build.
		view.WaitingForWorker = true
		view.WaitingForWorkers = append(view.WaitingForWorkers, api.WaitingFor{Kind: api.WaitingForWorkflow, Name: e.WorkflowName,
			TaskQueue: e.TaskQueue, BuildID: e.PinnedBuild})
	}
	for _, a := range s.unservedActivities(r.Context(), details.PendingActivities, e.TaskQueue) {
		view.WaitingForActivityWorkers = append(view.WaitingForActivityWorkers, a.Name)
		view.WaitingForWorkers = append(view.WaitingForWorkers, a)
	}
	withDetails(&view, e, details, time.Now())
	writeJSON(w, http.StatusOK, view)
}

// executionView is an execution's row as the API shows it, in a
// description and in a list: its view with its task queue.
func executionView(e *store.Execution) api.Execution {
	view := e.View()
	view.TaskQueue = e.TaskQueue
	return view
}

// withDetails adds to an execution's view what describe shows besides
// its row: its start key's claim, its keyed signals and its completion
// callback.
func withDetails(view *api.Execution, e *store.Execution, d *store.ExecutionDetails, now time.Time) {
	if c := d.Claim; c != nil {
		view.IdempotencyClaim = &api.KeyClaim{FirstSeenAt: c.CreatedAt, ExpiresAt: c.ExpiresAt, Expired: !now.Before(c.ExpiresAt),
			Duplicates: duplicatesOf(c.Duplicates)}
	}
	for _, k := range d.SignalKeys {
		dup := duplicatesOf(k.Duplicates)
		view.SignalKeys = append(view.SignalKeys, api.SignalKey{IdempotencyKey: k.IdempotencyKey, ReceivedAt: k.ReceivedAt,
			Deduplicated: dup.Total() > 0, Duplicates: dup})
	}
	if cb := d.Callback; cb != nil {
		created := cb.CreatedAt
		out := &api.CallbackDelivery{URL: redactURL(cb.URL), Status: api.CallbackPending, Attempts: cb.Attempts,
			LastError: deref(cb.LastError), DeliveredAt: cb.DeliveredAt, FailedAt: cb.FailedAt, CreatedAt: &created}
		switch {
		case cb.DeliveredAt != nil:
			out.Status = api.CallbackDelivered
		case cb.FailedAt != nil:
			out.Status = api.CallbackFailed
		default:
			next := cb.NextAttemptAt
			out.NextAttemptAt = &next
		}
		view.CompletionCallback = out
	} else if e.CompletionCallback != nil {
		view.CompletionCallback = &api.CallbackDelivery{URL: redactURL(*e.CompletionCallback), Status: api.CallbackWaiting}
	}
}

func duplicatesOf(d store.Duplicates) api.DuplicateCounts {
	return api.DuplicateCounts{Replay: d.Replay, Broker: d.Broker, Claim: d.Claim}
}

// redactURL hides the password a URL may carry; a URL that does not
// parse is shown as it is (ingest checked it when it took the start).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}

// handleListExecutions is GET /api/harvest/executions, newest first
// (?workflow=, ?status=, ?key_prefix=, ?workflow_id_prefix=,
// ?created_after=, ?created_before=, ?attr.NAME[.OP]=, ?limit=,
// ?cursor=).
func (s *Server) handleListExecutions(w http.ResponseWriter, r *http.Request) {
	if !s.readable(w) {
		return
	}
	q := queryOf(r)
	f, ok := s.listFilter(w, q)
	if !ok {
		return
	}
	f.Limit = 50
	if c := q.Get("cursor"); c != "" {
		after, err := decodeCursor(c)
		if err != nil {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidCursor, "cursor", "not a cursor this API gave (use next_cursor as it came)")
			return
		}
		f.After = after
	}
	if f.Limit, ok = queryLimit(w, q, f.Limit); !ok {
		return
	}
	empty := api.ListExecutionsResponse{Executions: []api.Execution{}}
	if p := principalOf(r.Context()); p != nil && p.Workflows() != nil {
		// A token limited to some workflows lists only theirs.
		if f.WorkflowName != "" && !p.Sees(f.WorkflowName) {
			writeJSON(w, http.StatusOK, empty)
			return
		}
		f.WorkflowNames = p.Workflows()
	}
	limit := f.Limit
	f.Limit++ // one more, to know whether there is a next page
	execs, err := s.listExecutions(r.Context(), f)
	if err != nil {
		s.readError(w, "", err)
		return
	}
	out := empty
	if len(execs) > limit {
		execs = execs[:limit]
		last := execs[limit-1]
		out.NextCursor = encodeCursor(store.ListCursor{CreatedAt: last.CreatedAt, ExecutionID: last.ExecutionID})
	}
	for _, e := range execs {
		out.Executions = append(out.Executions, executionView(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// listFilter reads the filters a list and a count share from q; it
// answers 400 and reports false for one that is malformed.
func (s *Server) listFilter(w http.ResponseWriter, q url.Values) (store.ListFilter, bool) {
	f := store.ListFilter{
		WorkflowName: q.Get("workflow"), Status: q.Get("status"),
		KeyPrefix: q.Get("key_prefix"), WorkflowIDPrefix: q.Get("workflow_id_prefix"),
	}
	if f.WorkflowName != "" && dedup.ValidateName(f.WorkflowName) != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidWorkflowName, "workflow", "not a workflow name")
		return f, false
	}
	if f.Status != "" && !wire.ValidStatus(f.Status) {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidStatus, "status", "want Pending, Running, Completed, Failed, Cancelled, Terminated, TimedOut or ContinuedAsNew")
		return f, false
	}
	for field, v := range map[string]string{"key_prefix": f.KeyPrefix, "workflow_id_prefix": f.WorkflowIDPrefix} {
		if len(v) > dedup.MaxKeyBytes || storable.CheckText(v) != nil {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidPrefix, field,
				fmt.Sprintf("%s must be UTF-8 text without U+0000, at most %d bytes", field, dedup.MaxKeyBytes))
			return f, false
		}
	}
	var ok bool
	if f.CreatedAfter, ok = queryTime(w, q, "created_after"); !ok {
		return f, false
	}
	if f.CreatedBefore, ok = queryTime(w, q, "created_before"); !ok {
		return f, false
	}
	for _, key := range slices.Sorted(maps.Keys(q)) {
		if !strings.HasPrefix(key, "attr.") {
			continue
		}
		c, err := s.cfg.SearchAttributes.ParseCondition(f.WorkflowName, key, q.Get(key))
		if err != nil {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidSearchAttribute, key, err.Error())
			return f, false
		}
		f.Search = append(f.Search, c)
	}
	return f, true
}

// handleCountExecutions is GET /api/harvest/executions/count: how many
// executions the filters of a list match, across the stores.
func (s *Server) handleCountExecutions(w http.ResponseWriter, r *http.Request) {
	if !s.readable(w) {
		return
	}
	f, ok := s.listFilter(w, queryOf(r))
	if !ok {
		return
	}
	if p := principalOf(r.Context()); p != nil && p.Workflows() != nil {
		if f.WorkflowName != "" && !p.Sees(f.WorkflowName) {
			writeJSON(w, http.StatusOK, api.CountExecutionsResponse{})
			return
		}
		f.WorkflowNames = p.Workflows()
	}
	ctx, cancel := s.readContext(r.Context())
	defer cancel()
	var total int64
	for _, db := range s.pools() {
		n, err := store.CountExecutions(ctx, db, f)
		if err != nil {
			s.readError(w, "", err)
			return
		}
		total += n
	}
	writeJSON(w, http.StatusOK, api.CountExecutionsResponse{Count: total})
}

// queryTime reads an RFC 3339 time from q's name; absent is nil.
func queryTime(w http.ResponseWriter, q url.Values, name string) (*time.Time, bool) {
	v := q.Get(name)
	if v == "" {
		return nil, true
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidTime, name, name+" must be an RFC 3339 time, such as 2026-12-04T15:00:00Z")
		return nil, false
	}
	return &t, true
}

// encodeCursor is the opaque next_cursor of a listing that stopped at c.
func encodeCursor(c store.ListCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(time.RFC3339Nano) + " " + c.ExecutionID))
}

// decodeCursor reads a cursor encodeCursor made.
func decodeCursor(s string) (*store.ListCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("decode cursor: %w", err)
	}
	at, id, found := strings.Cut(string(raw), " ")
	if !found {
		return nil, errors.New("decode cursor: no execution id")
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, fmt.Errorf("decode cursor: %w", err)
	}
	if _, err := uuid.Parse(id); err != nil {
		return nil, fmt.Errorf("decode cursor: %w", err)
	}
	return &store.ListCursor{CreatedAt: t, ExecutionID: id}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// listExecutions lists the executions f matches across the stores, in
// ListExecutions' order (newest first, then by id): each store's first
// f.Limit, merged, and the first f.Limit of those.
func (s *Server) listExecutions(ctx context.Context, f store.ListFilter) ([]*store.Execution, error) {
	pages, err := eachStore(ctx, s, func(ctx context.Context, _ int, db *pgxpool.Pool) ([]*store.Execution, error) {
		return store.ListExecutions(ctx, db, f)
	})
	if err != nil {
		return nil, err
	}
	if len(pages) == 1 {
		return pages[0], nil
	}
	var all []*store.Execution
	for _, p := range pages {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(a, b *store.Execution) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ExecutionID, a.ExecutionID)
	})
	return all[:min(len(all), f.Limit)], nil
}

// pendingActivities are an execution's open activities as describe shows
// them.
func pendingActivities(acts []*store.Activity) []api.PendingActivity {
	var out []api.PendingActivity
	for _, a := range acts {
		p := api.PendingActivity{ActivityID: a.ActivityID, ActivityName: a.ActivityName, ScheduledAt: a.ScheduledAt, Attempt: a.Attempt,
			State: api.ActivityRunning, NextAttemptAt: a.RetryAt, LastHeartbeatAt: a.LastHeartbeatAt, HeartbeatDetails: a.HeartbeatDetails,
			CancelRequested: a.Status == store.ActivityCancelRequested}
		if a.RetryAt != nil {
			p.State = api.ActivityRetrying
		}
		if a.LastFailure != nil {
			p.LastFailure, _ = json.Marshal(a.LastFailure)
		}
		out = append(out, p)
	}
	return out
}
