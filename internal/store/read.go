package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/harvest-engine/harvest/internal/wire"
)

// DBTX is what both a pool and a transaction offer.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Tx is what the apply's reads and writes use of a transaction: its
// statements and batches. A pgx.Tx is one; so is the scheduler's
// transaction that sends BEGIN and COMMIT with its batches.
type Tx interface {
	DBTX
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// GetExecution reads one execution, or returns ErrExecutionNotFound.
func GetExecution(ctx context.Context, db DBTX, executionID string) (*Execution, error) {
	e, err := scanExecution(db.QueryRow(ctx, `SELECT `+executionColumns+` FROM executions WHERE execution_id = $1`, executionID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get execution %s: %w", executionID, ErrExecutionNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get execution %s: %w", executionID, err)
	}
	return e, nil
}

// GetHistory reads an execution's events in order; ErrExecutionNotFound
// if the execution does not exist.
func GetHistory(ctx context.Context, db DBTX, executionID string) ([]wire.Event, error) {
	rows, err := db.Query(ctx, `
		SELECT h.seq, h.type, h.at, h.attrs
		FROM executions e LEFT JOIN history_events h USING (execution_id)
		WHERE e.execution_id = $1 ORDER BY h.seq`, executionID)
	if err != nil {
		return nil, fmt.Errorf("get history %s: %w", executionID, err)
	}
	found := false
	events := []wire.Event{}
	var seq *int
	var typ *string
	var ev wire.Event
	var at pgtype.Timestamptz
	_, err = pgx.ForEachRow(rows, []any{&seq, &typ, &at, &ev.Attrs}, func() error {
		found = true
		if seq != nil {
			events = append(events, wire.Event{Seq: *seq, Type: *typ, At: at.Time, Attrs: append([]byte(nil), ev.Attrs...)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("get history %s: %w", executionID, err)
	}
	if !found {
		return nil, fmt.Errorf("get history %s: %w", executionID, ErrExecutionNotFound)
	}
	return events, nil
}

// ListFilter narrows ListExecutions; zero fields match everything.
type ListFilter struct {
	WorkflowName string
	Status       string
	Limit        int
}

// ListExecutions returns the newest executions matching f.
func ListExecutions(ctx context.Context, db DBTX, f ListFilter) ([]*Execution, error) {
	rows, err := db.Query(ctx, `SELECT `+executionColumns+` FROM executions
		WHERE ($1 = '' OR workflow_name = $1) AND ($2 = '' OR status = $2)
		ORDER BY created_at DESC, execution_id DESC LIMIT $3`, f.WorkflowName, f.Status, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list executions: %w", err)
	}
	defer rows.Close()
	var out []*Execution
	for rows.Next() {
		e, err := scanExecution(rows)
		if err != nil {
			return nil, fmt.Errorf("list executions: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list executions: %w", err)
	}
	return out, nil
}
