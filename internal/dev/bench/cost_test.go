package bench_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/bench"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

func TestSQLCounterCountsStatementsAndTransactions(t *testing.T) {
	ctx := context.Background()
	counter := &bench.SQLCounter{}
	cfg, err := store.PoolConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = counter
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`)
	require.NoError(t, err)

	step := func(name string, wantStatements, wantTx, wantRollbacks int64, fn func() error) {
		t.Helper()
		before := counter.Counts()
		require.NoError(t, fn(), name)
		got := counter.Counts().Sub(before)
		require.Equal(t, wantStatements, got.Statements, "%s: statements", name)
		require.Equal(t, wantTx, got.Transactions, "%s: transactions", name)
		require.Equal(t, wantRollbacks, got.Rollbacks, "%s: rollbacks", name)
	}
	batch := func(sqls ...string) *pgx.Batch {
		b := &pgx.Batch{}
		for _, s := range sqls {
			b.Queue(s)
		}
		return b
	}
	step("autocommit statement", 1, 1, 0, func() error {
		_, err := db.Exec(ctx, `INSERT INTO t VALUES (1)`)
		return err
	})
	step("transaction", 2, 1, 0, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO t VALUES (2)`)
			if err == nil {
				_, err = tx.Exec(ctx, `INSERT INTO t VALUES (3)`)
			}
			return err
		})
	})
	step("rolled back", 1, 0, 1, func() error {
		tx, err := db.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (4)`); err != nil {
			return err
		}
		return tx.Rollback(ctx)
	})
	step("batch outside a transaction", 2, 1, 0, func() error {
		return db.SendBatch(ctx, batch(`INSERT INTO t VALUES (5)`, `INSERT INTO t VALUES (6)`)).Close()
	})
	step("transaction carried by two batches", 3, 1, 0, func() error {
		c, err := db.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		if err := c.SendBatch(ctx, batch("begin", `INSERT INTO t VALUES (7)`)).Close(); err != nil {
			return err
		}
		return c.SendBatch(ctx, batch(`INSERT INTO t VALUES (8)`, `INSERT INTO t VALUES (9)`, "commit")).Close()
	})
	step("batch whose statement fails before its COMMIT", 1, 0, 1, func() error {
		c, err := db.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		err = c.SendBatch(ctx, batch("begin", `INSERT INTO t VALUES (1)`, "commit")).Close()
		require.Error(t, err) // duplicate key: the COMMIT is never run
		_, err = c.Exec(ctx, "rollback")
		return err
	})
}
