package store

import (
	"encoding/json"
	"fmt"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/wire"
)

// View is the execution as the API answers it.
func (e *Execution) View() api.Execution {
	v := api.Execution{
		ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, Status: e.Status,
		Input: wire.OrNull(e.Input), Result: wire.OrNull(e.Result), Error: wire.OrNull(e.Error),
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, ClosedAt: e.ClosedAt, StartedBy: deref(e.StartedBy),
		IdempotencyKey: deref(e.IdempotencyKey), TaskFailing: e.TaskFailing, PinnedBuild: e.PinnedBuild,
		ContinuedFrom: e.ContinuedFrom, ContinuedAs: e.ContinuedAs, Priority: PriorityOrDefault(e.Priority),
	}
	if r := e.Reset; r != nil {
		v.ResetFrom, v.ResetPoint, v.ResetTo = r.From, r.FromSeq, r.To
		if r.To != "" && e.Status != wire.StatusContinuedAsNew {
			v.ContinuedAs = "" // the chain's link to the new run, which reset_to names
		}
	}
	if e.Status == wire.StatusRunning {
		v.WaitingOn = e.Waiting
	}
	if r := e.CancelRequest; r != nil {
		at := r.At
		v.CancelRequestedAt = &at
	}
	if c := e.Concurrency; c != nil {
		key := c.Key
		v.ConcurrencyKey = &key
		if e.Status == wire.StatusPending {
			v.WaitingFor = api.WaitingForConcurrency
		}
	}
	if e.Parent != nil {
		v.ParentExecutionID = e.Parent.ExecutionID
	}
	if t := e.Timeouts; t != nil {
		v.RunDeadline, v.ExecutionDeadline = t.RunDeadline, t.ExecutionDeadline
	}
	if e.Versioning == wire.VersioningPinned {
		v.Versioning = e.Versioning
	}
	v.HistoryLength, v.HistoryBytes = e.LastSeq, e.HistoryBytes
	if w := e.HistoryWarning; w != nil {
		warning := *w
		warning.Events, warning.Bytes = e.LastSeq, e.HistoryBytes
		warning.Message = fmt.Sprintf("the history has %d events and %d bytes, past the warning threshold of %d events or %d bytes: "+
			"at more than %d events or %d bytes the execution fails with %s (continue as new before then)",
			e.LastSeq, e.HistoryBytes, w.WarnEvents, w.WarnBytes, w.MaxEvents, w.MaxBytes, api.FailureHistoryLimitExceeded)
		v.HistoryWarning = &warning
	}
	return v
}

// EventViews are events as the API answers them: each its attributes
// with seq, type and at beside them.
func EventViews(events []wire.Event) []api.Event {
	out := make([]api.Event, 0, len(events))
	for _, ev := range events {
		attrs := map[string]any{}
		if len(ev.Attrs) > 0 {
			_ = json.Unmarshal(ev.Attrs, &attrs)
		}
		out = append(out, api.Event{Seq: ev.Seq, Type: ev.Type, At: ev.At, Attrs: attrs})
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
