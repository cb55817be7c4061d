package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/internal/store"
)

// pipeTx is a transaction whose BEGIN rides with its first batch and whose
// COMMIT rides with the batch sent after commitWithNext: an apply
// transaction is then two round trips to PostgreSQL (its reads, its
// writes) instead of four. On two busy cores a round trip costs a batch
// about 0.6 ms of waiting for PostgreSQL's backend to be scheduled, and
// the shard applies nothing else meanwhile.
//
// It is a store.Tx for apply, fireTimers and store.Write. A statement sent
// outside a batch before the first one (fireDueTimers' shard lock) sends
// its BEGIN first, alone.
type pipeTx struct {
	conn *pgx.Conn
	// begun: BEGIN was sent; committing: the next batch ends with COMMIT;
	// done: COMMIT or ROLLBACK was sent.
	begun, committing, done bool
	// statements counts the statements sent, BEGIN, COMMIT and ROLLBACK
	// not counted (for the metrics).
	statements int
}

var errPipeTxDone = errors.New("transaction already committed or rolled back")

// begin sends BEGIN alone, for a statement sent outside a batch first.
func (t *pipeTx) begin(ctx context.Context) error {
	if t.done {
		return errPipeTxDone
	}
	if t.begun {
		return nil
	}
	t.begun = true
	if _, err := t.conn.Exec(ctx, "begin"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return nil
}

// commitWithNext makes the next batch commit the transaction.
func (t *pipeTx) commitWithNext() { t.committing = true }

func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.done {
		return pgx.FailedBatchResults(b, errPipeTxDone)
	}
	t.statements += len(b.QueuedQueries)
	if !t.begun {
		t.begun = true
		b.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: "begin"}}, b.QueuedQueries...)
	}
	if t.committing {
		t.committing, t.done = false, true
		b.Queue("commit")
	}
	return t.conn.SendBatch(ctx, b)
}

// commit commits, unless a batch already did.
func (t *pipeTx) commit(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	if !t.begun {
		return nil
	}
	_, err := t.conn.Exec(ctx, "commit")
	return err
}

// rollback rolls back what is open. After a failed batch the transaction
// may be open (aborted), or ended by a COMMIT that failed: PostgreSQL
// answers the second case with a warning only.
func (t *pipeTx) rollback(ctx context.Context) error {
	if !t.begun || (t.done && t.conn.PgConn().TxStatus() == 'I') {
		t.done = true
		return nil
	}
	t.done = true
	_, err := t.conn.Exec(ctx, "rollback")
	return err
}

func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	t.statements++
	return t.conn.Exec(ctx, sql, args...)
}

func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	t.statements++
	return t.conn.Query(ctx, sql, args...)
}

func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.begin(ctx); err != nil {
		return errRow{err}
	}
	t.statements++
	return t.conn.QueryRow(ctx, sql, args...)
}

var _ store.Tx = (*pipeTx)(nil)

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// inPipeTx runs fn in a pipeTx on a connection of db. fn calls
// commitWithNext before its last batch to commit with it; a transaction fn
// leaves open is committed after it. An error from fn rolls back.
func inPipeTx(ctx context.Context, db *pgxpool.Pool, fn func(*pipeTx) error) error {
	_, err := runPipeTx(ctx, db, fn)
	return err
}

// inTx is inPipeTx, counted in the scheduler's metrics under purpose:
// the transaction, whether it committed, and its statements.
func (s *Scheduler) inTx(ctx context.Context, purpose string, fn func(*pipeTx) error) error {
	statements, err := runPipeTx(ctx, s.cfg.DB, fn)
	if statements >= 0 {
		s.metrics.transaction(purpose, statements, err == nil)
	}
	return err
}

// runPipeTx is inPipeTx; it also returns the statements the transaction
// sent, -1 when it sent nothing (no connection, or fn sent nothing: a
// batch all applied before).
func runPipeTx(ctx context.Context, db *pgxpool.Pool, fn func(*pipeTx) error) (int, error) {
	c, err := db.Acquire(ctx)
	if err != nil {
		return -1, fmt.Errorf("acquire connection: %w", err)
	}
	// A connection released inside a transaction is closed by the pool,
	// not reused.
	defer c.Release()
	t := &pipeTx{conn: c.Conn()}
	sent := func() int {
		if !t.begun {
			return -1
		}
		return t.statements
	}
	if err := fn(t); err != nil {
		if rerr := t.rollback(context.WithoutCancel(ctx)); rerr != nil {
			return sent(), errors.Join(err, fmt.Errorf("rollback: %w", rerr))
		}
		return sent(), err
	}
	if err := t.commit(ctx); err != nil {
		return sent(), fmt.Errorf("commit: %w", err)
	}
	return sent(), nil
}
