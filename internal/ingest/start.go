package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// handleStart is POST /api/harvest/workflows/{name}/start.
func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	p, keyErr, rej := s.parseStart(w, r)
	if !s.mayUse(w, r, r.PathValue("name")) {
		return
	}
	if keyErr != nil {
		s.metrics.starts.WithLabelValues("refused").Inc()
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidIdempotencyKey, "idempotency_key", keyErr.Error())
		return
	}
	var status int
	var body any
	if rej != nil {
		status, body = s.refuseOrReplay(w, r, p, rej)
	} else {
		status, body = s.start(r.Context(), p)
	}
	s.traceAnswer(r.Context(), p.name, body)
	writeAnswer(w, status, body)
}

// start publishes a checked start and answers it.
func (s *Server) start(ctx context.Context, p parsedStart) (int, any) {
	layout := s.cfg.Topology.Layout()
	minted := false
	if p.workflowID == "" && p.key == "" && p.policy == nil {
		// Nothing else places it: its fresh workflow_id does, spreading
		// such starts over the shards (and the stores).
		p.workflowID, minted = dedup.NewID(), true
	}
	var shard int
	var err error
	switch {
	case p.policy != nil:
		shard, err = startpolicy.Shard(layout, p.name, p.policy)
	case p.store != "":
		shard, err = layout.PinnedStartShard(p.store, p.name, p.workflowID, p.key)
	default:
		shard, err = layout.StartShard(p.name, p.workflowID, p.key)
	}
	if err != nil {
		return http.StatusServiceUnavailable, api.ErrorResponse{Error: api.CodeUnavailable, Message: fmt.Sprintf("no store takes the start: %v", err)}
	}
	if p.key != "" && p.policy == nil && p.store == "" && layout.HomeShard(p.name, p.workflowID, p.key) != shard {
		// The key's home store is drained: a lookup, which ignores
		// writability, finds a start committed there before.
		if status, body, ok := s.replayFromClaim(ctx, p); ok {
			return status, body
		}
	}
	if p.workflowID == "" {
		p.workflowID, minted = layout.MintWorkflowID(shard, p.name), true
	}
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: p.name, WorkflowID: p.workflowID, WorkflowIDMinted: minted, Input: p.req.Input,
		TaskQueue: p.taskQueue, ReusePolicy: p.req.ReusePolicy, StartAt: p.startAt, AcceptedAt: time.Now().UTC(),
		StartedBy: callerName(ctx), Policy: p.policy, Versioning: p.versioning, PinnedBuild: p.pinnedBuild,
		RunTimeoutMS: p.runTimeout.Milliseconds(), ExecutionTimeoutMS: p.executionTimeout.Milliseconds(),
		Priority: priorityOf(p.req.Priority), SearchAttributes: p.req.SearchAttributes,
	}}
	if p.req.CompletionCallback != nil {
		cmd.Start.CompletionCallback = *p.req.CompletionCallback
	}
	if p.key != "" {
		cmd.CommandID = dedup.StartCommandID(p.name, p.key)
		cmd.Start.IdempotencyKey = p.key
		cmd.Start.Fingerprint = dedup.Fingerprint(p.req.Input)
		cmd.Start.RejectFingerprintMismatch = s.cfg.rejectsFingerprintMismatch(p.name)
	}
	return s.publishStart(ctx, shard, cmd, cmd.CommandID, true)
}

