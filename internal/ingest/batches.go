package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Batch operations (docs/batches.md). A batch is created, and cancelled,
// by a batch command on one shard of each store (Layout.BatchShards); the
// scheduler of each runs its part over that store's executions. Ingest
// validates, publishes, and reads the parts back to answer.

// batchMembers are a batch body's string members, by the code their
// refusal gets.
var batchMembers = map[string]string{"reason": api.CodeInvalidReason, "operation": api.CodeInvalidBatch}

// defaultBatchRate and maxBatchRate bound a batch's rate.
const (
	defaultBatchRate = 50
	maxBatchRate     = 1000
)

// batchErrorsShown bounds the errors a batch's answer lists.
const batchErrorsShown = 100

// batchNamespace makes a keyed batch's id from its Idempotency-Key.
var batchNamespace = uuid.MustParse("2f1e6c1a-8a51-4f0e-9d51-5b7f3c2e9a10")

// handleCreateBatch is POST /api/harvest/batches.
func (s *Server) handleCreateBatch(w http.ResponseWriter, r *http.Request) {
	if !s.readable(w) {
		return
	}
	body, rej := s.readBody(w, r)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	var req api.BatchRequest
	unknown, rej := decodeObject(body, &req, "a batch's body")
	if rej == nil {
		rej = unknown
	}
	if rej == nil {
		rej = unstorableBody(body, batchMembers)
	}
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	spec, rej := batchSpec(&req, s.cfg.SearchAttributes, time.Now().UTC())
	if rej == nil && limited(r.Context()) && (spec.Filter.Workflow == "" || !sees(r.Context(), spec.Filter.Workflow)) {
		rej = reject(http.StatusForbidden, api.CodeForbidden, "filter.workflow",
			"a token limited to some workflows runs batches of one of them: name it in filter.workflow")
	}
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	id := uuid.Must(uuid.NewV7()).String()
	key := r.Header.Get("Idempotency-Key")
	if key != "" {
		k, err := dedup.ValidateKey(key)
		if err != nil {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidIdempotencyKey, "Idempotency-Key", err.Error())
			return
		}
		key = k
		// The same key is the same batch: a retry creates the parts that
		// are missing and answers the batch as it stands.
		id = uuid.NewSHA1(batchNamespace, []byte(key)).String()
		if parts, err := s.batchParts(r.Context(), id); err == nil && len(parts) == len(s.cfg.Topology.Layout().BatchShards(id)) {
			writeJSON(w, http.StatusOK, s.batchView(r.Context(), parts))
			return
		}
	}
	for _, shard := range s.cfg.Topology.Layout().BatchShards(id) {
		cmd := &wire.Command{CommandID: dedup.BatchPartCommandID(wire.BatchOpCreate, id, shard), Kind: wire.KindBatch,
			Batch: &wire.BatchCommand{Op: wire.BatchOpCreate, BatchID: id, Spec: spec}}
		if !s.submitBatchCommand(w, r, shard, cmd) {
			return
		}
	}
	parts, err := s.batchParts(r.Context(), id)
	if err != nil {
		s.batchReadError(w, id, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.batchView(r.Context(), parts))
}

// submitBatchCommand publishes a batch command and waits for it to be
// applied; it answers and reports false when it was not.
func (s *Server) submitBatchCommand(w http.ResponseWriter, r *http.Request, shard int, cmd *wire.Command) bool {
	out, _, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	switch {
	case errors.Is(err, errNotAccepted):
		status, body := notAccepted(err, "batch")
		writeAnswer(w, status, body)
		return false
	case errors.Is(err, errOutcomeLate):
		// Durable, and applied soon: the batch is read from its parts,
		// which this request cannot wait for.
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable,
			"the batch was accepted but a scheduler has not applied it yet; retry with the same Idempotency-Key to read it")
		return false
	case out.Error != "":
		writeJSON(w, out.HTTPStatus, api.ErrorResponse{Error: out.Error, Message: out.Message})
		return false
	}
	return true
}

