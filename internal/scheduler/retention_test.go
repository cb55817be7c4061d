package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
)

// A retention shorter than the start window is refused, naming both: a
// start key must never outlive the execution it resolves to.
func TestRetentionShorterThanTheStartWindowIsRefused(t *testing.T) {
	db, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none") // never dialled
	require.NoError(t, err)
	t.Cleanup(db.Close)
	base := Config{DB: db, Topology: &broker.Topology{}}

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

// While a backlog lasts the pruner rests PruneRest times as long as its
// last round took, so that a PostgreSQL the applies keep busy (slower
// rounds) gets longer rests; but never so long that it prunes slower than
// executions come due; never less than PrunePause, and PruneInterval once
// it has caught up.
func TestThePrunerRestsInProportionToItsRounds(t *testing.T) {
	db, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none") // never dialled
	require.NoError(t, err)
	t.Cleanup(db.Close)
	s, err := New(Config{DB: db, Topology: &broker.Topology{}})
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, s.pruneWait(true, time.Second, 100, 0), "works a quarter of the time by default")
	require.Equal(t, 300*time.Millisecond, s.pruneWait(true, 100*time.Millisecond, 100, 0))
	require.Equal(t, DefaultPrunePause, s.pruneWait(true, time.Millisecond, 100, 0), "at least the pause")
	require.Equal(t, DefaultPruneInterval, s.pruneWait(false, time.Second, 0, 0), "caught up")

	// But never slower than 1.25 times the rate executions come due: 100
	// pruned while 400 a second come due allow 200 ms for round and rest.
	require.Equal(t, 100*time.Millisecond, s.pruneWait(true, 100*time.Millisecond, 100, 400))
	require.Equal(t, 300*time.Millisecond, s.pruneWait(true, 100*time.Millisecond, 100, 100), "a slow due rate: the rest")
	require.Equal(t, DefaultPrunePause, s.pruneWait(true, 300*time.Millisecond, 100, 400), "behind: only the pause")

	s, err = New(Config{DB: db, Topology: &broker.Topology{}, PruneRest: 0.5, PrunePause: time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, 50*time.Millisecond, s.pruneWait(true, 100*time.Millisecond, 100, 0))

	require.ErrorContains(t, Config{DB: db, Topology: &broker.Topology{}, PruneRest: -1}.Validate(), "PruneRest -1")
}
