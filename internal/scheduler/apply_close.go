package scheduler

import (
	"encoding/json"
	"time"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func (b *batch) close(e *store.Execution, status, event string, attrs wire.WorkflowClosedAttrs) {
	e.Status = status
	now := b.now
	e.ClosedAt = &now
	if keep := b.retention.For(e.WorkflowName); keep > 0 {
		pruneAfter := now.Add(keep)
		e.PruneAfter = &pruneAfter
	}
	b.writes.ExecutionsClosed = append(b.writes.ExecutionsClosed, e.ExecutionID)
	b.appendEvent(e, event, attrs)
	if e.CompletionCallback != nil {
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

// terminate closes a running execution as Terminated, for reason: at
// once, without a workflow task. Workers are told, so that its running
// activities' contexts are cancelled.
func (b *batch) terminate(e *store.Execution, reason string) {
	e.Error, _ = json.Marshal(wire.Failure{Type: "Terminated", Message: reason})
	b.close(e, wire.StatusTerminated, wire.EventWorkflowTerminated, wire.WorkflowClosedAttrs{Reason: reason})
	e.WFTOutstanding, e.WFTDirty = false, false
	b.stopActivities(e, "terminate:", reason)
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
