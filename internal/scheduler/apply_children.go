package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Child workflows and signals between workflows (docs/children.md).
//
// A start_child decision records ChildWorkflowInitiated and puts, in the
// same transaction, a start command on the child's shard (the outbox
// publishes it), keyed by the parent execution and the child's id
// (ChildKey): the child's shard claims the key as it does a client's, so
// a start sent again (the outbox after a crash, a replayed parent task
// whose result was taken once) starts one child. The child's shard
// reports to the parent's (KindReport) the child's start or why it was
// refused, and, when the child's chain of runs closes, how; the parent
// records each in its history, where its code sees it, and in its
// children (store.RunChildren). When the parent's chain closes, each
// child still open is terminated, asked to cancel or left running, as
// its parent-close policy says; a child whose start is reported after
// that is dealt with then. A signal_external decision puts a keyed
// signal on the target's shard likewise, which reports whether it was
// delivered.

// ChildKey is the idempotency key of the start of the child childID of
// the execution parentID.
func ChildKey(parentID string, childID int) string {
	return "child:" + parentID + ":" + strconv.Itoa(childID)
}

// externalSignalKey is the idempotency key of the signal signalID the
// code of the execution senderID sends.
func externalSignalKey(senderID string, signalID int) string {
	return "signal:" + senderID + ":" + strconv.Itoa(signalID)
}

// executionShard is the shard that holds the execution id.
func (b *batch) executionShard(id string) int {
	if b.layout.Set == nil {
		return placement.ExecutionShard(b.shards, id)
	}
	return b.layout.ExecutionShard(id)
}

// startShard is the shard a start of (name, workflowID, key) goes to.
func (b *batch) startShard(name, workflowID, key string) (int, error) {
	if b.layout.Set == nil {
		return placement.StartShard(b.shards, name, workflowID, key), nil
	}
	return b.layout.StartShard(name, workflowID, key)
}

// sendCommand puts cmd on shard through the outbox, under msgID. A
// command larger than NATS carries is not sent (the outbox could never
// publish it): false, and the caller says what becomes of it.
func (b *batch) sendCommand(shard int, cmd *wire.Command, msgID string) bool {
	data, _ := json.Marshal(cmd)
	if b.maxTask > 0 && len(data) > b.maxTask {
		b.logFor(cmd.TargetExecution()).Warn("a command to another shard is more than NATS carries; not sent", "kind", cmd.Kind,
			"bytes", len(data), "limit", b.maxTask)
		return false
	}
	b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{Shard: b.shard, Subject: broker.CommandSubject(shard, cmd.Kind), MsgID: msgID, Payload: data})
	return true
}

// tooLarge is the message of a command to another shard that NATS cannot
// carry.
func tooLarge(what string) string {
	return what + " is more than NATS carries to another shard (its max payload)"
}

