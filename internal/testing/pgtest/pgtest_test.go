package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/pglocal"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// insertExecution adds a row to executions with the given workflow_id.
func insertExecution(t *testing.T, db *pgxpool.Pool, workflowID string) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
		INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status)
		VALUES ('00000000-0000-0000-0000-000000000001', 0, 'wf', $1, 'q', 'Running')`, workflowID)
	require.NoError(t, err)
}

func workflowIDs(t *testing.T, db *pgxpool.Pool) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT workflow_id FROM executions ORDER BY workflow_id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// TestIsolation runs two parallel tests, each with its own migrated
// database, that insert the same primary key while both are alive.
func TestIsolation(t *testing.T) {
	var inserted sync.WaitGroup
	inserted.Add(2)
	bothInserted := make(chan struct{})
	go func() { inserted.Wait(); close(bothInserted) }()

	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewPool(t)
			var migrated int
			require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM schema_migrations`).Scan(&migrated))
			assert.Positive(t, migrated)

			insertExecution(t, db, name)
			inserted.Done()
			// Overlap with the other test, unless -parallel 1 serialises us.
			select {
			case <-bothInserted:
			case <-time.After(10 * time.Second):
				t.Log("other test did not run concurrently")
			}
			assert.Equal(t, []string{name}, workflowIDs(t, db))
		})
	}
}

// TestManyParallel creates databases from many parallel tests at once.
func TestManyParallel(t *testing.T) {
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			begin := time.Now()
			db := pgtest.NewPool(t)
			t.Logf("NewPool took %v", time.Since(begin))
			assert.Empty(t, workflowIDs(t, db))
			insertExecution(t, db, fmt.Sprint(i))
		})
	}
}

func TestURL(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var dbname string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_database()`).Scan(&dbname))
	assert.Regexp(t, `^harvest_test_[0-9a-f]{16}$`, dbname)
	assert.Equal(t, pgtest.URL(t, dbname), dsn)

	var exists bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass('executions') IS NOT NULL`).Scan(&exists))
	assert.True(t, exists)

	other, err := pgx.Connect(ctx, pgtest.URL(t, "postgres"))
	require.NoError(t, err)
	defer other.Close(ctx)
	require.NoError(t, other.QueryRow(ctx, `SELECT current_database()`).Scan(&dbname))
	assert.Equal(t, "postgres", dbname)
}

// TestFailsWithoutPostgres re-runs TestURL in a child process that cannot
// find PostgreSQL: it must fail, naming what to install, not skip.
func TestFailsWithoutPostgres(t *testing.T) {
	if os.Getenv(pgtest.EnvDatabaseURL) != "" {
		t.Skip("uses an external server")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestURL$", "-test.v")
	cmd.Env = []string{pglocal.EnvBinDir + "=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "child should fail:\n%s", out)
	assert.Contains(t, string(out), pglocal.ErrNotInstalled.Error())
	assert.Contains(t, string(out), "--- FAIL: TestURL")
	assert.False(t, strings.Contains(string(out), "--- SKIP"), "%s", out)
}

// TestExternalServer re-runs tests in a child process pointed at this
// process's server through HARVEST_TEST_DATABASE_URL, and checks the child
// cleaned up its databases there.
func TestExternalServer(t *testing.T) {
	if os.Getenv(pgtest.EnvDatabaseURL) != "" {
		t.Skip("already using an external server")
	}
	admin := pgtest.URL(t, "postgres")
	cmd := exec.Command(os.Args[0], "-test.run=^(TestIsolation|TestURL)$", "-test.v")
	cmd.Env = append(os.Environ(), pgtest.EnvDatabaseURL+"="+admin)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: TestIsolation")

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// This test made no databases of its own, and runs alone.
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1 OR datname LIKE 'harvest\_test\_%'`,
		fmt.Sprintf("harvest\\_template\\_%d\\_%%", cmd.Process.Pid))
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Empty(t, left, "child's databases should be dropped")
}

// TestLeavesNothingBehind re-runs TestURL in a child process whose temp
// dir is empty: once it has passed, the temp dir holds nothing, the
// private server's data included. A directory a killed process left (its
// lock file held by no one) is removed by the child; one without a lock
// file, which may be an older pgtest's at work, is left alone.
func TestLeavesNothingBehind(t *testing.T) {
	if os.Getenv(pgtest.EnvDatabaseURL) != "" {
		t.Skip("uses an external server")
	}
	tmp := t.TempDir()
	stale := filepath.Join(tmp, "harvest-pgtest-killed")
	require.NoError(t, os.MkdirAll(filepath.Join(stale, "data"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(stale, "lock"), []byte("1\n"), 0o644))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(stale, "lock"), old, old))
	unlocked := filepath.Join(tmp, "harvest-pgtest-older")
	require.NoError(t, os.MkdirAll(filepath.Join(unlocked, "data"), 0o700))

	cmd := exec.Command(os.Args[0], "-test.run=^TestURL$", "-test.v")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TMPDIR=") && !strings.HasPrefix(kv, pgtest.EnvDatabaseURL+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child:\n%s", out)
	require.Contains(t, string(out), "--- PASS: TestURL")

	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{"harvest-pgtest-older"}, names, "the child's own directory and the stale one are gone")
}
