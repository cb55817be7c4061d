package scheduler

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func (b *batch) start(c seqCommand) {
	s := c.cmd.Start
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindStart, Keyed: s.IdempotencyKey != "", AppliedAt: b.now}
	ref := store.ClaimRef{WorkflowName: s.WorkflowName, IdempotencyKey: s.IdempotencyKey}
	if out.Keyed {
		claim := b.claims[ref]
		out.FirstSeenAt, out.ExpiresAt = &claim.CreatedAt, &claim.ExpiresAt
		holder := b.claimExec[ref]
		if holder == nil && claim.ExecutionID != "" && claim.ExecutionID != b.tentative[ref] {
			// Claimed before this batch: a replay.
			if holder = b.execs[claim.ExecutionID]; holder == nil {
				logattr.With(b.log, claim.ExecutionID, s.WorkflowName, c.cmd.CommandID).Error("start claim points to a missing execution", "idempotency_key", s.IdempotencyKey)
				b.refuse(out, http.StatusInternalServerError, api.CodeClaimDangling, fmt.Sprintf("idempotency key %q is claimed by execution %s, which does not exist", s.IdempotencyKey, claim.ExecutionID))
				return
			}
			b.claimExec[ref] = holder
		}
		if holder != nil {
			// A keyed replay short-circuits every other rule.
			if s.RejectFingerprintMismatch && claim.Fingerprint != "" && s.Fingerprint != claim.Fingerprint {
				b.refuse(out, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused,
					fmt.Sprintf("idempotency key %q was first used with a different input", s.IdempotencyKey))
				return
			}
			b.writes.Duplicates.AddStart(ref, store.LayerClaim)
			b.outcome(out, holder, false, true)
			return
		}
	}
	wref := store.WorkflowRef{WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID}
	if prior := b.byWorkflow[wref]; prior != nil && s.Parent != nil && !sameChild(prior, s.Parent) {
		// A child's start never takes an execution it did not start as
		// its own (its close would not be told to the parent, and the
		// parent's close policy would reach it): a running one is a
		// conflict, unless the policy terminates it; after a closed one,
		// a fresh run, as the policy allows.
		refuse := isOpen(prior) && s.ReusePolicy != wire.ReuseTerminateIfRunning
		switch s.ReusePolicy {
		case wire.ReuseRejectDuplicate:
			refuse = true
		case wire.ReuseAllowDuplicateFailedOnly:
			refuse = refuse || (prior.Status != wire.StatusFailed && prior.Status != wire.StatusCancelled)
		case wire.ReuseTerminateIfRunning:
			if isOpen(prior) {
				b.terminate(prior, "terminated by a child workflow's start with reuse_policy terminate_if_running")
			}
		}
		if refuse {
			b.rollBackClaim(ref, out.Keyed)
			b.refuse(out, http.StatusConflict, api.CodeWorkflowIDConflict,
				fmt.Sprintf("workflow %s with workflow_id %q already exists (execution %s, %s), not started by this parent", s.WorkflowName, s.WorkflowID, prior.ExecutionID, prior.Status))
			return
		}
	} else if prior != nil {
		switch s.ReusePolicy {
		case wire.ReuseRejectDuplicate:
			b.rollBackClaim(ref, out.Keyed)
			b.refuse(out, http.StatusConflict, api.CodeWorkflowIDConflict,
				fmt.Sprintf("workflow %s with workflow_id %q already exists (execution %s, %s)", s.WorkflowName, s.WorkflowID, prior.ExecutionID, prior.Status))
			return
		case wire.ReuseTerminateIfRunning:
			if isOpen(prior) {
				b.terminate(prior, "terminated by a start with reuse_policy terminate_if_running")
			}
		case wire.ReuseAllowDuplicateFailedOnly:
			if prior.Status != wire.StatusFailed && prior.Status != wire.StatusCancelled {
				b.resolveToExisting(out, ref, prior)
				return
			}
		default: // allow_duplicate
			b.resolveToExisting(out, ref, prior)
			return
		}
	}
	id := b.mintExecutionID()
	if out.Keyed {
		// The execution takes the id the key was claimed for (again, if
		// the batch rolled the claim back for an earlier refused start).
		id = b.tentative[ref]
		claim := b.claims[ref]
		claim.ExecutionID = id
		b.claims[ref] = claim
	}
	e := b.newExecution(s, id)
	if out.Keyed {
		b.claimExec[ref] = e
	}
	b.outcome(out, e, true, false)
}

