package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Reads gathers the reads of an apply transaction so that they reach
// PostgreSQL in one round trip, executed in the order queued. Each method
// queues one statement (none for an empty request) that fills out when
// Send runs. The zero value is ready to use. Its methods are in the files
// of the tables they read.
type Reads struct {
	b pgx.Batch
}

// Send runs the queued statements in tx and fills their results. It
// returns the first error, which aborts the transaction.
func (r *Reads) Send(ctx context.Context, tx Tx) error {
	if r.b.Len() == 0 {
		return nil
	}
	err := tx.SendBatch(ctx, &r.b).Close()
	r.b = pgx.Batch{}
	return err
}

// readAlone runs one of Reads' methods by itself, in a round trip of its
// own: load queues its statement for refs on a fresh Reads, and the map
// it fills is returned once Send ran. LoadActivities, LoadExecutions and
// the like are this, for a caller with nothing else to read.
func readAlone[R any, K comparable, V any](ctx context.Context, tx Tx, refs []R, load func(*Reads, []R, map[K]V)) (map[K]V, error) {
	out := make(map[K]V, len(refs))
	var r Reads
	load(&r, refs, out)
	return out, r.Send(ctx, tx)
}

// Writes is everything one apply transaction writes, sent to PostgreSQL as
// one batch (one round trip).
type Writes struct {
	Shard             int
	AppliedSeq        int64
	NewExecutions     []*Execution
	UpdatedExecutions []*Execution
	Events            []EventRow
	NewActivities     []*Activity
	UpdatedActivities []*Activity
	// RepointClaims moves claims taken for a fresh execution to the
	// existing execution a start resolved to instead.
	RepointClaims map[ClaimRef]string
	// DeleteClaims rolls back claims taken by starts that were refused.
	DeleteClaims []ClaimRef
	// NewTimers are durable timers to set; FiredTimers those to delete.
	NewTimers   []Timer
	FiredTimers []int64
	// ActivityDone clears the timers of activities that finished;
	// ExecutionsClosed clears every timer of executions that closed.
	ActivityDone     []ActivityRef
	ExecutionsClosed []string
	// CancelledTimers are workflow timers the workflow cancelled: they
	// never fire.
	CancelledTimers []WorkflowTimerRef
	// WorkflowTasksDone clears the deadlines of workflow tasks that
	// completed.
	WorkflowTasksDone []WorkflowTaskRef
	// Callbacks are completion callbacks to deliver.
	Callbacks []CallbackDelivery
	// SignalClaims record keyed signals delivered.
	SignalClaims []SignalRef
	// NewUpdates are updates requested; UpdateChanges what the batch
	// changed of updates (their status, answer or run). The runner
	// announces the changes once the batch commits (UpdateSubject).
	NewUpdates    []*Update
	UpdateChanges []UpdateChange
	// Duplicates are added to the counts of the claims they duplicated.
	Duplicates DuplicateCounts
	// Outcomes are the outcomes of the commands applied, stored by
	// command id.
	Outcomes []OutcomeRow
	// States are query states workflow tasks set, upserted by execution
	// and name; the scheduler announces them once the batch commits.
	States []StateRow
	// Policies are what the batch changed of start policies' deferred
	// starts.
	Policies PolicyWrites
	// Schedules are what the batch changed of schedules and their
	// ledgers.
	Schedules ScheduleWrites
	// Batches are what the batch changed of batch operations' parts.
	Batches BatchWrites
	// SearchAttributes are search attributes set (upserted by execution
	// and name), SearchAttributeCopies those a run takes from the run it
	// continues, after them.
	SearchAttributes      []SearchAttributeRow
	SearchAttributeCopies []SearchAttributeCopy
	// Concurrency are what the batch changed of concurrency keys beyond
	// their states (which Policies.Keys writes, first).
	Concurrency ConcurrencyWrites
	// DeadCommands are commands set aside, unapplied (their outcomes are
	// in Outcomes).
	DeadCommands []DeadCommand
	// Outbox rows get their ids filled in.
	Outbox []*OutboxMsg
	// PublishedOutbox are rows of earlier batches that JetStream has
	// acknowledged: deleted in this transaction rather than one of their
	// own.
	PublishedOutbox []int64
	// Preconditions, when set, are checked before anything is written:
	// the batch was applied without reading (see Preconditions).
	Preconditions *Preconditions
	// StickyMoved counts the sticky workflow tasks the batch moved to
	// every worker because their worker did not take them, for the
	// scheduler's metrics once it commits.
	StickyMoved int
	// HistoryCrossings count the executions whose histories passed a
	// limit in the batch, for the scheduler's metrics once it commits:
	// nothing is written for them beyond the executions' rows.
	HistoryCrossings HistoryCrossings
}