// startChild applies a start_child decision of e, recorded as rec: the
// child is kept in e's children and its start goes to its shard; one
// that cannot start (a name that is none, a workflow no worker serves
// and the configuration does not declare) is refused at once, for the
// code to see. served says the worker that took the decision registers
// the child's workflow on its queue.
func (b *batch) startChild(e *store.Execution, rec decide.Recorded, served bool) {
	c := rec.Attrs.(wire.ChildAttrs)
	b.appendEvent(e, rec.Event, c)
	queue := cmp.Or(c.TaskQueue, e.TaskQueue)
	ch := store.ChildState{ChildID: c.ChildID, StartedBy: e.ExecutionID, WorkflowName: c.WorkflowName, WorkflowID: c.WorkflowID,
		Status: store.ChildInitiated, ClosePolicy: c.ParentClosePolicy}
	refuse := func(code, msg string) {
		ch.Status = store.ChildStartFailed
		e.Children = e.Children.With(ch)
		b.appendEvent(e, wire.EventChildWorkflowStartFailed, wire.ChildAttrs{ChildID: c.ChildID, Error: code, Message: msg})
		b.needWorkflowTask(e)
	}
	// The child's workflow declares its search attributes: refused here,
	// the parent's code is told why, where its shard would leave them out.
	badAttrs := b.searchAttrs.Check(c.WorkflowName, c.SearchAttributes)
	switch {
	case dedup.ValidateName(c.WorkflowName) != nil:
		refuse(api.CodeInvalidWorkflowName, fmt.Sprintf("child workflow name %q is not 1 to 128 letters, digits, '_' or '-'", c.WorkflowName))
		return
	case dedup.ValidateName(queue) != nil:
		refuse(api.CodeInvalidTaskQueue, fmt.Sprintf("child task queue %q is not 1 to 128 letters, digits, '_' or '-'", queue))
		return
	case c.WorkflowID == "" || len(c.WorkflowID) > 256 || storable.CheckIdentifier(c.WorkflowID) != nil:
		refuse(api.CodeInvalidWorkflowID, fmt.Sprintf("child workflow_id %q must be 1 to 256 bytes Harvest can store", c.WorkflowID))
		return
	case !wire.ValidReusePolicy(c.ReusePolicy):
		refuse(api.CodeInvalidReusePolicy, fmt.Sprintf("child reuse_policy %q is not one of the policies", c.ReusePolicy))
		return
	case !wire.ValidParentClosePolicy(c.ParentClosePolicy):
		refuse(api.CodeInvalidParentClosePolicy, fmt.Sprintf("parent_close_policy %q: want terminate, request_cancel or abandon", c.ParentClosePolicy))
		return
	case (WorkflowTimeouts{Run: time.Duration(c.RunTimeoutMS) * time.Millisecond, Execution: time.Duration(c.ExecutionTimeoutMS) * time.Millisecond}).Validate() != nil:
		refuse(api.CodeInvalidTimeout, "the child's run timeout must be positive and no longer than its execution timeout")
		return
	case c.Priority != 0 && validPriority(c.Priority) != c.Priority:
		refuse(api.CodeInvalidPriority, fmt.Sprintf("child priority %d: want %d (lowest) to %d (highest)", c.Priority, wire.MinPriority, wire.MaxPriority))
		return
	case badAttrs != nil:
		refuse(api.CodeInvalidSearchAttribute, "child "+badAttrs.Error())
		return
	case !served && b.knownWorkflow != nil && !b.knownWorkflow(c.WorkflowName, queue):
		refuse(api.CodeUnknownWorkflow, fmt.Sprintf("no worker serves workflow %q on task queue %q and the configuration does not declare it", c.WorkflowName, queue))
		return
	}
	key := ChildKey(e.ExecutionID, c.ChildID)
	shard, err := b.startShard(c.WorkflowName, c.WorkflowID, key)
	if err != nil {
		refuse(api.CodeUnavailable, fmt.Sprintf("no store takes the child's start: %v", err))
		return
	}
	e.Children = e.Children.With(ch)
	s := &wire.StartCommand{WorkflowName: c.WorkflowName, WorkflowID: c.WorkflowID, Input: c.Input, IdempotencyKey: key, TaskQueue: queue,
		ReusePolicy: c.ReusePolicy, AcceptedAt: b.now, Fingerprint: dedup.Fingerprint(c.Input),
		Parent:       &wire.ParentRef{ExecutionID: e.ExecutionID, ChildID: c.ChildID, ClosePolicy: c.ParentClosePolicy},
		RunTimeoutMS: c.RunTimeoutMS, ExecutionTimeoutMS: c.ExecutionTimeoutMS, Priority: cmp.Or(c.Priority, e.Priority),
		SearchAttributes: c.SearchAttributes}
	if e.StartedBy != nil {
		s.StartedBy = *e.StartedBy
	}
	id := dedup.StartCommandID(c.WorkflowName, key)
	if !b.sendCommand(shard, &wire.Command{CommandID: id, Kind: wire.KindStart, Start: s}, id) {
		refuse(api.CodePayloadTooLarge, tooLarge("the child's start (its input)"))
	}
}