// newExecution creates the execution id of fresh start s: its row, its
// WorkflowStarted event, and its first workflow task (or the timer of a
// delayed start).
func (b *batch) newExecution(s *wire.StartCommand, id string) *store.Execution {
	return b.newExecutionFrom(s, id, nil)
}

// newExecutionFrom is newExecution for a run that continues from, when
// it is not nil (continueAsNew): in from's chain, linked back to it.
func (b *batch) newExecutionFrom(s *wire.StartCommand, id string, from *store.Execution) *store.Execution {
	e := &store.Execution{
		ExecutionID: id, Shard: b.shard, WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID,
		TaskQueue: s.TaskQueue, Status: wire.StatusRunning, Input: s.Input, CreatedAt: b.now, UpdatedAt: b.now,
		TraceParent: b.curTrace, Versioning: s.Versioning, PinnedBuild: s.PinnedBuild, Parent: s.Parent,
		Priority: validPriority(s.Priority),
	}
	pending := false
	switch {
	case from != nil && from.Concurrency != nil:
		// The chain keeps its slot, of its key's workflow, whatever
		// workflow this run is.
		ref := *from.Concurrency
		ref.Workflow = cmp.Or(ref.Workflow, from.WorkflowName)
		if ref.Workflow == s.WorkflowName {
			ref.Workflow = ""
		}
		e.Concurrency = &ref
	case from == nil && b.concurrency != nil:
		ref := *b.concurrency
		e.Concurrency, pending = &ref, b.concurrencyPending
		if pending {
			e.Status = wire.StatusPending
			ref.RunTimeoutMS, ref.ExecutionTimeoutMS = s.RunTimeoutMS, s.ExecutionTimeoutMS
		} else {
			began := b.now
			ref.BeganAt = &began
		}
	}
	if e.Versioning == "" {
		e.Versioning = wire.VersioningAutoUpgrade
		if b.pinned[e.WorkflowName] {
			e.Versioning = wire.VersioningPinned
		}
	}
	if s.IdempotencyKey != "" {
		key := s.IdempotencyKey
		e.IdempotencyKey = &key
	}
	if s.CompletionCallback != "" {
		cb := s.CompletionCallback
		e.CompletionCallback = &cb
	}
	if s.StartedBy != "" {
		by := s.StartedBy
		e.StartedBy = &by
	}
	b.execs[id] = e
	b.newExecs[id] = true
	b.byWorkflow[store.WorkflowRef{WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID}] = e
	b.writes.NewExecutions = append(b.writes.NewExecutions, e)
	started := wire.WorkflowStartedAttrs{
		WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID, Input: s.Input, IdempotencyKey: s.IdempotencyKey, TaskQueue: s.TaskQueue,
		StartAt: s.StartAt, SearchAttributes: s.SearchAttributes,
	}
	b.setSearchAttributes(e, s.SearchAttributes)
	if from != nil {
		e.ChainID, e.ContinuedFrom, started.ContinuedFrom = from.Chain(), from.ExecutionID, from.ExecutionID
		// The run keeps the search attributes of the run it continues:
		// of another workflow, those its own declares alike.
		if cp := (store.SearchAttributeCopy{From: from.ExecutionID, To: id}); from.WorkflowName == s.WorkflowName {
			b.writes.SearchAttributeCopies = append(b.writes.SearchAttributeCopies, cp)
		} else if cp.Only = b.searchAttrs[s.WorkflowName]; len(cp.Only) > 0 {
			b.writes.SearchAttributeCopies = append(b.writes.SearchAttributeCopies, cp)
		}
		// The chain is its parent's child, and keeps the children of its
		// runs still open: their policy applies when the chain closes.
		e.Parent, e.Children = from.Parent, from.Children.OpenOnly()
		if !e.CreatedAt.After(from.CreatedAt) {
			// The newest run of a workflow_id is the last created
			// (store.LatestByWorkflowID): a scheduler whose clock is behind
			// the one that created from must not make it look older.
			e.CreatedAt = from.CreatedAt.Add(time.Microsecond)
		}
	}
	b.appendEvent(e, wire.EventWorkflowStarted, started)
	if pending {
		// It begins when a slot frees (beginPending): its timeouts and
		// its first workflow task then.
		return e
	}
	begin := b.now
	if s.StartAt != nil && s.StartAt.After(b.now) {
		begin = *s.StartAt // its timeouts count from when it begins
	}
	b.setTimeouts(e, s, from, begin)
	if s.StartAt != nil && s.StartAt.After(b.now) {
		// A delayed start: its first workflow task waits on a durable timer.
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: id, Kind: store.TimerStart, FireAt: *s.StartAt, Attrs: json.RawMessage(`{}`)})
	} else {
		b.needWorkflowTask(e)
	}
	return e
}

