package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func outcomeRow(t *testing.T, id string, seq uint64, status string, ttl time.Duration) store.OutcomeRow {
	t.Helper()
	data, err := json.Marshal(wire.Outcome{CommandID: id, StreamSeq: seq, Kind: wire.KindStart, Status: status})
	require.NoError(t, err)
	return store.OutcomeRow{CommandID: id, StreamSeq: seq, Payload: data, ExpiresAt: time.Now().Add(ttl)}
}

func TestOutcomesKeepTheNewestMessagesOutcome(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()

	_, ok, err := store.GetOutcome(ctx, db, "c-1")
	require.NoError(t, err)
	require.False(t, ok, "nothing stored yet")

	// One batch carrying the command twice (a start published again under
	// a new message id) stores the later message's outcome.
	write(t, db, &store.Writes{Shard: 0, AppliedSeq: 2, Outcomes: []store.OutcomeRow{
		outcomeRow(t, "c-1", 1, "first", time.Hour), outcomeRow(t, "c-2", 2, "other", time.Hour), outcomeRow(t, "c-1", 3, "second", time.Hour),
	}})
	out, ok, err := store.GetOutcome(ctx, db, "c-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(3), out.StreamSeq)
	require.Equal(t, "second", out.Status)

	// An older message's outcome, committed late, does not replace it; a
	// newer one does.
	write(t, db, &store.Writes{Shard: 0, AppliedSeq: 3, Outcomes: []store.OutcomeRow{outcomeRow(t, "c-1", 2, "stale", time.Hour)}})
	out, _, err = store.GetOutcome(ctx, db, "c-1")
	require.NoError(t, err)
	require.Equal(t, "second", out.Status)
	write(t, db, &store.Writes{Shard: 0, AppliedSeq: 4, Outcomes: []store.OutcomeRow{outcomeRow(t, "c-1", 9, "newest", time.Hour)}})
	out, _, err = store.GetOutcome(ctx, db, "c-1")
	require.NoError(t, err)
	require.Equal(t, "newest", out.Status)
	require.Equal(t, 2, queryInt(t, db, `SELECT count(*) FROM command_outcomes`))
}

func TestExpiredOutcomesAreIgnoredThenSwept(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	write(t, db, &store.Writes{Shard: 0, AppliedSeq: 3, Outcomes: []store.OutcomeRow{
		outcomeRow(t, "old-1", 1, "x", -time.Second), outcomeRow(t, "old-2", 2, "x", -time.Minute), outcomeRow(t, "live", 3, "x", time.Hour),
	}})
	_, ok, err := store.GetOutcome(ctx, db, "old-1")
	require.NoError(t, err)
	require.False(t, ok, "an expired outcome reads as none")
	_, ok, err = store.GetOutcome(ctx, db, "live")
	require.NoError(t, err)
	require.True(t, ok)

	n, err := store.SweepExpiredOutcomes(ctx, db, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "one batch of one")
	n, err = store.SweepExpiredOutcomes(ctx, db, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	rows, err := db.Query(ctx, `SELECT command_id FROM command_outcomes`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"live"}, left)

	// An expired outcome is replaced by a later message's, live again.
	write(t, db, &store.Writes{Shard: 0, AppliedSeq: 4, Outcomes: []store.OutcomeRow{outcomeRow(t, "live", 4, "y", -time.Second)}})
	write(t, db, &store.Writes{Shard: 0, AppliedSeq: 5, Outcomes: []store.OutcomeRow{outcomeRow(t, "live", 5, "z", time.Hour)}})
	out, ok, err := store.GetOutcome(ctx, db, "live")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "z", out.Status)
}
