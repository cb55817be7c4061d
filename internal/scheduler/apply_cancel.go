package scheduler

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Cooperative cancellation (docs/cancellation.md). A cancel does not
// close a running execution: it records the request on the run
// (store.CancelRequest) and in its history (WorkflowCancelRequested),
// and asks for a workflow task. The workflow code sees it there as it
// sees a signal: its context is cancelled, the activities and timers it
// waits on are given up (request_cancel_activity, cancel_timer), it may
// run cleanup in a disconnected context, and its return closes the run
// Cancelled (cancel_workflow). A grace, the request's or the workflow's
// configured one, bounds how long that may take: a run still open at its
// end is terminated. A run whose code never ran has nothing to clean up
// and closes at once.

// cancelCommand applies a cancel command: the execution it names (the
// newest run of its chain) is asked to cancel, once; a closed one is left
// as it ended, and the answer says how.
func (b *batch) cancelCommand(c seqCommand) {
	cc := c.cmd.Cancel
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindCancel, ExecutionID: cc.ExecutionID, AppliedAt: b.now}
	e := b.execs[cc.ExecutionID]
	if e == nil {
		b.refuse(out, http.StatusNotFound, api.CodeExecutionNotFound, fmt.Sprintf("no execution %s", cc.ExecutionID))
		return
	}
	e = b.newest(e)
	if e.Status == wire.StatusPending {
		// Its code never ran: nothing to clean up.
		b.closeNow(e, cancelling, cmp.Or(cc.Reason, "cancelled"))
	}
	if e.Status == wire.StatusRunning {
		grace := time.Duration(cc.GraceMS) * time.Millisecond
		if grace <= 0 {
			grace = b.cancelGrace[e.WorkflowName]
		}
		b.requestCancel(e, cmp.Or(cc.Reason, "cancelled"), wire.CancelCauseRequest, grace)
	}
	out.CancelRequested = e.Status == wire.StatusRunning && e.CancelRequest != nil
	b.outcome(out, e, false, false)
}

// requestCancel asks the running execution e to cancel, for reason and
// cause, its code given grace (0: no bound) to close it. A run asked
// already keeps its first request.
func (b *batch) requestCancel(e *store.Execution, reason, cause string, grace time.Duration) {
	if e.CancelRequest != nil {
		return
	}
	if e.WFTID == 0 && !e.WFTOutstanding {
		// Its code has not run (a start_at in the future, or its first
		// task not dispatched yet): nothing to clean up.
		b.closeNow(e, cancelling, reason)
		return
	}
	req := &store.CancelRequest{At: b.now, Reason: reason, Cause: cause}
	if grace > 0 {
		deadline := b.now.Add(grace)
		req.Deadline = &deadline
	}
	b.askCancel(e, req)
}

// askCancel records req on e, in its row and its history, arms its
// grace's end, and asks for a workflow task, in which the code sees it.
func (b *batch) askCancel(e *store.Execution, req *store.CancelRequest) {
	e.CancelRequest = req
	b.changed[e.ExecutionID] = true
	attrs := wire.WorkflowCancelRequestedAttrs{Reason: req.Reason, Cause: req.Cause}
	if req.Deadline != nil {
		attrs.GraceMS = max(req.Deadline.Sub(req.At).Milliseconds(), 1)
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerCancelGrace,
			FireAt: *req.Deadline, Attrs: json.RawMessage(`{}`)})
	}
	b.appendEvent(e, wire.EventWorkflowCancelRequested, attrs)
	b.needWorkflowTask(e)
	// A worker running eager attempts of its outstanding task, which
	// hold the task until they end, cancels them, so that the code is
	// told promptly.
	data, _ := json.Marshal(map[string]any{"execution_id": e.ExecutionID, "cancel_requested": true})
	b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
		Shard: b.shard, Subject: broker.CancelRequestedSubject(e.ExecutionID), MsgID: "cancel-requested:" + e.ExecutionID, Payload: data,
	})
}

// cancelGraceEnded terminates e, asked to cancel, if its grace has ended
// and its code has not closed it.
func (b *batch) cancelGraceEnded(e *store.Execution) {
	req := e.CancelRequest
	if req == nil || req.Deadline == nil || b.now.Before(*req.Deadline) {
		return
	}
	msg := fmt.Sprintf("cancel_grace of %s ended before the workflow closed the execution", req.Deadline.Sub(req.At).Round(time.Millisecond))
	if wire.TimeoutCause(req.Cause) {
		// Asked to cancel because it timed out: it closes as it would
		// have without a grace.
		b.closeNow(e, timingOut, req.Reason+"; "+msg)
		return
	}
	b.terminate(e, msg)
}

// cancelActivity applies a request_cancel_activity decision of e: the
// activity, if it has not finished, is marked given up, and the worker
// running its attempt, if any, is told to cancel the attempt's context.
// The attempt's end closes it (Completed if it completed after all, else
// Cancelled: ActivityCancelled), and none follows; so the workflow, which
// waits for that, knows whether the step was taken. The end of the
// attempt's time closes it Cancelled too, and one waiting for a retry (no
// attempt in flight) closes Cancelled at once.
func (b *batch) cancelActivity(e *store.Execution, activityID int) {
	ref := store.ActivityRef{ExecutionID: e.ExecutionID, ActivityID: activityID}
	a := b.activities[ref]
	if a == nil || a.Status != store.ActivityScheduled {
		return
	}
	a.Status = store.ActivityCancelRequested
	if a.RetryAt != nil {
		// It waits for a retry: no attempt in flight, none follows.
		b.activityCancelled(e, a, &wire.Failure{Type: "Cancelled", Message: "the workflow gave the activity up while it waited for a retry"})
	} else {
		b.activityChanged(ref, a)
	}
	data, _ := json.Marshal(map[string]any{"execution_id": e.ExecutionID, "activity_id": activityID})
	b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
		Shard: b.shard, Subject: broker.CancelledActivitySubject(e.ExecutionID, activityID),
		MsgID: "cancel-activity:" + e.ExecutionID + ":" + strconv.Itoa(activityID), Payload: data,
	})
}
