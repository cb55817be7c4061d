package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// One sweep round deletes every expired start claim and command outcome,
// however many batches that takes, and nothing live: a round that stopped
// after a fixed number of batches would let a start rate above that
// number grow both tables without bound.
func TestASweepRoundDeletesAllThatExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	s, err := New(Config{DB: db, Topology: &broker.Topology{}, SweepBatchSize: 7, PrunePause: time.Millisecond})
	require.NoError(t, err)

	const expired, live = 250, 30
	for q, n := range map[string]int{
		`INSERT INTO start_claims (workflow_name, idempotency_key, execution_id, expires_at)
			SELECT 'w', 'old-' || i, gen_random_uuid(), now() - interval '1 second' FROM generate_series(1, $1) AS i`: expired,
		`INSERT INTO start_claims (workflow_name, idempotency_key, execution_id, expires_at)
			SELECT 'w', 'new-' || i, gen_random_uuid(), now() + interval '1 hour' FROM generate_series(1, $1) AS i`: live,
		`INSERT INTO command_outcomes (command_id, stream_seq, outcome, expires_at)
			SELECT 'old-' || i, i, '{}', now() - interval '1 second' FROM generate_series(1, $1) AS i`: expired,
		`INSERT INTO command_outcomes (command_id, stream_seq, outcome, expires_at)
			SELECT 'new-' || i, i, '{}', now() + interval '1 hour' FROM generate_series(1, $1) AS i`: live,
	} {
		_, err := db.Exec(ctx, q, n)
		require.NoError(t, err)
	}

	require.EqualValues(t, expired, s.sweep(ctx, "claims", store.SweepExpiredClaims))
	require.EqualValues(t, expired, s.sweep(ctx, "outcomes", store.SweepExpiredOutcomes))
	require.Equal(t, live, count(t, db, `SELECT count(*) FROM start_claims`))
	require.Zero(t, count(t, db, `SELECT count(*) FROM start_claims WHERE expires_at <= now()`))
	require.Equal(t, live, count(t, db, `SELECT count(*) FROM command_outcomes`))
	require.Zero(t, count(t, db, `SELECT count(*) FROM command_outcomes WHERE expires_at <= now()`))
}
