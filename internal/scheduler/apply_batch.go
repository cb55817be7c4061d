package scheduler

import (
	"context"
	"time"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Batch operations (docs/batches.md). A batch has a part on one shard of
// each store (placement.Layout.BatchShards), created and cancelled by
// batch commands there. The shard's timer loop steps each running part
// (stepBatches): it reads the next page of its store's executions that
// the batch matches, newest first from its cursor, and sends each its
// operation, a cancel, terminate, signal or reset command naming the
// batch, through the outbox; the cursor advances in the same
// transaction, so that a part sends to each execution once whatever
// crashes. Each command's id is derived from the batch and the
// execution, and each is idempotent where it applies (a terminate or
// cancel of what closed changes nothing, a signal carries the batch's
// key, a reset already made by the batch answers the run it made), so a
// command sent again is applied once. The shard that applies one
// reports back how it went (a report, wire.BatchReport), which the
// part counts once per execution (batch_items).

// batchLimit bounds the parts one transaction steps, batchPageMax the
// executions one step sends to.
const (
	batchLimit   = 16
	batchPageMax = 500
)

// batchCommand applies a batch command: a part created (kept as it is if
// it exists) or cancelled.
func (b *batch) batchCommand(c seqCommand) {
	bc := c.cmd.Batch
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindBatch, AppliedAt: b.now}
	switch bc.Op {
	case wire.BatchOpCreate:
		due := b.now
		b.writes.Batches.New = append(b.writes.Batches.New, &store.Batch{BatchID: bc.BatchID, Shard: b.shard, Spec: *bc.Spec,
			State: store.BatchRunning, NextDue: &due, CreatedAt: b.now, UpdatedAt: b.now})
	case wire.BatchOpCancel:
		b.writes.Batches.Cancelled = append(b.writes.Batches.Cancelled, bc.BatchID)
	}
	b.addOutcome(out)
}

// batchReport records how a batch's operation went on one execution.
func (b *batch) batchReport(r *wire.BatchReport) {
	b.writes.Batches.Reports = append(b.writes.Batches.Reports, store.BatchItem{BatchID: r.BatchID, ExecutionID: r.ExecutionID,
		Error: storableText(r.Error), Message: storableText(r.Message), At: b.now})
}

// reportToBatch tells the batch that sent c how it went: out is c's
// outcome.
func (b *batch) reportToBatch(c seqCommand, out wire.Outcome) {
	ref := c.cmd.FromBatch
	r := &wire.BatchReport{BatchID: ref.BatchID, ExecutionID: c.cmd.TargetExecution(), Error: out.Error, Message: out.Message}
	id := "report:batch:" + c.cmd.CommandID
	b.sendCommand(ref.Shard, &wire.Command{CommandID: id, Kind: wire.KindReport, Report: &wire.Report{What: wire.ReportBatchItem, Batch: r}}, id)
}

// stepBatches steps, at now, up to limit of the shard's running batch
// parts that are due: each sends its operation to the next page of its
// matching executions, at most its rate's worth a second, and is due
// again when its rate allows the next page; a part that found fewer
// than a page has sent to all, and completes once every execution has
// reported.
func stepBatches(ctx context.Context, tx store.Tx, env applyEnv, applied int64, now time.Time, limit int) (*store.Writes, int, error) {
	due, err := store.DueBatches(ctx, tx, env.shard, now, limit)
	if err != nil || len(due) == 0 {
		return nil, 0, err
	}
	b := newBatch(ctx, env, now.UTC(), applied)
	for _, bt := range due {
		rate := max(bt.Spec.Rate, 1)
		page := min(rate, batchPageMax)
		execs, err := store.BatchPage(ctx, tx, bt, page)
		if err != nil {
			return nil, 0, err
		}
		for _, e := range execs {
			b.sendBatchOperation(bt, e)
		}
		bt.Matched += int64(len(execs))
		if n := len(execs); n > 0 {
			bt.Cursor = &store.ListCursor{CreatedAt: execs[n-1].CreatedAt, ExecutionID: execs[n-1].ExecutionID}
		}
		if len(execs) < page {
			bt.Exhausted, bt.NextDue = true, nil
		} else {
			next := b.now.Add(time.Duration(page) * time.Second / time.Duration(rate))
			bt.NextDue = &next
		}
		b.writes.Batches.Stepped = append(b.writes.Batches.Stepped, bt)
	}
	return &b.writes, len(due), nil
}

// sendBatchOperation sends bt's operation to the execution e.
func (b *batch) sendBatchOperation(bt *store.Batch, e *store.Execution) {
	spec := &bt.Spec
	id := dedup.BatchItemCommandID(bt.BatchID, e.ExecutionID)
	cmd := &wire.Command{CommandID: id, FromBatch: &wire.BatchRef{BatchID: bt.BatchID, Shard: b.shard}}
	switch spec.Operation {
	case wire.BatchOperationCancel:
		cmd.Kind, cmd.Cancel = wire.KindCancel, &wire.CancelCommand{ExecutionID: e.ExecutionID, Reason: spec.Reason}
	case wire.BatchOperationTerminate:
		cmd.Kind, cmd.Terminate = wire.KindTerminate, &wire.TerminateCommand{ExecutionID: e.ExecutionID, Reason: spec.Reason}
	case wire.BatchOperationSignal:
		if spec.Signal == nil {
			return
		}
		cmd.Kind, cmd.Signal = wire.KindSignal, &wire.SignalCommand{ExecutionID: e.ExecutionID, SignalName: spec.Signal.Name,
			Payload: spec.Signal.Payload, IdempotencyKey: "batch:" + bt.BatchID}
	case wire.BatchOperationReset:
		if spec.Reset == nil {
			return
		}
		target := spec.Reset.Target
		cmd.Kind, cmd.Reset = wire.KindReset, &wire.ResetCommand{ExecutionID: e.ExecutionID, Target: &target,
			ReapplySignals: spec.Reset.ReapplySignals, Reason: spec.Reason}
	default:
		return
	}
	b.sendCommand(b.executionShard(e.ExecutionID), cmd, id)
}
