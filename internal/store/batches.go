package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/internal/wire"
)

// Batch is one part of a batch operation (docs/batches.md): the batches
// row of its shard.
type Batch struct {
	BatchID string
	Shard   int
	Spec    wire.BatchSpec
	// State is BatchRunning, BatchCompleted or BatchCancelled.
	State string
	// Cursor is the last execution the part sent its operation to, nil
	// before the first; Exhausted says no matching execution is left.
	Cursor    *ListCursor
	Exhausted bool
	// Matched counts the executions sent to, Done and Failed those
	// reported applied and refused.
	Matched, Done, Failed int64
	NextDue               *time.Time
	CreatedAt, UpdatedAt  time.Time
	FinishedAt            *time.Time
}

// Batch states.
const (
	BatchRunning   = "running"
	BatchCompleted = "completed"
	BatchCancelled = "cancelled"
)

// BatchItem is how a batch's operation went on one execution.
type BatchItem struct {
	BatchID, ExecutionID string
	// Error and Message say why it was refused; empty when applied.
	Error, Message string
	At             time.Time
}

// BatchWrites are what an apply changed of batches: parts created
// (their rows inserted unless they exist), cancelled, stepped (their
// cursors and counts, as the step left them) and the executions'
// reports.
type BatchWrites struct {
	New       []*Batch
	Cancelled []string
	Stepped   []*Batch
	Reports   []BatchItem
}

const batchColumns = `batch_id::text, shard, spec, state, cursor_at, cursor_id::text, exhausted, matched, done, failed, next_due,
	created_at, updated_at, finished_at`

func scanBatch(row pgx.Row) (*Batch, error) {
	var b Batch
	var at *time.Time
	var id *string
	if err := row.Scan(&b.BatchID, &b.Shard, &b.Spec, &b.State, &at, &id, &b.Exhausted, &b.Matched, &b.Done, &b.Failed, &b.NextDue,
		&b.CreatedAt, &b.UpdatedAt, &b.FinishedAt); err != nil {
		return nil, err
	}
	if at != nil && id != nil {
		b.Cursor = &ListCursor{CreatedAt: *at, ExecutionID: *id}
	}
	return &b, nil
}

func queueBatchWrites(b *pgx.Batch, shard int, w *BatchWrites) {
	for _, bt := range w.New {
		b.Queue(`INSERT INTO batches (batch_id, shard, spec, state, next_due, created_at, updated_at)
			VALUES ($1, $2, $3, 'running', $4, $5, $5) ON CONFLICT (batch_id, shard) DO NOTHING`,
			bt.BatchID, bt.Shard, bt.Spec, bt.NextDue, bt.CreatedAt)
	}
	if len(w.Cancelled) > 0 {
		b.Queue(`UPDATE batches SET state = 'cancelled', next_due = NULL, updated_at = now(), finished_at = now()
			WHERE shard = $1 AND batch_id = ANY($2::uuid[]) AND state = 'running'`, shard, w.Cancelled)
	}
	for _, bt := range w.Stepped {
		var at *time.Time
		var id *string
		if bt.Cursor != nil {
			at, id = &bt.Cursor.CreatedAt, &bt.Cursor.ExecutionID
		}
		b.Queue(`UPDATE batches SET cursor_at = $3, cursor_id = $4, exhausted = $5, matched = $6, next_due = $7, updated_at = now(),
				state = CASE WHEN $5 AND done + failed >= $6 THEN 'completed' ELSE state END,
				finished_at = CASE WHEN $5 AND done + failed >= $6 THEN now() ELSE finished_at END
			WHERE batch_id = $1 AND shard = $2 AND state = 'running'`,
			bt.BatchID, bt.Shard, at, id, bt.Exhausted, bt.Matched, bt.NextDue)
	}
	if len(w.Reports) > 0 {
		n := len(w.Reports)
		ids, execs, codes, msgs := make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
		for i, r := range w.Reports {
			ids[i], execs[i] = r.BatchID, r.ExecutionID
			if r.Error != "" {
				codes[i], msgs[i] = &w.Reports[i].Error, &w.Reports[i].Message
			}
		}
		// A report repeated inserts no item, and so counts nothing; the
		// part completes with its last report once every execution it
		// matched has reported.
		b.Queue(`WITH ins AS (
				INSERT INTO batch_items (batch_id, execution_id, error, message, at)
				SELECT unnest($1::uuid[]), unnest($2::uuid[]), unnest($3::text[]), unnest($4::text[]), now()
				ON CONFLICT (batch_id, execution_id) DO NOTHING
				RETURNING batch_id, error
			), counts AS (
				SELECT batch_id, count(*) FILTER (WHERE error IS NULL) AS ok, count(*) FILTER (WHERE error IS NOT NULL) AS bad
				FROM ins GROUP BY batch_id
			)
			UPDATE batches AS b SET done = b.done + c.ok, failed = b.failed + c.bad, updated_at = now(),
				state = CASE WHEN b.state = 'running' AND b.exhausted AND b.done + c.ok + b.failed + c.bad >= b.matched THEN 'completed' ELSE b.state END,
				finished_at = CASE WHEN b.state = 'running' AND b.exhausted AND b.done + c.ok + b.failed + c.bad >= b.matched THEN now() ELSE b.finished_at END
			FROM counts AS c WHERE b.batch_id = c.batch_id AND b.shard = $5`,
			ids, execs, codes, msgs, shard)
	}
}

