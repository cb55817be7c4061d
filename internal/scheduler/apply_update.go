package scheduler

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Updates (docs/long-workflows.md#updating-a-running-workflow): a request
// that a running workflow answers. An update command admits the update:
// a row in workflow_updates, and the update in flight on its run's row
// (executions.updates), which every workflow task of the run carries
// until a task takes it. A task takes an update by accepting it (its
// accept_update decision, recorded as WorkflowUpdateAccepted, after
// which the handler runs) or by refusing it (a rejection, recorded on
// the update only); the handler's return is its complete_update
// decision. An update's key dedupes across its chain of continued runs;
// updates still in flight when their run closes fail with
// execution_closed, except those no task took yet when it continued as
// new, which move to the new run.

// update admits an update of a running execution, or answers with the
// update its key names.
func (b *batch) update(c seqCommand) {
	u := c.cmd.Update
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindUpdate, ExecutionID: u.ExecutionID, AppliedAt: b.now}
	e := b.execs[u.ExecutionID]
	if e == nil {
		b.refuse(out, http.StatusNotFound, api.CodeExecutionNotFound, fmt.Sprintf("no execution %s", u.ExecutionID))
		return
	}
	e = b.newest(e)
	out.ExecutionID, out.WorkflowName, out.WorkflowID, out.Status = e.ExecutionID, e.WorkflowName, e.WorkflowID, e.Status
	ref := store.UpdateKeyRef{ChainID: e.Chain(), IdempotencyKey: u.IdempotencyKey}
	if u.IdempotencyKey != "" {
		if id, ok := b.updateKeys[ref]; ok {
			// Asked before: the same update, whatever became of it.
			out.UpdateID, out.Deduplicated = id, true
			b.addOutcome(out)
			return
		}
	}
	if e.Status == wire.StatusPending {
		b.refuse(out, http.StatusConflict, api.CodeExecutionClosed, fmt.Sprintf("execution %s is Pending (it waits for a slot of its concurrency start policy) and takes no updates until it begins", e.ExecutionID))
		return
	}
	if e.Status != wire.StatusRunning {
		b.refuse(out, http.StatusConflict, api.CodeExecutionClosed, fmt.Sprintf("execution %s is %s and takes no updates", e.ExecutionID, e.Status))
		return
	}
	inFlight, total := 0, 0
	if e.Updates != nil {
		inFlight, total = len(e.Updates.InFlight), e.Updates.Total
	}
	switch {
	case inFlight >= b.limits.UpdateMaxInFlight:
		b.refuse(out, http.StatusTooManyRequests, api.CodeUpdateLimit,
			fmt.Sprintf("execution %s has %d updates in flight, its limit (update_max_in_flight)", e.ExecutionID, inFlight))
		return
	case total >= b.limits.UpdateMaxPerRun:
		b.refuse(out, http.StatusTooManyRequests, api.CodeUpdateLimit,
			fmt.Sprintf("execution %s was asked for %d updates, its limit (update_max_per_run): continue as new to take more", e.ExecutionID, total))
		return
	}
	next := e.Updates.Clone()
	next.Total++
	next.InFlight = append(next.InFlight, store.InFlightUpdate{UpdateID: u.UpdateID, Name: u.Name, Args: u.Args})
	e.Updates = next
	b.changed[e.ExecutionID] = true
	b.writes.NewUpdates = append(b.writes.NewUpdates, &store.Update{
		UpdateID: u.UpdateID, ChainID: e.Chain(), ExecutionID: e.ExecutionID, IdempotencyKey: u.IdempotencyKey, Name: u.Name, Args: u.Args,
	})
	if u.IdempotencyKey != "" {
		b.updateKeys[ref] = u.UpdateID
	}
	b.needWorkflowTask(e)
	out.UpdateID = u.UpdateID
	b.addOutcome(out)
}

// validUpdates says whether a workflow task result's update decisions
// and rejections are ones e can take: each accepts or refuses an update
// in flight that no task took yet, once; each completion is of one
// accepted (before, or by the same task). A result that does not is
// dropped whole, as stale, and its task goes again.
func validUpdates(e *store.Execution, r *wire.WorkflowTaskResult) bool {
	taken := map[string]bool{}
	accepted := map[string]bool{}
	for _, f := range e.Updates.All() {
		if f.Accepted {
			accepted[f.UpdateID] = true
		}
	}
	take := func(id string) bool {
		i := e.Updates.Find(id)
		if i < 0 || e.Updates.InFlight[i].Accepted || taken[id] {
			return false
		}
		taken[id] = true
		return true
	}
	for i := range r.Decisions {
		d := &r.Decisions[i]
		switch d.Type {
		case wire.DecisionAcceptUpdate:
			if d.Update == nil || !take(d.Update.UpdateID) {
				return false
			}
			accepted[d.Update.UpdateID] = true
		case wire.DecisionCompleteUpdate:
			if d.Update == nil || !accepted[d.Update.UpdateID] {
				return false
			}
			delete(accepted, d.Update.UpdateID)
		}
	}
	for _, rej := range r.Rejections {
		if !take(rej.UpdateID) {
			return false
		}
	}
	return true
}

