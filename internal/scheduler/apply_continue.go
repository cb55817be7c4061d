package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Continue-as-new (docs/long-workflows.md): a run closes as
// ContinuedAsNew and, in the same transaction, a new run of the same
// workflow_id starts on the same shard, linked both ways. The signals
// the closing run received after what its last task saw move to the new
// run, with their keys, so that none is lost or delivered twice across
// the switch. A chain's runs share its first run's id (Execution.Chain):
// keyed signals are claimed under it, so that a key dedupes across the
// chain, and a signal to any of its runs goes to the newest.

// continueAsNew closes e, whose task saw its history up to baseSeq, as
// ContinuedAsNew by decision d, and starts its next run.
func (b *batch) continueAsNew(e *store.Execution, d *wire.Decision, baseSeq int) {
	can := *d.ContinueAsNew
	name, queue := cmp.Or(can.WorkflowName, e.WorkflowName), cmp.Or(can.TaskQueue, e.TaskQueue)
	if err := dedup.ValidateName(name); err != nil {
		b.failContinue(e, fmt.Sprintf("continue as new: workflow %v", err))
		return
	}
	if err := dedup.ValidateName(queue); err != nil {
		b.failContinue(e, fmt.Sprintf("continue as new: task queue %v", err))
		return
	}
	// The signals the run's code saw and did not receive, and those it got
	// after what its task saw: the history read now (its stored part)
	// and this batch's.
	from := baseSeq
	carry := map[int]bool{}
	for _, seq := range can.Carry {
		if seq > 0 && seq <= baseSeq {
			carry[seq] = true
			from = min(from, seq-1)
		}
	}
	events, err := b.eventsAfter(e, from)
	if err != nil {
		b.err = err
		return
	}
	var moved []wire.Event
	for _, ev := range events {
		if ev.Type == wire.EventSignalReceived && (ev.Seq > baseSeq || carry[ev.Seq]) {
			moved = append(moved, ev)
		}
	}
	can.Carry = nil
	id := b.mintExecutionID()
	can.NewExecutionID = id
	e.ContinuedAs = id
	requested := takeRequested(e)
	b.close(e, wire.StatusContinuedAsNew, wire.EventWorkflowContinuedAsNew, wire.WorkflowClosedAttrs{ContinueAsNew: &can})
	e.WFTOutstanding, e.WFTDirty = false, false

	s := &wire.StartCommand{WorkflowName: name, WorkflowID: e.WorkflowID, Input: can.Input, TaskQueue: queue,
		Versioning: e.Versioning, AcceptedAt: b.now, Priority: e.Priority}
	if e.Timeouts != nil {
		s.RunTimeoutMS = e.Timeouts.RunMS // the chain's deadline goes with from
	}
	if e.CompletionCallback != nil {
		s.CompletionCallback = *e.CompletionCallback
	}
	if e.StartedBy != nil {
		s.StartedBy = *e.StartedBy
	}
	next := b.newExecutionFrom(s, id, e)
	b.giveUpdates(next, requested)
	for _, ev := range moved {
		// Its key, if any, is claimed under the chain already.
		b.appendEvent(next, wire.EventSignalReceived, ev.Attrs)
	}
	if req := e.CancelRequest; req != nil {
		// The run was asked to cancel after the task that continued it
		// ran: the request is the chain's, and the next run's code is
		// told, with what is left of its grace.
		carried := *req
		b.askCancel(next, &carried)
	}
}

// failContinue fails e, whose continue-as-new decision cannot be carried
// out (it names no valid workflow or task queue): the code asked for what
// can never start.
func (b *batch) failContinue(e *store.Execution, msg string) {
	f := wire.Failure{Type: "InvalidContinueAsNew", Message: msg, NonRetryable: true}
	b.logFor(e.ExecutionID).Warn("failing an execution whose continue-as-new cannot start", "err", msg)
	e.Error, _ = json.Marshal(f)
	// Imposed by the scheduler, not a decision (decide.Imposed): it
	// carries a reason.
	b.close(e, wire.StatusFailed, wire.EventWorkflowFailed, wire.WorkflowClosedAttrs{Failure: &f, Reason: msg})
}

// eventsAfter are e's history events after seq: those stored, then those
// this batch appended.
func (b *batch) eventsAfter(e *store.Execution, seq int) ([]wire.Event, error) {
	var out []wire.Event
	if !b.newExecs[e.ExecutionID] {
		stored, err := b.loadHistories(map[string]int{e.ExecutionID: seq + 1})
		if err != nil {
			return nil, err
		}
		out = stored[e.ExecutionID]
	}
	for _, ev := range b.newEvents[e.ExecutionID] {
		if ev.Seq > seq && (len(out) == 0 || ev.Seq > out[len(out)-1].Seq) {
			out = append(out, ev)
		}
	}
	return out, nil
}

// newest is the run a command naming e reaches: e, or, when e continued
// as new or was replaced by a reset, the newest run of its chain.
func (b *batch) newest(e *store.Execution) *store.Execution {
	for e != nil && e.ContinuedAs != "" {
		next := b.execs[e.ContinuedAs]
		if next == nil {
			next = b.chainsLatest[e.Chain()]
		}
		if next == nil || next == e {
			break
		}
		e = next
	}
	return e
}

// historiesIn binds a historyLoader to ctx for the batch's commands.
func historiesIn(ctx context.Context, histories historyLoader) func(map[string]int) (map[string][]wire.Event, error) {
	return func(from map[string]int) (map[string][]wire.Event, error) { return histories(ctx, from) }
}
