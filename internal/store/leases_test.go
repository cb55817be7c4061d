package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

func TestBindShardStreamResetsOnlyForAnotherStream(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	leases, err := store.AcquireLeases(ctx, db, "a", time.Minute, 1)
	require.NoError(t, err)
	l := leases[0]
	streamAt := func(created time.Time, last uint64) func(context.Context) (time.Time, uint64, error) {
		return func(context.Context) (time.Time, uint64, error) { return created, last, nil }
	}
	applied := func() int { return queryInt(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = 0`) }
	one, two := at(0), at(time.Hour)

	// A shard that applied before the stream was recorded (migration 011)
	// keeps its sequence when the stream has got that far.
	write(t, db, &store.Writes{Shard: 0, AppliedSeq: 40})
	b, err := store.BindShardStream(ctx, db, "a", l, streamAt(one, 40))
	require.NoError(t, err)
	require.False(t, b.Reset)
	require.Equal(t, 40, applied())

	// The same stream, restarted and grown: nothing moves.
	b, err = store.BindShardStream(ctx, db, "a", l, streamAt(one, 90))
	require.NoError(t, err)
	require.False(t, b.Reset)
	require.EqualValues(t, 40, b.AppliedSeq)
	require.Equal(t, 40, applied())

	// Another stream, even one already further along: start it from 0.
	b, err = store.BindShardStream(ctx, db, "a", l, streamAt(two, 500))
	require.NoError(t, err)
	require.True(t, b.Reset)
	require.True(t, b.Previous.Equal(one), b.Previous)
	require.Equal(t, 0, applied())

	// Before the record: a stream that has not got as far as the shard
	// applied cannot be the one it applied from.
	write(t, db, &store.Writes{Shard: 0, AppliedSeq: 12})
	_, err = db.Exec(ctx, `UPDATE shard_offsets SET stream_created = NULL`)
	require.NoError(t, err)
	b, err = store.BindShardStream(ctx, db, "a", l, streamAt(two, 3))
	require.NoError(t, err)
	require.True(t, b.Reset)
	require.Equal(t, 0, applied())

	// Fenced like an apply.
	_, err = store.BindShardStream(ctx, db, "b", l, streamAt(two, 3))
	require.ErrorIs(t, err, store.ErrLeaseLost)
}

// TestAFailureMarkCountsOnlyWhileItsLeaseHolderRefreshesIt: a mark
// counts while it names the shard's current lease and has been refreshed
// within MarkStaleAfter; one of another lease, or stale, does not; only
// the lease holder writes or clears one; any apply clears it; and a shard
// no scheduler has held for longer than the bound counts, unowned.
func TestAFailureMarkCountsOnlyWhileItsLeaseHolderRefreshesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	require.NoError(t, store.EnsureShards(ctx, db, 2))
	leases, err := store.AcquireLeases(ctx, db, "a", time.Minute, 2)
	require.NoError(t, err)
	l := leases[0]
	failing := func() []store.ShardFailure {
		t.Helper()
		f, err := store.FailingShards(ctx, db, 0)
		require.NoError(t, err)
		return f
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}

	require.Empty(t, failing())
	require.NoError(t, store.RecordShardFailure(ctx, db, "b", l, "not b's"))
	require.Empty(t, failing(), "a scheduler that does not hold the lease writes no mark")
	require.NoError(t, store.RecordShardFailure(ctx, db, "a", l, "boom"))
	got := failing()
	require.Len(t, got, 1)
	require.Equal(t, store.ShardFailure{Shard: l.Shard, FailingSince: got[0].FailingSince, LastError: "boom", Cause: store.FailingCause}, got[0])
	since := got[0].FailingSince
	f, err := store.FailingShards(ctx, db, time.Hour)
	require.NoError(t, err)
	require.Empty(t, f, "failing for less than asked")

	// A refresh keeps the time it began; a stale mark begins anew.
	require.NoError(t, store.RecordShardFailure(ctx, db, "a", l, "boom again"))
	require.Equal(t, since, failing()[0].FailingSince)
	exec(`UPDATE shard_offsets SET failing_refreshed_at = now() - $1::interval WHERE shard = $2`, store.MarkStaleAfter+time.Second, l.Shard)
	require.Empty(t, failing(), "a mark its runner stopped refreshing does not count")
	require.NoError(t, store.RecordShardFailure(ctx, db, "a", l, "boom"))
	require.True(t, failing()[0].FailingSince.After(since), "a stale mark refreshed fails since now")

	// The lease moves: the mark names the old one.
	exec(`UPDATE shard_leases SET owner = 'b', epoch = epoch + 1 WHERE shard = $1`, l.Shard)
	require.Empty(t, failing(), "a mark of another lease does not count")
	require.NoError(t, store.ClearShardFailure(ctx, db, "a", l))
	require.Equal(t, 1, queryInt(t, db, `SELECT count(*) FROM shard_offsets WHERE failing_since IS NOT NULL`), "only the lease holder clears")
	b := store.Lease{Shard: l.Shard, Epoch: l.Epoch + 1}
	require.NoError(t, store.RecordShardFailure(ctx, db, "b", b, "b's"))
	require.Len(t, failing(), 1)
	require.NoError(t, store.ClearShardFailure(ctx, db, "b", b))
	require.Empty(t, failing())
	require.Zero(t, queryInt(t, db, `SELECT count(*) FROM shard_offsets WHERE failing_since IS NOT NULL OR last_error IS NOT NULL OR failing_owner IS NOT NULL`))

	// An apply clears any mark, whoever wrote it.
	require.NoError(t, store.RecordShardFailure(ctx, db, "b", b, "b's"))
	write(t, db, &store.Writes{Shard: l.Shard, AppliedSeq: 7})
	require.Empty(t, failing())
	require.Zero(t, queryInt(t, db, `SELECT count(*) FROM shard_offsets WHERE failing_since IS NOT NULL OR failing_refreshed_at IS NOT NULL`))

	// Unowned: from when the lease ended, released or expired.
	require.NoError(t, store.Leave(ctx, db, "b"))
	exec(`UPDATE shard_leases SET expires_at = now() - interval '1 minute' WHERE shard <> $1`, l.Shard)
	got = failing()
	require.Len(t, got, 2)
	for _, g := range got {
		require.Equal(t, store.UnownedCause, g.Cause)
	}
	f, err = store.FailingShards(ctx, db, 30*time.Second)
	require.NoError(t, err)
	require.Len(t, f, 1, "the released lease ended just now; the expired one a minute ago")
	require.NotEqual(t, l.Shard, f[0].Shard)
}
