package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
)

// TestAPrunedExecutionTakesItsQueryStates: the pruner deletes the query
// states of the executions it prunes, and only theirs; a read of a
// pruned execution's states finds no execution.
func TestAPrunedExecutionTakesItsQueryStates(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	now := time.Now()
	past, future := now.Add(-time.Minute), now.Add(time.Hour)
	gone := insertClosed(t, db, "tally", now, &past)
	keep := insertClosed(t, db, "tally", now, &future)
	for _, id := range []string{gone, keep} {
		_, err := db.Exec(ctx, `INSERT INTO execution_states (execution_id, name, value, seq, updated_at)
			VALUES ($1, 'progress', '{"count": 2}', 4, now()), ($1, 'phase', '"done"', 6, now())`, id)
		require.NoError(t, err)
	}
	leases, err := store.AcquireLeases(ctx, db, "owner-a", time.Minute, 1)
	require.NoError(t, err)
	res, err := store.PruneShard(ctx, db, "owner-a", leases[0], now, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Executions)
	require.EqualValues(t, 2, res.Rows["execution_states"])
	_, err = store.GetStates(ctx, db, gone, "")
	require.ErrorIs(t, err, store.ErrExecutionNotFound)
	st, err := store.GetStates(ctx, db, keep, "")
	require.NoError(t, err)
	require.Equal(t, "Completed", st.Status)
	require.Len(t, st.States, 2)
	require.Equal(t, []string{"phase", "progress"}, []string{st.States[0].Name, st.States[1].Name})
	require.JSONEq(t, `{"count": 2}`, string(st.States[1].Value))
	require.Equal(t, 4, st.States[1].Seq)
}