// DueBatches locks, for an apply, the running parts of shard whose next
// step is due at now, at most limit.
func DueBatches(ctx context.Context, tx Tx, shard int, now time.Time, limit int) ([]*Batch, error) {
	return queryBatches(ctx, tx, "read due batches", `SELECT `+batchColumns+` FROM batches WHERE shard = $1 AND state = 'running' AND next_due <= $2
		ORDER BY next_due LIMIT $3 FOR UPDATE SKIP LOCKED`, shard, now, limit)
}

// BatchPage is the next page of at most limit executions of b's store
// that b matches, after its cursor, newest first.
func BatchPage(ctx context.Context, tx Tx, b *Batch, limit int) ([]*Execution, error) {
	f := b.Spec.Filter
	before := b.Spec.Before
	if f.CreatedBefore != nil && f.CreatedBefore.Before(before) {
		before = *f.CreatedBefore
	}
	return ListExecutions(ctx, tx, ListFilter{WorkflowName: f.Workflow, Status: f.Status, KeyPrefix: f.KeyPrefix,
		WorkflowIDPrefix: f.WorkflowIDPrefix, CreatedAfter: f.CreatedAfter, CreatedBefore: &before, After: b.Cursor, Limit: limit,
		Search: f.Search})
}

// ErrBatchNotFound says no store holds a part of the batch.
var ErrBatchNotFound = errors.New("batch not found")

// GetBatch reads the parts of batch id that db holds, ErrBatchNotFound
// for none.
func GetBatch(ctx context.Context, db DBTX, id string) ([]*Batch, error) {
	out, err := queryBatches(ctx, db, "read batch "+id, `SELECT `+batchColumns+` FROM batches WHERE batch_id = $1 ORDER BY shard`, id)
	if err == nil && len(out) == 0 {
		err = ErrBatchNotFound
	}
	return out, err
}

// queryBatches runs sql, which selects batchColumns, and returns the
// parts it reads; what names the read in its errors.
func queryBatches(ctx context.Context, db DBTX, what, sql string, args ...any) ([]*Batch, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []*Batch
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// ListBatches reads the parts of the newest batches db holds, at most
// limit rows, created before before (nil: now).
func ListBatches(ctx context.Context, db DBTX, before *time.Time, limit int) ([]*Batch, error) {
	return queryBatches(ctx, db, "list batches", `SELECT `+batchColumns+` FROM batches WHERE $1::timestamptz IS NULL OR created_at < $1
		ORDER BY created_at DESC, batch_id LIMIT $2`, before, limit)
}

// BatchErrors reads the executions batch id's operation was refused on,
// at most limit.
func BatchErrors(ctx context.Context, db DBTX, id string, limit int) ([]BatchItem, error) {
	rows, err := db.Query(ctx, `SELECT execution_id::text, error, coalesce(message, ''), at FROM batch_items
		WHERE batch_id = $1 AND error IS NOT NULL ORDER BY at, execution_id LIMIT $2`, id, limit)
	if err != nil {
		return nil, fmt.Errorf("read batch %s errors: %w", id, err)
	}
	defer rows.Close()
	var out []BatchItem
	for rows.Next() {
		it := BatchItem{BatchID: id}
		if err := rows.Scan(&it.ExecutionID, &it.Error, &it.Message, &it.At); err != nil {
			return nil, fmt.Errorf("read batch %s errors: %w", id, err)
		}
		out = append(out, it)
	}
	return out, rows.Err()
}
