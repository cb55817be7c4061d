package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Reset (docs/reset.md): a new run of an execution's workflow_id starts
// from one of its workflow tasks, in the transaction that applies the
// reset, on the execution's shard. The new run's history is the old
// one's up to the last event that task's code saw (decide.PlanReset);
// the activities and timers those events left open are set again; the
// signals the old run received after the point are received again, with
// their keys; the task itself, and everything after it, is run by the
// current code. A running old run closes Terminated. Both runs are
// linked (store.Execution.Reset), and the new run joins the old one's
// chain of runs: a command naming the old run reaches the new one, and
// a keyed signal already delivered is not delivered again.

// resetCommand applies a reset command.
func (b *batch) resetCommand(c seqCommand) {
	rc := c.cmd.Reset
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindReset, ExecutionID: rc.ExecutionID, AppliedAt: b.now}
	e := b.execs[rc.ExecutionID]
	if e == nil {
		b.refuse(out, http.StatusNotFound, api.CodeExecutionNotFound, fmt.Sprintf("no execution %s", rc.ExecutionID))
		return
	}
	by := ""
	if c.cmd.FromBatch != nil {
		by = c.cmd.FromBatch.BatchID
	}
	if r := e.Reset; r != nil && r.To != "" {
		// The same reset again: the same point asked alone, or the same
		// batch (which names its point by target).
		same := by == "" && r.By == "" && r.ToSeq == rc.PointSeq || by != "" && r.By == by
		if !same {
			b.refuse(out, http.StatusConflict, api.CodeExecutionNotLatest,
				fmt.Sprintf("execution %s was reset already, to event %d, as run %s: reset that run", e.ExecutionID, r.ToSeq, r.To))
			return
		}
		// The same reset again (a retry, a batch run again after a
		// crash): answered with the run it made.
		out.ResetFrom, out.PointSeq = e.ExecutionID, r.ToSeq
		if next := b.newest(e); next.ExecutionID == r.To {
			b.outcome(out, next, false, true)
			return
		}
		out.ExecutionID, out.WorkflowName, out.WorkflowID, out.Deduplicated = r.To, e.WorkflowName, e.WorkflowID, true
		b.addOutcome(out)
		return
	}
	if e.ContinuedAs != "" {
		b.refuse(out, http.StatusConflict, api.CodeExecutionNotLatest,
			fmt.Sprintf("execution %s continued as new, as run %s: reset the newest run of its chain", e.ExecutionID, e.ContinuedAs))
		return
	}
	closed := e.Status != wire.StatusRunning && e.Status != wire.StatusPending
	events, err := b.eventsAfter(e, 0)
	if err != nil {
		b.err = err
		return
	}
	point := rc.PointSeq
	if point == 0 && rc.Target != nil {
		// A batch's reset: its point resolved against this history.
		point, err = decide.FindResetPoint(events, *rc.Target)
	}
	var plan decide.ResetPlan
	if err == nil {
		plan, err = decide.PlanReset(events, point)
	}
	if err != nil {
		var bad *decide.InvalidResetPoint
		if errors.As(err, &bad) {
			b.refuse(out, http.StatusUnprocessableEntity, api.CodeInvalidResetPoint, bad.Reason)
			return
		}
		b.refuse(out, http.StatusUnprocessableEntity, api.CodeInvalidResetPoint, err.Error())
		return
	}
	if closed && e.Concurrency != nil && !b.concurrencyRetake(e) {
		// Its slot was given back when it closed, and its key has none
		// free now: a new run would have to wait for one, which a reset
		// does not do yet.
		b.refuse(out, http.StatusConflict, api.CodeResetUnsupported,
			fmt.Sprintf("execution %s ran under a concurrency start policy and has closed, and its key %q has no free slot (or executions wait for one): reset it once one is free",
				e.ExecutionID, e.Concurrency.Key))
		return
	}
	next := b.resetRun(e, events, &plan, rc, by)
	out.ResetFrom, out.PointSeq = e.ExecutionID, plan.PointSeq
	b.outcome(out, next, true, false)
}