// requestCancelChild applies a request_cancel_child decision of e: the
// child, once started, is asked to cancel.
func (b *batch) requestCancelChild(e *store.Execution, childID int) {
	ch, ok := e.Children.Get(e.ExecutionID, childID)
	if !ok || !ch.Open() || ch.CancelRequested {
		return
	}
	ch.CancelRequested = true
	e.Children = e.Children.With(ch)
	if ch.ExecutionID != "" {
		b.cancelChild(ch, "the parent workflow gave it up")
	}
}

// cancelChild asks the started child ch to cancel.
func (b *batch) cancelChild(ch store.ChildState, reason string) {
	id := "parent-cancel:" + ch.ExecutionID
	b.sendCommand(b.executionShard(ch.ExecutionID), &wire.Command{CommandID: id, Kind: wire.KindCancel,
		Cancel: &wire.CancelCommand{ExecutionID: ch.ExecutionID, Reason: reason}}, id)
}

// signalExternal applies a signal_external decision of e: a keyed
// signal to the target's shard, which reports how it went.
func (b *batch) signalExternal(e *store.Execution, s *wire.ExternalSignalAttrs) {
	key := externalSignalKey(e.ExecutionID, s.SignalID)
	sg := &wire.SignalCommand{ExecutionID: s.ExecutionID, WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID, SignalName: s.SignalName,
		Payload: s.Payload, IdempotencyKey: key, Sender: &wire.SenderRef{ExecutionID: e.ExecutionID, SignalID: s.SignalID}}
	fail := func(code, msg string) {
		b.appendEvent(e, wire.EventExternalSignalFailed, wire.ExternalSignalAttrs{SignalID: s.SignalID, Error: code, Message: msg})
		b.needWorkflowTask(e)
	}
	var shard int
	switch {
	case dedup.ValidateName(s.SignalName) != nil:
		fail(api.CodeInvalidSignalName, fmt.Sprintf("signal name %q is not 1 to 128 letters, digits, '_' or '-'", s.SignalName))
		return
	case s.ExecutionID != "":
		if !validUUID(s.ExecutionID) {
			fail(api.CodeInvalidExecutionID, fmt.Sprintf("execution id %q is not a UUID of 36 characters", s.ExecutionID))
			return
		}
		shard = b.executionShard(s.ExecutionID)
	default:
		if dedup.ValidateName(s.WorkflowName) != nil {
			fail(api.CodeInvalidWorkflowName, fmt.Sprintf("workflow name %q is not 1 to 128 letters, digits, '_' or '-'", s.WorkflowName))
			return
		}
		var err error
		if shard, err = b.startShard(s.WorkflowName, s.WorkflowID, ""); err != nil {
			fail(api.CodeUnavailable, err.Error())
			return
		}
	}
	id := dedup.NewID()
	if !b.sendCommand(shard, &wire.Command{CommandID: id, Kind: wire.KindSignal, Signal: sg}, "ext-signal:"+key) {
		fail(api.CodePayloadTooLarge, tooLarge("the signal (its payload)"))
	}
}

// reportSignal tells the sender of sg, if it is a workflow's, how sg
// went: out is its outcome.
func (b *batch) reportSignal(sg *wire.SignalCommand, out wire.Outcome) {
	if sg.Sender == nil || !validUUID(sg.Sender.ExecutionID) {
		return
	}
	r := &wire.Report{ExecutionID: sg.Sender.ExecutionID, What: wire.ReportSignalDelivered,
		Signal: &wire.ExternalSignalAttrs{SignalID: sg.Sender.SignalID, ExecutionID: out.ExecutionID}}
	if out.Error != "" {
		r.What, r.Signal.ExecutionID, r.Signal.Error, r.Signal.Message = wire.ReportSignalFailed, "", out.Error, out.Message
	}
	id := "report:signal:" + sg.Sender.ExecutionID + ":" + strconv.Itoa(sg.Sender.SignalID)
	b.sendCommand(b.executionShard(sg.Sender.ExecutionID), &wire.Command{CommandID: id, Kind: wire.KindReport, Report: r}, id)
}

