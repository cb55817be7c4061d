package scheduler

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// pipeDB is a pool with a table t(id int primary key, v int) whose check
// on v runs at COMMIT: v < 0 fails the COMMIT itself.
func pipeDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db := pgtest.NewPool(t)
	_, err := db.Exec(context.Background(), `
		CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL DEFAULT 0);
		CREATE TABLE nonneg (id int PRIMARY KEY);
		INSERT INTO nonneg VALUES (0);
		ALTER TABLE t ADD CONSTRAINT v_ok FOREIGN KEY (v) REFERENCES nonneg (id) DEFERRABLE INITIALLY DEFERRED`)
	require.NoError(t, err)
	return db
}

func rowsIn(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM t`).Scan(&n))
	return n
}

func TestPipeTxCommitsWithItsLastBatch(t *testing.T) {
	ctx := context.Background()
	db := pipeDB(t)
	var sent []string
	err := inPipeTx(ctx, db, func(tx *pipeTx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO t (id) VALUES (1)`)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		for _, q := range b.QueuedQueries {
			sent = append(sent, q.SQL)
		}
		require.Equal(t, byte('T'), tx.conn.PgConn().TxStatus(), "the first batch began a transaction")
		require.Zero(t, rowsIn(t, db), "nothing is visible before the commit")

		tx.commitWithNext()
		b = &pgx.Batch{}
		b.Queue(`INSERT INTO t (id) VALUES (2)`)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		for _, q := range b.QueuedQueries {
			sent = append(sent, q.SQL)
		}
		// Committed by the batch itself, before inPipeTx returns.
		require.Equal(t, byte('I'), tx.conn.PgConn().TxStatus())
		require.Equal(t, 2, rowsIn(t, db))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"begin", `INSERT INTO t (id) VALUES (1)`, `INSERT INTO t (id) VALUES (2)`, "commit"}, sent)
	require.Equal(t, 2, rowsIn(t, db))
}

func TestPipeTxStatementBeforeABatchBeginsFirst(t *testing.T) {
	ctx := context.Background()
	db := pipeDB(t)
	err := inPipeTx(ctx, db, func(tx *pipeTx) error {
		var first, second int64
		if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&first); err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO t (id) VALUES (1)`)
		b.Queue(`SELECT txid_current()`).QueryRow(func(r pgx.Row) error { return r.Scan(&second) })
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		require.Len(t, b.QueuedQueries, 2, "no second BEGIN")
		require.Equal(t, first, second, "one transaction")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, rowsIn(t, db), "committed after fn, with no batch to carry the COMMIT")
}

func TestPipeTxRollsBack(t *testing.T) {
	ctx := context.Background()
	fail := errors.New("fn failed")
	for _, tc := range []struct {
		name string
		fn   func(tx *pipeTx) error
		want error
	}{
		{"fn fails before sending anything", func(*pipeTx) error { return fail }, fail},
		{"fn fails after a batch", func(tx *pipeTx) error {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO t (id) VALUES (1)`)
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			return fail
		}, fail},
		{"a statement of the committing batch fails", func(tx *pipeTx) error {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO t (id) VALUES (1)`)
			b.Queue(`INSERT INTO t (id) VALUES (1)`) // duplicate key
			tx.commitWithNext()
			return tx.SendBatch(ctx, b).Close()
		}, nil},
		{"the COMMIT itself fails", func(tx *pipeTx) error {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO t (id, v) VALUES (1, -1)`) // checked at COMMIT
			tx.commitWithNext()
			return tx.SendBatch(ctx, b).Close()
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := pipeDB(t)
			err := inPipeTx(ctx, db, tc.fn)
			require.Error(t, err)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			} else {
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr)
			}
			require.Zero(t, rowsIn(t, db))
			// The pool's connections are usable: none was returned inside
			// a transaction.
			for range db.Stat().TotalConns() + 1 {
				_, err := db.Exec(ctx, `INSERT INTO t (id) VALUES (7)`)
				require.NoError(t, err)
				_, err = db.Exec(ctx, `DELETE FROM t`)
				require.NoError(t, err)
			}
		})
	}
}

func TestPipeTxAfterItsCommit(t *testing.T) {
	ctx := context.Background()
	db := pipeDB(t)
	err := inPipeTx(ctx, db, func(tx *pipeTx) error {
		tx.commitWithNext()
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO t (id) VALUES (1)`)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO t (id) VALUES (2)`)
		require.ErrorIs(t, err, errPipeTxDone)
		require.ErrorIs(t, tx.SendBatch(ctx, &pgx.Batch{}).Close(), errPipeTxDone)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, rowsIn(t, db))
}

// TestPipeTxCountsItsStatements: a transaction counts the statements it
// sends, in batches or alone, BEGIN and COMMIT not counted; one that sent
// nothing reports -1.
func TestPipeTxCountsItsStatements(t *testing.T) {
	ctx := context.Background()
	db := pipeDB(t)
	n, err := runPipeTx(ctx, db, func(tx *pipeTx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO t (id) VALUES (1)`); err != nil {
			return err
		}
		tx.commitWithNext()
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO t (id) VALUES (2)`)
		b.Queue(`INSERT INTO t (id) VALUES (3)`)
		return tx.SendBatch(ctx, b).Close()
	})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, 3, rowsIn(t, db))
	n, err = runPipeTx(ctx, db, func(*pipeTx) error { return nil })
	require.NoError(t, err)
	require.Equal(t, -1, n)
}
