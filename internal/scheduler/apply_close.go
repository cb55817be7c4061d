package scheduler

import (
	"encoding/json"
	"time"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func (b *batch) close(e *store.Execution, status, event string, attrs wire.WorkflowClosedAttrs) {
	e.Status = status
	now := b.now
	e.ClosedAt = &now
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

func (b *batch) terminate(e *store.Execution, reason string) {
	b.close(e, wire.StatusTerminated, wire.EventWorkflowTerminated, wire.WorkflowClosedAttrs{Reason: reason})
	e.WFTOutstanding, e.WFTDirty = false, false
}