// reportChildStart tells the parent of start s how it went: out is its
// outcome (the execution it started or found, or why it was refused).
func (b *batch) reportChildStart(s *wire.StartCommand, out wire.Outcome) {
	p := s.Parent
	if p != nil && p.Schedule != nil {
		b.reportScheduleStart(s, out)
		return
	}
	if p == nil || !validUUID(p.ExecutionID) {
		return
	}
	r := &wire.Report{ExecutionID: p.ExecutionID, What: wire.ReportChildStarted, Child: &wire.ChildAttrs{ChildID: p.ChildID,
		WorkflowName: s.WorkflowName, WorkflowID: out.WorkflowID, ExecutionID: out.ExecutionID, Status: out.Status}}
	if out.Error != "" {
		r.What, r.Child.ExecutionID, r.Child.Status, r.Child.Error, r.Child.Message = wire.ReportChildStartFailed, "", "", out.Error, out.Message
	}
	id := "report:child-start:" + p.ExecutionID + ":" + strconv.Itoa(p.ChildID)
	b.sendCommand(b.executionShard(p.ExecutionID), &wire.Command{CommandID: id, Kind: wire.KindReport, Report: r}, id)
}

// reportChildClosed tells e's parent, if it has one, that e's chain
// closed as it did.
func (b *batch) reportChildClosed(e *store.Execution) {
	p := e.Parent
	if p != nil && p.Schedule != nil && e.Status != wire.StatusContinuedAsNew {
		b.reportScheduleClosed(e)
		return
	}
	if p == nil || !validUUID(p.ExecutionID) || e.Status == wire.StatusContinuedAsNew {
		return
	}
	r := &wire.Report{ExecutionID: p.ExecutionID, What: wire.ReportChildClosed, Child: &wire.ChildAttrs{ChildID: p.ChildID,
		WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, ExecutionID: e.ExecutionID, Status: e.Status, Result: e.Result}}
	if len(e.Error) > 0 && e.Status != wire.StatusCompleted {
		var f wire.Failure
		if json.Unmarshal(e.Error, &f) == nil {
			r.Child.Failure = &f
		}
	}
	id := "report:child-closed:" + p.ExecutionID + ":" + strconv.Itoa(p.ChildID)
	shard := b.executionShard(p.ExecutionID)
	if !b.sendCommand(shard, &wire.Command{CommandID: id, Kind: wire.KindReport, Report: r}, id) {
		// Its result is too large to carry: the parent is told it closed,
		// and that its result did not reach it.
		r.Child.Result, r.Child.Failure = nil, nil
		r.Child.Error, r.Child.Message = api.CodePayloadTooLarge, tooLarge("the child's result")
		b.sendCommand(shard, &wire.Command{CommandID: id, Kind: wire.KindReport, Report: r}, id)
	}
}