// publishStart publishes a start and answers it from its outcome, or with
// 202 when the outcome does not come within OutcomeWait. A broker
// duplicate is answered from the original's outcome, checked against the
// claim in PostgreSQL; if that claim has expired, the start is published
// once more under a message id derived from the original's sequence, so
// concurrent retries still collapse.
func (s *Server) publishStart(ctx context.Context, shard int, cmd *wire.Command, msgID string, mayRepublish bool) (int, any) {
	out, duplicate, err := s.submit(ctx, shard, cmd, msgID)
	if errors.Is(err, errNotAccepted) {
		return notAccepted(err, "start")
	}
	if errors.Is(err, errOutcomeLate) {
		if duplicate {
			s.tally(ctx, shard, wire.DuplicateOf(cmd, wire.DuplicateBroker))
		}
		s.metrics.starts.WithLabelValues("accepted").Inc()
		return http.StatusAccepted, api.AcceptedResponse{CommandID: cmd.CommandID, Status: "accepted"}
	}
	if !duplicate {
		if out.Deduplicated {
			s.duplicate(ctx, "claim")
			s.withClaim(ctx, cmd.Start, &out)
		}
		s.metrics.starts.WithLabelValues(startResult(out)).Inc()
		return startAnswer(out)
	}
	// The broker dropped this start as a duplicate of one it holds; out is
	// the newest outcome for the key. It answers the retry unless it was a
	// refusal or its claim has lapsed since: then the start is evaluated
	// anew, under a message id derived from that outcome, so concurrent
	// retries still collapse into one message.
	var claim *store.Claim
	if out.Error == "" {
		claim = s.withClaim(ctx, cmd.Start, &out)
	}
	if mayRepublish && (out.Error != "" || (claim == nil && s.hasDB())) {
		return s.publishStart(ctx, shard, cmd, fmt.Sprintf("%s/%d", cmd.CommandID, out.StreamSeq), false)
	}
	if out.Error == "" {
		if claim != nil && cmd.Start.RejectFingerprintMismatch && claim.Fingerprint != "" && claim.Fingerprint != cmd.Start.Fingerprint {
			s.metrics.starts.WithLabelValues("refused").Inc()
			return http.StatusUnprocessableEntity, api.ErrorResponse{Error: api.CodeIdempotencyKeyReused,
				Message: fmt.Sprintf("idempotency key %q was first used with a different input", cmd.Start.IdempotencyKey)}
		}
		out.StartedFresh, out.Deduplicated = false, true
		s.tally(ctx, shard, wire.DuplicateOf(cmd, wire.DuplicateBroker))
	}
	s.metrics.starts.WithLabelValues(startResult(out)).Inc()
	return startAnswer(out)
}

// withClaim brings a replayed start's answer up to date from the claim in
// PostgreSQL (the execution's current status, the claim's window) and
// returns the claim; nil if it has lapsed or cannot be read (then the
// answer stands as recorded).
func (s *Server) withClaim(ctx context.Context, st *wire.StartCommand, out *wire.Outcome) *store.Claim {
	if !s.hasDB() || st.IdempotencyKey == "" {
		return nil
	}
	claim, e, err := s.liveClaim(ctx, st, out.ExecutionID)
	if err != nil {
		logattr.With(s.log, out.ExecutionID, st.WorkflowName, out.CommandID).Warn("read claim", "idempotency_key", st.IdempotencyKey, "err", err)
		return nil
	}
	if claim != nil {
		out.ExecutionID, out.WorkflowName, out.WorkflowID, out.Status = e.ExecutionID, e.WorkflowName, e.WorkflowID, e.Status
		out.FirstSeenAt, out.ExpiresAt = &claim.CreatedAt, &claim.ExpiresAt
	}
	return claim
}

// liveClaim reads a keyed start's live claim: in the store of the
// execution its outcome named (a claim lives with its execution), else
// in the store of its key's home shard.
func (s *Server) liveClaim(ctx context.Context, st *wire.StartCommand, executionID string) (*store.Claim, *store.Execution, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	workflowID := st.WorkflowID
	if st.WorkflowIDMinted {
		workflowID = ""
	}
	pool := s.claimPool(st.WorkflowName, workflowID, st.IdempotencyKey)
	if executionID != "" {
		pool = s.poolOf(executionID)
	}
	return store.LiveClaim(ctx, pool, store.ClaimRef{WorkflowName: st.WorkflowName, IdempotencyKey: st.IdempotencyKey})
}

