package scheduler

import (
	"fmt"
	"net/http"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// signal delivers a signal: appended once per (execution, key) when keyed,
// every time when not.
func (b *batch) signal(c seqCommand) {
	sg := c.cmd.Signal
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindSignal, ExecutionID: sg.ExecutionID, AppliedAt: b.now}
	e := b.execs[sg.ExecutionID]
	if sg.ExecutionID == "" && sg.WorkflowID != "" {
		// A workflow code's signal to a workflow_id: its latest execution.
		e = b.byWorkflow[store.WorkflowRef{WorkflowName: sg.WorkflowName, WorkflowID: sg.WorkflowID}]
		if e == nil {
			b.refuse(out, http.StatusNotFound, api.CodeExecutionNotFound, fmt.Sprintf("no execution of workflow %s with workflow_id %q", sg.WorkflowName, sg.WorkflowID))
			return
		}
	}
	if e == nil {
		b.refuse(out, http.StatusNotFound, api.CodeExecutionNotFound, fmt.Sprintf("no execution %s", sg.ExecutionID))
		return
	}
	// A run that continued as new passes its signals to the newest run of
	// its chain, under whose first run keys are claimed.
	e = b.newest(e)
	out.ExecutionID = e.ExecutionID
	out.WorkflowName, out.WorkflowID, out.Status = e.WorkflowName, e.WorkflowID, e.Status
	ref := store.SignalRef{ExecutionID: e.Chain(), IdempotencyKey: sg.IdempotencyKey}
	if sg.IdempotencyKey != "" && b.signalClaims[ref] {
		// Delivered before: acknowledged, even if the run has closed since.
		b.writes.Duplicates.AddSignal(ref, store.LayerClaim)
		b.addOutcome(out)
		return
	}
	if e.Status != wire.StatusRunning && e.Status != wire.StatusPending {
		b.refuse(out, http.StatusConflict, api.CodeExecutionTerminal, fmt.Sprintf("execution %s is %s and takes no signals", e.ExecutionID, e.Status))
		return
	}
	b.deliverSignal(e, sg)
	out.SignalDelivered = true
	b.addOutcome(out)
}

// signalWithStart delivers a signal to the running execution of a
// workflow_id, or starts one with the signal in the same transaction.
func (b *batch) signalWithStart(c seqCommand) {
	st, sg := c.cmd.Start, c.cmd.Signal
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindSignalWithStart, AppliedAt: b.now, Keyed: sg.IdempotencyKey != ""}
	wref := store.WorkflowRef{WorkflowName: st.WorkflowName, WorkflowID: st.WorkflowID}
	prior := b.byWorkflow[wref]
	if prior != nil {
		ref := store.SignalRef{ExecutionID: prior.Chain(), IdempotencyKey: sg.IdempotencyKey}
		if out.Keyed && b.signalClaims[ref] {
			b.writes.Duplicates.AddSignal(ref, store.LayerClaim)
			b.outcome(out, prior, false, false) // landed before: the same execution, nothing appended
			return
		}
		if prior.Status == wire.StatusRunning || prior.Status == wire.StatusPending {
			b.deliverSignal(prior, sg)
			out.SignalDelivered = true
			b.outcome(out, prior, false, false)
			return
		}
		refuse := false
		switch st.ReusePolicy {
		case wire.ReuseRejectDuplicate:
			refuse = true
		case wire.ReuseAllowDuplicateFailedOnly:
			refuse = prior.Status != wire.StatusFailed && prior.Status != wire.StatusCancelled
		}
		if refuse {
			b.refuse(out, http.StatusConflict, api.CodeWorkflowIDConflict,
				fmt.Sprintf("workflow %s with workflow_id %q already ran (execution %s, %s)", st.WorkflowName, st.WorkflowID, prior.ExecutionID, prior.Status))
			return
		}
	}
	id := b.mintExecutionID()
	e := &store.Execution{
		ExecutionID: id, Shard: b.shard, WorkflowName: st.WorkflowName, WorkflowID: st.WorkflowID,
		TaskQueue: st.TaskQueue, Status: wire.StatusRunning, Input: st.Input, CreatedAt: b.now, UpdatedAt: b.now,
		TraceParent: b.curTrace, Versioning: st.Versioning, PinnedBuild: st.PinnedBuild, Priority: validPriority(st.Priority),
	}
	if e.Versioning == "" {
		e.Versioning = wire.VersioningAutoUpgrade
		if b.pinned[e.WorkflowName] {
			e.Versioning = wire.VersioningPinned
		}
	}
	b.execs[id] = e
	b.newExecs[id] = true
	b.byWorkflow[wref] = e
	b.writes.NewExecutions = append(b.writes.NewExecutions, e)
	b.appendEvent(e, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{
		WorkflowName: st.WorkflowName, WorkflowID: st.WorkflowID, Input: st.Input, TaskQueue: st.TaskQueue,
		SearchAttributes: st.SearchAttributes,
	})
	b.setSearchAttributes(e, st.SearchAttributes)
	b.setTimeouts(e, st, nil, b.now)
	sg.ExecutionID = id
	b.deliverSignal(e, sg)
	out.SignalDelivered = true
	b.outcome(out, e, true, false)
}

// deliverSignal appends a signal to a running execution and records its
// key.
func (b *batch) deliverSignal(e *store.Execution, sg *wire.SignalCommand) {
	b.appendEvent(e, wire.EventSignalReceived, wire.SignalReceivedAttrs{SignalName: sg.SignalName, Payload: sg.Payload, IdempotencyKey: sg.IdempotencyKey})
	b.needWorkflowTask(e)
	if sg.IdempotencyKey != "" {
		ref := store.SignalRef{ExecutionID: e.Chain(), IdempotencyKey: sg.IdempotencyKey}
		b.signalClaims[ref] = true
		b.writes.SignalClaims = append(b.writes.SignalClaims, ref)
	}
}