// report applies a report to the execution it names: a child's start,
// refusal or close, or how a signal its code sent went, recorded in its
// history for its code when it is running, and in its children.
func (b *batch) report(c seqCommand) {
	r := c.cmd.Report
	e := b.execs[r.ExecutionID]
	if e == nil {
		return // pruned since: nothing to tell
	}
	if r.Signal != nil {
		if e.Status != wire.StatusRunning {
			return
		}
		typ := wire.EventExternalSignalDelivered
		if r.What == wire.ReportSignalFailed {
			typ = wire.EventExternalSignalFailed
		}
		b.appendEvent(e, typ, *r.Signal)
		b.needWorkflowTask(e)
		return
	}
	if r.Child == nil {
		return
	}
	// The run that started the child, or the newest of its chain, which
	// took its children when it continued as new.
	holder := b.newest(e)
	ch, ok := holder.Children.Get(e.ExecutionID, r.Child.ChildID)
	if !ok {
		return
	}
	switch r.What {
	case wire.ReportChildStarted:
		if ch.Status != store.ChildInitiated {
			return // told before
		}
		ch.Status, ch.ExecutionID = wire.StatusRunning, r.Child.ExecutionID
		if r.Child.Status != wire.StatusRunning && r.Child.Status != "" {
			// The key found a child that has closed since (a start sent
			// again long after): it closed as it did.
			ch.Status = r.Child.Status
		}
	case wire.ReportChildStartFailed:
		if ch.Status != store.ChildInitiated {
			return
		}
		ch.Status = store.ChildStartFailed
	case wire.ReportChildClosed:
		if !ch.Open() {
			return
		}
		ch.Status, ch.ExecutionID = r.Child.Status, cmp.Or(ch.ExecutionID, r.Child.ExecutionID)
	default:
		return
	}
	holder.Children = holder.Children.With(ch)
	b.changed[holder.ExecutionID] = true
	if holder == e && e.Status == wire.StatusRunning {
		attrs := *r.Child
		typ := wire.EventChildWorkflowStarted
		switch r.What {
		case wire.ReportChildStartFailed:
			typ = wire.EventChildWorkflowStartFailed
		case wire.ReportChildClosed:
			typ = wire.ChildClosedEvent(r.Child.Status)
		}
		if r.What == wire.ReportChildStarted && ch.Status != wire.StatusRunning {
			// Started and closed already: the code sees both.
			b.appendEvent(e, typ, wire.ChildAttrs{ChildID: ch.ChildID, WorkflowID: attrs.WorkflowID, ExecutionID: ch.ExecutionID})
			typ = wire.ChildClosedEvent(ch.Status)
		}
		b.appendEvent(e, typ, attrs)
		b.needWorkflowTask(e)
	}
	switch {
	case ch.Status == wire.StatusRunning && ch.CancelRequested:
		b.cancelChild(ch, "the parent workflow gave it up")
	case ch.Status == wire.StatusRunning && holder.Status != wire.StatusRunning:
		// The parent's chain closed before the child's start was told:
		// its close policy applies now.
		b.settleChild(holder, ch)
	}
}

// closeChildren applies the parent-close policies of the children still
// open of e, whose chain closed.
func (b *batch) closeChildren(e *store.Execution) {
	if e.Children == nil {
		return
	}
	for _, ch := range e.Children.Children {
		if ch.Open() && !ch.Settled && ch.Status == wire.StatusRunning {
			b.settleChild(e, ch)
		}
	}
}

// settleChild applies its close policy to ch, a started child of e whose
// chain closed.
func (b *batch) settleChild(e *store.Execution, ch store.ChildState) {
	ch.Settled = true
	e.Children = e.Children.With(ch)
	b.changed[e.ExecutionID] = true
	reason := fmt.Sprintf("its parent %s closed %s", e.ExecutionID, e.Status)
	switch {
	case ch.ClosePolicy == wire.ParentCloseAbandon:
	case ch.ClosePolicy == wire.ParentCloseRequestCancel, ch.CancelRequested:
		// A child the parent asked to cancel is cleaning up: it is left
		// to close as it does.
		if !ch.CancelRequested {
			b.cancelChild(ch, reason)
		}
	default:
		id := dedup.TerminateCommandID(ch.ExecutionID)
		b.sendCommand(b.executionShard(ch.ExecutionID), &wire.Command{CommandID: id, Kind: wire.KindTerminate,
			Terminate: &wire.TerminateCommand{ExecutionID: ch.ExecutionID, Reason: reason}}, id)
	}
}

// knownWorkflow says whether a child workflow's start of name on
// taskQueue can run: the configuration declares it there, or a live
// worker serves it there. A look-up that fails counts as served, as
// ingest's does; so does everything before the mirror of the workers'
// registrations is followed.
func (s *Scheduler) knownWorkflow(ctx context.Context) func(name, taskQueue string) bool {
	return func(name, taskQueue string) bool {
		if q, ok := s.cfg.DeclaredWorkflows[name]; ok && cmp.Or(q, wire.DefaultTaskQueue) == taskQueue {
			return true
		}
		s.mu.Lock()
		workers := s.workers
		s.mu.Unlock()
		if workers == nil {
			return true
		}
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ok, err := workers.Serves(ctx, registry.KindWorkflow, name, taskQueue, time.Now())
		return ok || err != nil
	}
}
