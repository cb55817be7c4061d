package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
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
