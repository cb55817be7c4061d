package scheduler

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func (b *batch) close(e *store.Execution, status, event string, attrs wire.WorkflowClosedAttrs) {
	// A run that continued as new, or that a reset replaced, closes; its
	// chain goes on in the new run.
	chainEnds := status != wire.StatusContinuedAsNew && (e.Reset == nil || e.Reset.To == "")
	if e.Concurrency != nil && chainEnds {
		// The chain gives back its slot, or its place in the queue.
		b.concurrencyClosed(e, e.Status == wire.StatusPending)
	}
	e.Status = status
	now := b.now
	e.ClosedAt = &now
	e.Waiting = nil // it waits for nothing now
	if keep := b.retention.For(e.WorkflowName); keep > 0 {
		pruneAfter := now.Add(keep)
		e.PruneAfter = &pruneAfter
	}
	b.writes.ExecutionsClosed = append(b.writes.ExecutionsClosed, e.ExecutionID)
	b.closeUpdates(e, status)
	b.appendEvent(e, event, attrs)
	if chainEnds {
		// The chain closed: its parent is told, and its children are
		// dealt with as their policy says.
		b.reportChildClosed(e)
		b.closeChildren(e)
	}
	if e.CompletionCallback != nil && chainEnds {
		// A chain's callback is delivered when its last run closes.
		payload, _ := json.Marshal(CallbackPayload{
			ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, Status: status,
			Result: wire.OrNull(e.Result), Error: wire.OrNull(e.Error), ClosedAt: now,
		})
		b.writes.Callbacks = append(b.writes.Callbacks, store.CallbackDelivery{ExecutionID: e.ExecutionID, URL: *e.CompletionCallback, Payload: payload})
	}
}

// CallbackPayload is the body of a completion callback.
type CallbackPayload struct {
	ExecutionID  string          `json:"execution_id"`
	WorkflowName string          `json:"workflow_name"`
	WorkflowID   string          `json:"workflow_id"`
	Status       string          `json:"status"`
	Result       json.RawMessage `json:"result"`
	Error        json.RawMessage `json:"error"`
	ClosedAt     time.Time       `json:"closed_at"`
}

// closing is how an execution is closed at once, without a workflow
// task, by a command: cancelled or terminated.
type closing struct {
	status, event string
	// failure is the type of the execution's error; reason says why when
	// the command does not.
	failure, reason string
	// msgPrefix makes the message id that tells workers, one per
	// execution.
	msgPrefix string
}

var (
	cancelling  = closing{status: wire.StatusCancelled, event: wire.EventWorkflowCancelled, failure: "Cancelled", reason: "cancelled", msgPrefix: "cancel:"}
	terminating = closing{status: wire.StatusTerminated, event: wire.EventWorkflowTerminated, failure: "Terminated", reason: "terminated", msgPrefix: "terminate:"}
)

// closeNow closes a running execution how says, for reason: at once,
// without a workflow task. Workers are told, so that its running
// activities' contexts are cancelled; its pending activities and timers
// are abandoned (their results and firings find the execution closed).
func (b *batch) closeNow(e *store.Execution, how closing, reason string) {
	e.Error, _ = json.Marshal(wire.Failure{Type: how.failure, Message: reason})
	b.close(e, how.status, how.event, wire.WorkflowClosedAttrs{Reason: reason})
	e.WFTOutstanding, e.WFTDirty = false, false
	b.stopActivities(e, how.msgPrefix, reason)
}

// terminate closes a running execution as Terminated, for reason, as a
// start with reuse_policy terminate_if_running does its prior run.
func (b *batch) terminate(e *store.Execution, reason string) { b.closeNow(e, terminating, reason) }

// closeCommand applies a cancel or terminate command (kind) for the
// execution executionID: a running one is closed how says; closing a
// closed one changes nothing, and the answer says how it ended.
func (b *batch) closeCommand(c seqCommand, kind, executionID, reason string, how closing) {
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: kind, ExecutionID: executionID, AppliedAt: b.now}
	e := b.execs[executionID]
	if e == nil {
		b.refuse(out, http.StatusNotFound, api.CodeExecutionNotFound, fmt.Sprintf("no execution %s", executionID))
		return
	}
	// A run that continued as new: the command is for its chain, whose
	// newest run it closes.
	e = b.newest(e)
	out.ExecutionID = e.ExecutionID
	if e.Status == wire.StatusRunning || e.Status == wire.StatusPending {
		b.closeNow(e, how, cmp.Or(reason, how.reason))
	}
	b.outcome(out, e, false, false)
}

// stopActivities tells workers, after the commit, that the execution e
// closed, so that they cancel the contexts of its running activities
// (the bucket of cancelled executions, which workers watch). msgPrefix
// makes the message id, one per execution.
func (b *batch) stopActivities(e *store.Execution, msgPrefix, reason string) {
	data, _ := json.Marshal(map[string]string{"execution_id": e.ExecutionID, "reason": reason})
	b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
		Shard: b.shard, Subject: broker.CancelledSubject(e.ExecutionID), MsgID: msgPrefix + e.ExecutionID, Payload: data,
	})
}
