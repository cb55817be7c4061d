package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// TestStoresDrainWarnsOfLiveKeys: harvest stores drain reads the store it
// names and warns while start keys inside their window point at it; it
// changes nothing.
func TestStoresDrainWarnsOfLiveKeys(t *testing.T) {
	a, b := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	ctx := context.Background()
	db, err := pgxpool.New(ctx, b)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	_, err = store.Migrate(ctx, db)
	require.NoError(t, err)
	cfgFile := filepath.Join(t.TempDir(), "harvest.yaml")
	require.NoError(t, os.WriteFile(cfgFile, fmt.Appendf(nil, "stores:\n  - {name: a, database_url: %q}\n  - {name: b, database_url: %q}\n", a, b), 0o600))
	t.Setenv("HARVEST_DATABASE_URL", "")

	out, errOut, err := runCLI(t, "stores", "drain", "b", "--config", cfgFile)
	require.NoError(t, err)
	require.Empty(t, errOut, "no key, no warning")
	require.Contains(t, out, "store b: 0 running execution(s) and 0 deferred start(s)")
	require.Contains(t, out, "set mode: read_only on store b")

	_, err = db.Exec(ctx, `INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status, created_at, updated_at)
		VALUES (gen_random_uuid(), 1, 'charge', 'w', 'default', 'Running', now(), now())`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO start_claims (workflow_name, idempotency_key, execution_id, expires_at)
		SELECT 'charge', 'k', execution_id, now() + interval '1 hour' FROM executions`)
	require.NoError(t, err)
	out, errOut, err = runCLI(t, "stores", "drain", "b", "--config", cfgFile)
	require.NoError(t, err)
	require.Contains(t, errOut, "warning: 1 start key(s) inside their idempotency window point at store b")
	require.Contains(t, out, "store b: 1 running execution(s)")

	_, _, err = runCLI(t, "stores", "drain", "z", "--config", cfgFile)
	require.ErrorContains(t, err, `no store "z"`)
}
