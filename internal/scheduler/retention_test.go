package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/streams"
)

// A retention shorter than the start window is refused, naming both: a
// start key must never outlive the execution it resolves to.
func TestRetentionShorterThanTheStartWindowIsRefused(t *testing.T) {
	db, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none") // never dialled
	require.NoError(t, err)
	t.Cleanup(db.Close)
	base := Config{DB: db, Topology: &streams.Topology{}}

	c := base
	c.Retention = time.Hour
	require.EqualError(t, c.Validate(), "scheduler config: retention 1h0m0s is shorter than start_idempotency_window 24h0m0s: "+
		"a start key would outlive its execution; make retention at least 24h0m0s")

	c = base
	c.StartIdempotencyWindow = 200 * time.Hour
	require.ErrorContains(t, c.Validate(), "retention 168h0m0s is shorter than start_idempotency_window 200h0m0s", "the default retention too")

	c = base
	c.RetentionByWorkflow = map[string]time.Duration{"charge": 2 * time.Hour}
	require.ErrorContains(t, c.Validate(), "workflows.charge.retention 2h0m0s is shorter than start_idempotency_window 24h0m0s")

	c = base
	c.Retention, c.StartIdempotencyWindow = time.Hour, time.Hour
	c.RetentionByWorkflow = map[string]time.Duration{"charge": 3 * time.Hour}
	require.NoError(t, c.Validate())
}
