package ingest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/wire"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestAStartWhoseAnnouncementIsLostReadsItsOutcome: the scheduler stored
// the outcome but its announcement never came (it stopped between its
// commit and the publish). The waiting start finds the outcome in
// PostgreSQL within its wait, and only the outcome of its own message.
func TestAStartWhoseAnnouncementIsLostReadsItsOutcome(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	require.NoError(t, store.EnsureShards(ctx, db, 1))
	data, err := json.Marshal(wire.Outcome{CommandID: "c-1", StreamSeq: 7, Kind: wire.KindStart, ExecutionID: "e-1", StartedFresh: true})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		return store.Write(ctx, tx, &store.Writes{Shard: 0, AppliedSeq: 7, Outcomes: []store.OutcomeRow{
			{CommandID: "c-1", StreamSeq: 7, Payload: data, ExpiresAt: time.Now().Add(time.Hour)},
		}})
	}))
	s := &Server{cfg: Config{DB: db}}
	never := make(chan wire.Outcome)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, ok := s.awaitOutcome(wctx, db, "c-1", 7, false, never)
	require.True(t, ok)
	require.Equal(t, "e-1", out.ExecutionID)

	// Another message's outcome does not answer this one.
	wctx, cancel = context.WithTimeout(ctx, 2*lateOutcome)
	defer cancel()
	_, ok = s.awaitOutcome(wctx, db, "c-1", 8, false, never)
	require.False(t, ok)
}