// resolveToExisting answers a start with an existing execution of its
// workflow_id; a keyed start's claim then points to that execution.
func (b *batch) resolveToExisting(out wire.Outcome, ref store.ClaimRef, e *store.Execution) {
	if out.Keyed {
		b.claimExec[ref] = e
	}
	b.outcome(out, e, false, false)
}

// rollBackClaim undoes the claim a refused keyed start took.
func (b *batch) rollBackClaim(ref store.ClaimRef, keyed bool) {
	if keyed {
		delete(b.claimExec, ref)
		c := b.claims[ref]
		c.ExecutionID = ""
		b.claims[ref] = c
	}
}

// settleClaims writes what the batch decided about its claims: a claim
// taken for an execution that was not created is moved to the execution
// the key resolved to, or deleted if the start was refused.
func (b *batch) settleClaims() {
	for ref, tentative := range b.tentative {
		if b.claims[ref].ExecutionID != tentative && b.claims[ref].ExecutionID != "" {
			continue // someone else's live claim: untouched
		}
		e := b.claimExec[ref]
		switch {
		case e == nil:
			b.writes.DeleteClaims = append(b.writes.DeleteClaims, ref)
		case e.ExecutionID != tentative:
			if b.writes.RepointClaims == nil {
				b.writes.RepointClaims = map[store.ClaimRef]string{}
			}
			b.writes.RepointClaims[ref] = e.ExecutionID
		}
	}
}

// isOpen says whether e has not closed: Running, or Pending (it waits for
// a concurrency slot).
func isOpen(e *store.Execution) bool {
	return e.Status == wire.StatusRunning || e.Status == wire.StatusPending
}

// sameChild says whether the execution e is the child p names: a start
// of it sent again finds it.
func sameChild(e *store.Execution, p *wire.ParentRef) bool {
	if p.Schedule != nil {
		// A schedule's fire: the one of the same nominal time.
		return e.Parent != nil && e.Parent.Schedule != nil && e.Parent.Schedule.ScheduleID == p.Schedule.ScheduleID &&
			e.Parent.Schedule.Nominal.Equal(p.Schedule.Nominal)
	}
	return e.Parent != nil && e.Parent.ExecutionID == p.ExecutionID && e.Parent.ChildID == p.ChildID
}

// validPriority is a start's priority as an execution keeps it: ingest
// refuses one out of range, and a command that carries one anyway (from
// a publisher that skipped ingest's checks) runs at the default rather
// than fail its batch on the table's check.
func validPriority(p int) int {
	if p < wire.MinPriority || p > wire.MaxPriority {
		return wire.DefaultPriority
	}
	return p
}
