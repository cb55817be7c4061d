package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// queryRows runs sql and collects its rows with to: db.Query, then
// pgx.CollectRows, the errors of either returned as they are for the
// caller to wrap once.
func queryRows[T any](ctx context.Context, db DBTX, to pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, to)
}