// acceptUpdate marks e's update d accepted.
func (b *batch) acceptUpdate(e *store.Execution, d *wire.Decision) {
	i := e.Updates.Find(d.Update.UpdateID)
	if i < 0 {
		return
	}
	next := e.Updates.Clone()
	next.InFlight[i].Accepted = true
	next.InFlight[i].Args = nil // in the history now
	e.Updates = next
	b.writes.UpdateChanges = append(b.writes.UpdateChanges, store.UpdateChange{UpdateID: d.Update.UpdateID, ExecutionID: e.ExecutionID, Status: store.UpdateAccepted})
}

// completeUpdate records the answer of e's update d's handler.
func (b *batch) completeUpdate(e *store.Execution, d *wire.Decision) {
	b.answerUpdate(e, d.Update.UpdateID, func(c *store.UpdateChange) {
		c.Status = store.UpdateCompleted
		c.Result = d.Update.Result
		if d.Update.Failure != nil {
			c.Status, c.Result = store.UpdateFailed, nil
			c.Failure, _ = json.Marshal(d.Update.Failure)
		}
	})
}

// rejectUpdate records that e's workflow task refused an update.
func (b *batch) rejectUpdate(e *store.Execution, rej *wire.UpdateRejection) {
	b.answerUpdate(e, rej.UpdateID, func(c *store.UpdateChange) {
		c.Status, c.ErrorCode = store.UpdateRejected, api.CodeUpdateRejected
		if rej.Reason == wire.UpdateRejectedUnknown {
			c.ErrorCode = api.CodeUpdateNotFound
		}
		f := rej.Failure
		if f == nil {
			f = &wire.Failure{Message: "the update was rejected"}
		}
		c.Failure, _ = json.Marshal(storableFailure(f))
	})
}

// answerUpdate takes update id out of e's updates in flight and records
// its answer, which set fills in.
func (b *batch) answerUpdate(e *store.Execution, id string, set func(*store.UpdateChange)) {
	i := e.Updates.Find(id)
	if i < 0 {
		return
	}
	next := e.Updates.Clone()
	next.InFlight = append(next.InFlight[:i], next.InFlight[i+1:]...)
	e.Updates = next
	b.changed[e.ExecutionID] = true
	c := store.UpdateChange{UpdateID: id, ExecutionID: e.ExecutionID}
	set(&c)
	b.writes.UpdateChanges = append(b.writes.UpdateChanges, c)
}

// closeUpdates fails the updates e has in flight as it closes (status):
// no handler will answer them.
func (b *batch) closeUpdates(e *store.Execution, status string) {
	if e.Updates == nil || len(e.Updates.InFlight) == 0 {
		return
	}
	failure, _ := json.Marshal(wire.Failure{Type: "ExecutionClosed",
		Message: fmt.Sprintf("execution %s closed (%s) before the update completed", e.ExecutionID, status)})
	for _, f := range e.Updates.InFlight {
		b.writes.UpdateChanges = append(b.writes.UpdateChanges, store.UpdateChange{UpdateID: f.UpdateID, ExecutionID: e.ExecutionID,
			Status: store.UpdateFailed, Failure: failure, ErrorCode: api.CodeExecutionClosed})
	}
	next := e.Updates.Clone()
	next.InFlight = nil
	e.Updates = next
}

// takeRequested takes out of e's updates in flight those no task took,
// as e continues as new: they move to its next run (giveUpdates), and
// its close fails only those it accepted.
func takeRequested(e *store.Execution) []store.InFlightUpdate {
	requested := e.Updates.Requested()
	if len(requested) == 0 {
		return nil
	}
	rest := e.Updates.Clone()
	rest.InFlight = rest.InFlight[:0]
	for _, f := range e.Updates.InFlight {
		if f.Accepted {
			rest.InFlight = append(rest.InFlight, f)
		}
	}
	e.Updates = rest
	return requested
}

// giveUpdates makes requested, taken from the run that to continues,
// to's updates in flight: its first task carries them.
func (b *batch) giveUpdates(to *store.Execution, requested []store.InFlightUpdate) {
	if len(requested) == 0 {
		return
	}
	to.Updates = &store.RunUpdates{Total: len(requested), InFlight: requested}
	for _, f := range requested {
		b.writes.UpdateChanges = append(b.writes.UpdateChanges, store.UpdateChange{UpdateID: f.UpdateID, ExecutionID: to.ExecutionID, Status: store.UpdateRequested})
	}
}

// storableFailure is f with its texts made storable (a worker's).
func storableFailure(f *wire.Failure) *wire.Failure {
	out := *f
	out.Message, out.Type, out.Stack = storableText(f.Message), storableText(f.Type), storableText(f.Stack)
	return &out
}