// batchSpec checks a batch request and makes its spec, created at now.
func batchSpec(req *api.BatchRequest, schema searchattr.Schema, now time.Time) (*wire.BatchSpec, *rejection) {
	bad := func(code, field, format string, args ...any) (*wire.BatchSpec, *rejection) {
		return nil, reject(http.StatusBadRequest, code, field, fmt.Sprintf(format, args...))
	}
	spec := &wire.BatchSpec{Operation: req.Operation, Reason: req.Reason, Rate: req.Rate, Before: now}
	switch req.Operation {
	case api.BatchOpCancel, api.BatchOpTerminate:
		if req.Signal != nil || req.Reset != nil {
			return bad(api.CodeInvalidBatch, "operation", "a %s batch takes no signal or reset", req.Operation)
		}
	case api.BatchOpSignal:
		if req.Signal == nil || dedup.ValidateName(req.Signal.Name) != nil {
			return bad(api.CodeInvalidBatch, "signal.name", "a signal batch names its signal: signal.name, letters, digits, '_' and '-'")
		}
		if req.Reset != nil {
			return bad(api.CodeInvalidBatch, "reset", "a signal batch takes no reset")
		}
		spec.Signal = &wire.BatchSignal{Name: req.Signal.Name, Payload: req.Signal.Payload}
	case api.BatchOpReset:
		if req.Reset == nil {
			return bad(api.CodeInvalidBatch, "reset.to", `a reset batch names its point: reset.to, as a reset's "to"`)
		}
		if req.Signal != nil {
			return bad(api.CodeInvalidBatch, "signal", "a reset batch takes no signal")
		}
		target, rej := resetTarget(req.Reset.To)
		if rej != nil {
			rej.body.Error, rej.body.Field = api.CodeInvalidBatch, "reset.to"
			return nil, rej
		}
		spec.Reset = &wire.BatchResetTo{Target: target, ReapplySignals: req.Reset.ReapplySignals == nil || *req.Reset.ReapplySignals}
	default:
		return bad(api.CodeInvalidBatch, "operation", "operation %q: want cancel, terminate, signal or reset", req.Operation)
	}
	switch {
	case req.Rate == 0:
		spec.Rate = defaultBatchRate
	case req.Rate < 1 || req.Rate > maxBatchRate:
		return bad(api.CodeInvalidBatch, "rate", "rate %d: want 1 to %d executions a second", req.Rate, maxBatchRate)
	}
	f, rej := batchFilter(&req.Filter, schema)
	if rej != nil {
		return nil, rej
	}
	f.All = req.All
	if !req.All && f.Workflow == "" && f.Status == "" && f.CreatedAfter == nil && f.CreatedBefore == nil && f.KeyPrefix == "" &&
		f.WorkflowIDPrefix == "" && len(f.Search) == 0 {
		return bad(api.CodeInvalidFilter, "filter", `the filter names no condition: a batch over every execution says "all": true`)
	}
	spec.Filter = f
	return spec, nil
}

// batchStatuses are the statuses a batch filter takes.
var batchStatuses = []string{api.StatusRunning, api.StatusPending, api.StatusCompleted, api.StatusFailed, api.StatusCancelled,
	api.StatusTerminated, api.StatusTimedOut, api.StatusContinuedAsNew}

// batchFilter checks a batch's filter.
func batchFilter(in *api.BatchFilter, schema searchattr.Schema) (wire.BatchFilter, *rejection) {
	bad := func(field, format string, args ...any) (wire.BatchFilter, *rejection) {
		return wire.BatchFilter{}, reject(http.StatusBadRequest, api.CodeInvalidFilter, "filter."+field, fmt.Sprintf(format, args...))
	}
	f := wire.BatchFilter{Workflow: in.Workflow, Status: in.Status, KeyPrefix: in.KeyPrefix, WorkflowIDPrefix: in.WorkflowIDPrefix}
	if in.Workflow != "" {
		if err := dedup.ValidateName(in.Workflow); err != nil {
			return bad("workflow", "workflow %v", err)
		}
	}
	if in.Status != "" && !slices.Contains(batchStatuses, in.Status) {
		return bad("status", "status %q: want one of %s", in.Status, strings.Join(batchStatuses, ", "))
	}
	for _, t := range []struct {
		name string
		in   string
		out  **time.Time
	}{{"created_after", in.CreatedAfter, &f.CreatedAfter}, {"created_before", in.CreatedBefore, &f.CreatedBefore}} {
		if t.in == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, t.in)
		if err != nil {
			return bad(t.name, "%s %q: want an RFC 3339 time such as 2026-12-07T10:00:00Z", t.name, t.in)
		}
		at = at.UTC()
		*t.out = &at
	}
	if f.CreatedAfter != nil && f.CreatedBefore != nil && !f.CreatedAfter.Before(*f.CreatedBefore) {
		return bad("created_after", "created_after %s is not before created_before %s", in.CreatedAfter, in.CreatedBefore)
	}
	for _, name := range slices.Sorted(maps.Keys(in.SearchAttributes)) {
		raw := in.SearchAttributes[name]
		bounds := map[string]json.RawMessage{}
		if json.Unmarshal(raw, &bounds) != nil || len(bounds) == 0 {
			bounds = map[string]json.RawMessage{"": raw} // a value it equals
		}
		for _, op := range slices.Sorted(maps.Keys(bounds)) {
			key := "attr." + name
			if op != "" {
				key += "." + op
			}
			if searchattr.Removed(bounds[op]) {
				// JSON's null would decode as "": no attribute's value is
				// null, and none that is absent can be filtered on.
				return wire.BatchFilter{}, reject(http.StatusBadRequest, api.CodeInvalidFilter, "filter.search_attributes."+name,
					fmt.Sprintf("search attribute %s: null matches nothing: give a value, or bounds (gt, gte, lt, lte)", name))
			}
			value := string(bounds[op])
			var text string
			if json.Unmarshal(bounds[op], &text) == nil {
				value = text
			}
			c, err := schema.ParseCondition(f.Workflow, key, value)
			if err != nil {
				return wire.BatchFilter{}, reject(http.StatusBadRequest, api.CodeInvalidFilter, "filter.search_attributes."+name, err.Error())
			}
			f.Search = append(f.Search, c)
		}
	}
	if len(in.SearchAttributes) > 0 {
		f.SearchAsGiven = in.SearchAttributes
	}
	return f, nil
}