// HistoryCrossings count the executions whose histories passed their
// warning threshold (Warned) or their hard limit (Exceeded, which failed
// them), once each.
type HistoryCrossings struct {
	Warned, Exceeded int
}

// Write sends everything w holds to PostgreSQL in tx as one pgx batch: one
// round trip, and one set-based statement per kind of row (executions
// inserted, events, outbox rows, ...), however many rows the batch has;
// only a few updated executions or activities go one UPDATE per row (see
// setBasedUpdateRows). The statements run in a fixed order; each kind is
// skipped when it has no rows.
func Write(ctx context.Context, tx Tx, w *Writes) error {
	b := &pgx.Batch{}
	queuePreconditions(b, w.Preconditions)
	queueInsertExecutions(b, w.NewExecutions)
	queueUpdateExecutions(b, w.UpdatedExecutions)
	queueInsertEvents(b, w.Events)
	queueInsertActivities(b, w.NewActivities)
	queueUpdateActivities(b, w.UpdatedActivities)
	queueRepointClaims(b, w.RepointClaims)
	queueInsertTimers(b, w.Shard, w.NewTimers)
	queueDeleteTimers(b, w.ActivityDone, w.ExecutionsClosed, w.WorkflowTasksDone, w.CancelledTimers)
	if len(w.FiredTimers) > 0 {
		b.Queue(`DELETE FROM timers WHERE timer_id = ANY($1)`, w.FiredTimers)
	}
	queueInsertSignalClaims(b, w.SignalClaims)
	queueInsertUpdates(b, w.NewUpdates)
	queueUpdateChanges(b, w.UpdateChanges)
	queueInsertCallbacks(b, w.Shard, w.Callbacks)
	queueDeleteClaims(b, w.DeleteClaims)
	queueCountDuplicates(b, w.Duplicates)
	queuePolicyWrites(b, w.Shard, &w.Policies)
	queueScheduleWrites(b, &w.Schedules)
	queueBatchWrites(b, w.Shard, &w.Batches)
	queueSearchAttributeWrites(b, w.SearchAttributes, w.SearchAttributeCopies)
	queueConcurrencyWrites(b, w.Shard, &w.Concurrency)
	queueUpsertOutcomes(b, w.Outcomes)
	queueUpsertStates(b, w.States)
	queueInsertDeadCommands(b, w.Shard, w.DeadCommands)
	queueInsertOutbox(b, w.Outbox)
	if len(w.PublishedOutbox) > 0 {
		b.Queue(`DELETE FROM outbox WHERE id = ANY($1)`, w.PublishedOutbox)
	}
	// An apply clears the shard's failure mark, whoever wrote it and
	// whatever its runner believes it recorded: the shard applies.
	b.Queue(`UPDATE shard_offsets SET applied_seq = $2, `+clearMarkSQL+` WHERE shard = $1`, w.Shard, w.AppliedSeq)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write batch of shard %d: %w", w.Shard, wrapPrecondition(err))
	}
	return nil
}

// The set-based queue helpers, each in the file of its table
// (queueInsertExecutions, queueInsertTimers, ...), add one statement for
// all rows of a kind, passing every column as an array that unnest turns
// back into rows. A nil pointer or nil json.RawMessage in a slice is a
// NULL element, as it is a NULL argument of a single-row statement. The
// arrays are unnested side by side in a SELECT list, which zips them row
// by row (they have one length); unnest(a, b, ...) in FROM would do the
// same but materialises each array first, which costs more than the rows
// themselves in small batches.
//
// The UPDATEs and DELETEs that join the arrays to a table also match its key
// with = ANY of the key array. In the plan it caches for a prepared
// statement, PostgreSQL takes an array for ten elements, and for ten rows to
// join it prefers reading a table of up to a few thousand rows whole; with
// the ANY it fetches just those keys through the index.

// setBasedUpdateRows is how many executions (or activities) a batch must
// update before their UPDATE goes set-based; below it, each row gets an
// UPDATE by primary key. PostgreSQL keeps one cached plan for those, but
// plans the set-based UPDATE anew on nearly every execution (its cached
// plan, costed for ten array elements, loses to a custom plan for fewer),
// and that planning costs more than a few single-row UPDATEs. Measured on
// PostgreSQL 15, backend CPU per batch: even at about 8 rows, half at 32.
const setBasedUpdateRows = 8

// lastOf drops rows whose key a later row repeats, keeping the first one's
// place and the last one's value: what one UPDATE per row, in order, would
// leave.
func lastOf[R any, K comparable](rows []R, key func(R) K) []R {
	at := make(map[K]int, len(rows))
	out := make([]R, 0, len(rows))
	for _, r := range rows {
		k := key(r)
		if i, ok := at[k]; ok {
			out[i] = r
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	return out
}