// resetRun starts the run that replaces e, reset as plan says, and
// closes e if it runs.
func (b *batch) resetRun(e *store.Execution, events []wire.Event, plan *decide.ResetPlan, rc *wire.ResetCommand, by string) *store.Execution {
	id := b.mintExecutionID()
	keys := maps.Clone(e.ResetKeys())
	if keys == nil {
		keys = map[int]wire.ResetKey{}
	}
	maps.Copy(keys, plan.Keys())
	if len(keys) == 0 {
		keys = nil
	}
	info := e.Reset
	if info == nil {
		info = &wire.ResetInfo{}
	}
	info.To, info.ToSeq, info.Reason, info.By = id, plan.PointSeq, storableText(rc.Reason), by
	e.Reset = info
	e.ContinuedAs = id // the chain's newest run is the new one
	b.changed[e.ExecutionID] = true

	requested := takeRequested(e)
	ran := e.Status == wire.StatusRunning || e.Status == wire.StatusPending
	if ran {
		reason := "reset"
		if rc.Reason != "" {
			reason = "reset: " + rc.Reason
		}
		e.Error, _ = json.Marshal(wire.Failure{Type: terminating.failure, Message: reason})
		b.close(e, terminating.status, terminating.event, wire.WorkflowClosedAttrs{Reason: storableText(reason), ResetTo: id})
		e.WFTOutstanding, e.WFTDirty = false, false
		b.stopActivities(e, terminating.msgPrefix, reason)
	}

	next := &store.Execution{
		ExecutionID: id, Shard: b.shard, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, TaskQueue: e.TaskQueue,
		Status: wire.StatusRunning, Input: e.Input, CreatedAt: b.now, UpdatedAt: b.now, TraceParent: b.curTrace,
		Versioning: e.Versioning, IdempotencyKey: e.IdempotencyKey, CompletionCallback: e.CompletionCallback, StartedBy: e.StartedBy,
		ChainID: e.Chain(), ContinuedFrom: e.ContinuedFrom, Parent: e.Parent, Children: e.Children.OpenOnly(),
		Priority: e.Priority, WFTID: plan.TaskID - 1,
		Reset: &wire.ResetInfo{From: e.ExecutionID, FromSeq: plan.PointSeq, Keys: keys},
	}
	if e.Concurrency != nil {
		// The chain keeps its slot, or, e closed, took one again
		// (concurrencyRetake), from now.
		ref := *e.Concurrency
		if !ran {
			began := b.now
			ref.BeganAt = &began
		}
		next.Concurrency = &ref
	}
	if !next.CreatedAt.After(e.CreatedAt) {
		// The newest run of a workflow_id is the last created
		// (store.LatestByWorkflowID).
		next.CreatedAt = e.CreatedAt.Add(time.Microsecond)
	}
	b.execs[id] = next
	b.newExecs[id] = true
	b.byWorkflow[store.WorkflowRef{WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID}] = next
	b.writes.NewExecutions = append(b.writes.NewExecutions, next)
	kept := 0
	for _, ev := range events {
		if ev.Seq > plan.Keep {
			break
		}
		b.appendKept(next, ev)
		kept++
	}
	// Its search attributes are those the kept events set (a removal
	// too), over those the chain's earlier run passed on when this one
	// continued it, which its history does not hold.
	b.setSearchAttributes(next, searchattr.Fold(nil, events[:kept]))
	if declared := b.searchAttrs[e.WorkflowName]; e.ContinuedFrom != "" && len(declared) > 0 {
		// That run may be of another workflow: only what this one
		// declares, as the continue-as-new copied.
		b.writes.SearchAttributeCopies = append(b.writes.SearchAttributeCopies,
			store.SearchAttributeCopy{From: e.ContinuedFrom, To: id, Only: declared})
	}
	var s wire.StartCommand
	if e.Timeouts != nil {
		s.RunTimeoutMS = e.Timeouts.RunMS
	}
	b.setTimeouts(next, &s, e, b.now)
	b.giveUpdates(next, requested)
	// What the kept events left open is set again: the activities with
	// their keys, the timers to fire when they were to.
	for _, pa := range plan.Pending {
		rawOpts, _ := json.Marshal(pa.Options)
		a := &store.Activity{
			ExecutionID: id, ActivityID: pa.ID, ActivityName: pa.Name, Status: store.ActivityScheduled, Attempt: 1,
			IdempotencyKey: pa.Key, Input: pa.Input, Options: rawOpts, ScheduledAt: b.now,
		}
		ref := store.ActivityRef{ExecutionID: id, ActivityID: pa.ID}
		b.activities[ref] = a
		b.newActs[ref] = true
		b.writes.NewActivities = append(b.writes.NewActivities, a)
		b.dispatchAttempt(next, a)
	}
	for _, t := range plan.Timers {
		attrs, _ := json.Marshal(wire.TimerAttrs{TimerID: t.ID})
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: id, Kind: store.TimerWorkflow, FireAt: t.FireAt, Attrs: attrs})
	}
	if plan.CancelRequested && e.CancelRequest != nil {
		// The kept events hold the request: the new run's code sees it
		// on replay, and its grace, if any, still ends when it was to.
		req := *e.CancelRequest
		next.CancelRequest = &req
		if req.Deadline != nil {
			b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: id, Kind: store.TimerCancelGrace,
				FireAt: *req.Deadline, Attrs: json.RawMessage(`{}`)})
		}
	}
	if rc.ReapplySignals {
		for _, sig := range plan.Signals {
			b.appendEvent(next, wire.EventSignalReceived, sig.Attrs)
		}
	}
	b.needWorkflowTask(next)
	return next
}

// appendKept appends ev, an event of the run a reset replaces, to e's
// history as it was: its seq and time.
func (b *batch) appendKept(e *store.Execution, ev wire.Event) {
	e.LastSeq = ev.Seq
	e.HistoryBytes += eventBytes(ev.Type, ev.Attrs)
	b.newEvents[e.ExecutionID] = append(b.newEvents[e.ExecutionID], ev)
	b.writes.Events = append(b.writes.Events, store.EventRow{ExecutionID: e.ExecutionID, Event: ev})
	b.changed[e.ExecutionID] = true
}