// handleGetBatch is GET /api/harvest/batches/{batch_id}.
func (s *Server) handleGetBatch(w http.ResponseWriter, r *http.Request) {
	if _, parts, ok := s.pathBatch(w, r); ok {
		writeJSON(w, http.StatusOK, s.batchView(r.Context(), parts))
	}
}

// pathBatch reads the parts of the path's batch, one the caller may see;
// it answers and reports false when there is none, or no database.
func (s *Server) pathBatch(w http.ResponseWriter, r *http.Request) (string, []*store.Batch, bool) {
	id, ok := pathBatchID(w, r)
	if !ok || !s.readable(w) {
		return "", nil, false
	}
	parts, err := s.batchParts(r.Context(), id)
	if err == nil && !s.batchVisible(r.Context(), parts) {
		err = store.ErrBatchNotFound
	}
	if err != nil {
		s.batchReadError(w, id, err)
		return "", nil, false
	}
	return id, parts, true
}

// handleCancelBatch is POST /api/harvest/batches/{batch_id}/cancel: each
// part sends no more; what it sent is applied.
func (s *Server) handleCancelBatch(w http.ResponseWriter, r *http.Request) {
	id, parts, ok := s.pathBatch(w, r)
	if !ok {
		return
	}
	for _, p := range parts {
		if p.State != store.BatchRunning {
			continue
		}
		cmd := &wire.Command{CommandID: dedup.BatchPartCommandID(wire.BatchOpCancel, id, p.Shard), Kind: wire.KindBatch,
			Batch: &wire.BatchCommand{Op: wire.BatchOpCancel, BatchID: id}}
		if !s.submitBatchCommand(w, r, p.Shard, cmd) {
			return
		}
	}
	parts, err := s.batchParts(r.Context(), id)
	if err != nil {
		s.batchReadError(w, id, err)
		return
	}
	writeJSON(w, http.StatusOK, s.batchView(r.Context(), parts))
}

