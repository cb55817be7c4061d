package scheduler

import (
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// duplicate counts a duplicate that ingest or a binding caught (the
// broker's, or ingest's replay of a claimed key) against the key it
// duplicated. It comes after the duplicated command on the shard, so the
// claim is there unless that command was refused; the count then finds
// no row and is dropped. It reads nothing and answers nothing.
func (b *batch) duplicate(d *wire.DuplicateCommand) {
	switch {
	case d.IdempotencyKey != "":
		b.writes.Duplicates.AddStart(store.ClaimRef{WorkflowName: d.WorkflowName, IdempotencyKey: d.IdempotencyKey}, d.Layer)
	case d.ExecutionID != "":
		b.writes.Duplicates.AddSignal(store.SignalRef{ExecutionID: d.ExecutionID, IdempotencyKey: d.SignalKey}, d.Layer)
	default:
		b.writes.Duplicates.AddWorkflowSignal(store.WorkflowSignalRef{WorkflowName: d.WorkflowName, WorkflowID: d.WorkflowID, IdempotencyKey: d.SignalKey}, d.Layer)
	}
}