// refuseOrReplay answers a start that fails its own checks: with the
// original execution if its key names a committed claim (a keyed replay
// short-circuits every check), else with the rejection. It sets
// Retry-After on w when the answer asks for a retry.
func (s *Server) refuseOrReplay(w http.ResponseWriter, r *http.Request, p parsedStart, rej *rejection) (int, any) {
	if p.key != "" && s.hasDB() && p.name != "" && dedup.ValidateName(p.name) == nil {
		status, body, ok := s.replayFromClaim(r.Context(), p)
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		if ok {
			return status, body
		}
	}
	s.metrics.starts.WithLabelValues("refused").Inc()
	if rej.retryAfter != "" {
		w.Header().Set("Retry-After", rej.retryAfter)
	}
	return rej.status, rej.body
}

func startResult(out wire.Outcome) string {
	switch {
	case out.Error != "":
		return "refused"
	case out.Deferred:
		return "deferred"
	case out.StartedFresh:
		return "started_fresh"
	case out.Deduplicated:
		return "deduplicated"
	default:
		return "existing"
	}
}

// startAnswer turns a start's outcome into its HTTP answer.
func startAnswer(out wire.Outcome) (int, any) {
	if out.Error != "" {
		status := out.HTTPStatus
		if status == 0 {
			status = http.StatusInternalServerError
		}
		return status, api.ErrorResponse{Error: out.Error, Message: out.Message}
	}
	if out.Deferred {
		return http.StatusAccepted, api.AcceptedResponse{CommandID: out.CommandID, Status: api.CommandDeferred}
	}
	resp := api.StartResponse{ExecutionID: out.ExecutionID, WorkflowName: out.WorkflowName, WorkflowID: out.WorkflowID, Status: out.Status}
	if out.Status == api.StatusPending {
		resp.WaitingFor = api.WaitingForConcurrency
	}
	if out.Keyed {
		resp.StartedFresh, resp.Deduplicated = &out.StartedFresh, &out.Deduplicated
		if out.Deduplicated {
			resp.FirstSeenAt, resp.ExpiresAt = out.FirstSeenAt, out.ExpiresAt
		}
	}
	if out.StartedFresh {
		return http.StatusCreated, resp
	}
	return http.StatusOK, resp
}

// claimPool is the store a keyed start's claim is in: that of the shard it
// was placed on while its home store was writable (a keyed start names a
// workflow_id only when its caller gave one).
func (s *Server) claimPool(workflowName, workflowID, key string) *pgxpool.Pool {
	return s.poolOfShard(s.cfg.Topology.Layout().HomeShard(workflowName, workflowID, key))
}

// replayFromClaim answers a keyed start from its key's live claim, in the
// store the key's home shard is in: ok is false when there is none (and
// true, with a 503, when the claim could not be read).
func (s *Server) replayFromClaim(ctx context.Context, p parsedStart) (int, any, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pool := s.claimPool(p.name, p.workflowID, p.key)
	if p.req.Store != nil {
		// A pinned start's claim is on its store, writable or not (the
		// request may be refused for it being read_only now).
		if i := s.cfg.Topology.Layout().Set.Index(*p.req.Store); i >= 0 {
			pool = s.pool(i)
		}
	}
	claim, e, err := store.LiveClaim(ctx, pool, store.ClaimRef{WorkflowName: p.name, IdempotencyKey: p.key})
	if err != nil {
		s.log.Warn("read the claim of a keyed start", "workflow", p.name, "idempotency_key", p.key, "err", err)
		return http.StatusServiceUnavailable, api.ErrorResponse{Error: api.CodeUnavailable, Message: "could not tell whether this key was used before; retry"}, true
	}
	if claim == nil {
		return 0, nil, false
	}
	s.duplicate(ctx, "claim")
	s.metrics.starts.WithLabelValues("deduplicated").Inc()
	s.tally(ctx, s.cfg.Topology.Layout().HomeShard(p.name, p.workflowID, p.key),
		&wire.DuplicateCommand{Layer: wire.DuplicateReplay, WorkflowName: p.name, IdempotencyKey: p.key})
	status, body := startAnswer(wire.Outcome{
		ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, Status: e.Status,
		Keyed: true, Deduplicated: true, FirstSeenAt: &claim.CreatedAt, ExpiresAt: &claim.ExpiresAt,
	})
	return status, body, true
}