// handleListBatches is GET /api/harvest/batches: the newest batches.
func (s *Server) handleListBatches(w http.ResponseWriter, r *http.Request) {
	if !s.readable(w) {
		return
	}
	limit, ok := queryLimit(w, queryOf(r), 50)
	if !ok {
		return
	}
	ctx, cancel := s.readContext(r.Context())
	defer cancel()
	byID := map[string][]*store.Batch{}
	var order []string
	for _, db := range s.pools() {
		// A batch has a part in every store, so the first store lists
		// them all; the others add their parts' counts.
		parts, err := store.ListBatches(ctx, db, nil, limit*len(s.pools()))
		if err != nil {
			s.batchReadError(w, "", err)
			return
		}
		for _, p := range parts {
			if byID[p.BatchID] == nil {
				order = append(order, p.BatchID)
			}
			byID[p.BatchID] = append(byID[p.BatchID], p)
		}
	}
	out := api.ListBatchesResponse{Batches: []api.BatchOperation{}}
	for _, id := range order {
		if len(out.Batches) == limit {
			break
		}
		if parts := byID[id]; s.batchVisible(r.Context(), parts) {
			v := batchSummary(parts)
			out.Batches = append(out.Batches, v)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// batchParts reads batch id's parts from every store.
func (s *Server) batchParts(ctx context.Context, id string) ([]*store.Batch, error) {
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	var out []*store.Batch
	for _, db := range s.pools() {
		parts, err := store.GetBatch(ctx, db, id)
		if errors.Is(err, store.ErrBatchNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, parts...)
	}
	if len(out) == 0 {
		return nil, store.ErrBatchNotFound
	}
	return out, nil
}

// batchVisible says whether the caller's token sees the batch: one
// limited to some workflows sees the batches of those.
func (s *Server) batchVisible(ctx context.Context, parts []*store.Batch) bool {
	return !limited(ctx) || sees(ctx, parts[0].Spec.Filter.Workflow)
}

// batchSummary is the batch its parts make, without its errors.
func batchSummary(parts []*store.Batch) api.BatchOperation {
	first := parts[0]
	spec := first.Spec
	v := api.BatchOperation{BatchID: first.BatchID, Operation: spec.Operation, Reason: spec.Reason, Rate: spec.Rate,
		CreatedAt: first.CreatedAt, Errors: []api.BatchError{}}
	v.Filter = api.BatchFilter{Workflow: spec.Filter.Workflow, Status: spec.Filter.Status, KeyPrefix: spec.Filter.KeyPrefix,
		WorkflowIDPrefix: spec.Filter.WorkflowIDPrefix, SearchAttributes: spec.Filter.SearchAsGiven}
	if t := spec.Filter.CreatedAfter; t != nil {
		v.Filter.CreatedAfter = t.Format(time.RFC3339Nano)
	}
	if t := spec.Filter.CreatedBefore; t != nil {
		v.Filter.CreatedBefore = t.Format(time.RFC3339Nano)
	}
	running, cancelled := false, false
	for _, p := range parts {
		v.Matched += p.Matched
		v.Done += p.Done
		v.Failed += p.Failed
		running = running || p.State == store.BatchRunning
		cancelled = cancelled || p.State == store.BatchCancelled
		if p.FinishedAt != nil && (v.FinishedAt == nil || p.FinishedAt.After(*v.FinishedAt)) {
			v.FinishedAt = p.FinishedAt
		}
	}
	switch {
	case running:
		v.State, v.FinishedAt = api.BatchRunning, nil
	case cancelled:
		v.State = api.BatchCancelled
	default:
		v.State = api.BatchCompleted
	}
	return v
}

// batchView is the batch its parts make, with its first errors.
func (s *Server) batchView(ctx context.Context, parts []*store.Batch) api.BatchOperation {
	v := batchSummary(parts)
	if v.Failed == 0 {
		return v
	}
	ctx, cancel := s.readContext(ctx)
	defer cancel()
	for _, db := range s.pools() {
		items, err := store.BatchErrors(ctx, db, v.BatchID, batchErrorsShown-len(v.Errors))
		if err != nil {
			s.log.Warn("read a batch's errors", "batch_id", v.BatchID, "err", err)
			continue
		}
		for _, it := range items {
			v.Errors = append(v.Errors, api.BatchError{ExecutionID: it.ExecutionID, Error: it.Error, Message: it.Message})
		}
		if len(v.Errors) >= batchErrorsShown {
			break
		}
	}
	return v
}

// batchReadError answers a failed read of batch id.
func (s *Server) batchReadError(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, store.ErrBatchNotFound) {
		writeError(w, http.StatusNotFound, api.CodeBatchNotFound, fmt.Sprintf("no batch %q", id))
		return
	}
	s.log.Warn("read failed", "batch_id", id, "err", err)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the database could not be read; retry")
}

// pathBatchID reads the batch id of the path: a UUID.
func pathBatchID(w http.ResponseWriter, r *http.Request) (string, bool) {
	raw := r.PathValue("batch_id")
	id, err := uuid.Parse(raw)
	if err != nil || id.String() != strings.ToLower(raw) {
		writeError(w, http.StatusNotFound, api.CodeBatchNotFound, fmt.Sprintf("no batch %q: a batch id is a UUID", shownName(raw)))
		return "", false
	}
	return id.String(), true
}
