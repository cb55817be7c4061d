package devstack_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/dev/pglocal"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// startOn starts a stack on stateDir: its embedded NATS, and the private
// PostgreSQL unless cfg names a database.
func startOn(t *testing.T, stateDir string, cfg devstack.Config) (*devstack.Stack, error) {
	t.Helper()
	cfg.StateDir = stateDir
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = stacktest.Logger(t)
	}
	cfg.Ingest = ingest.Config{OutcomeWait: 30 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { stacktest.Stop(t, s) })
	}
	return s, err
}

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	names := []string{}
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestAStateDirKeepsItsPostgresAndExecutions: the private PostgreSQL keeps
// its data in the state dir — under a 0700 directory too, which the
// postgres user cannot search when we are root — and nothing in the temp
// dir; a stack started again on the state dir has the first one's
// executions.
func TestAStateDirKeepsItsPostgresAndExecutions(t *testing.T) {
	tmp, parent := t.TempDir(), t.TempDir()
	require.NoError(t, os.Chmod(parent, 0o700))
	stateDir := filepath.Join(parent, "state")
	t.Setenv("TMPDIR", tmp)

	s, err := startOn(t, stateDir, devstack.Config{})
	require.NoError(t, err)
	started := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/onboarding/start",
		map[string]string{"Idempotency-Key": "kept-1"}, `{"input": {"user_id": 7}}`)
	require.Equal(t, 201, started.Status, started.Body)
	id := started.Body["execution_id"].(string)
	stacktest.WaitCompleted(t, s, id)
	stacktest.Stop(t, s)

	_, err = os.Stat(filepath.Join(stateDir, "postgres", "PG_VERSION"))
	require.NoError(t, err, "PostgreSQL's cluster is in the state dir")
	_, err = os.Stat(filepath.Join(stateDir, "postgres", "postmaster.pid"))
	require.ErrorIs(t, err, os.ErrNotExist, "and stopped with the stack")
	require.Empty(t, entries(t, tmp), "nothing of the stack in the temp dir")
	fi, err := os.Stat(parent)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "no directory's mode changed")

	again, err := startOn(t, stateDir, devstack.Config{})
	require.NoError(t, err)
	exec := stacktest.Call(t, "GET", again.URL()+"/api/harvest/executions/"+id, nil, "")
	require.Equal(t, 200, exec.Status, exec.Body)
	require.Equal(t, "Completed", exec.Body["status"])
	stacktest.Stop(t, again)
	require.Empty(t, entries(t, tmp))
}

// TestAStateDirRunsOneStackAtATime: a second stack on a state dir in use
// fails at once, in Harvest's words, and leaves the first one serving;
// once the first has stopped the state dir is free.
func TestAStateDirRunsOneStackAtATime(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	first, err := startOn(t, stateDir, devstack.Config{DatabaseURL: pgtest.NewDatabase(t)})
	require.NoError(t, err)

	_, err = startOn(t, stateDir, devstack.Config{DatabaseURL: pgtest.NewDatabase(t)})
	require.ErrorIs(t, err, devstack.ErrStateDirInUse)
	require.EqualError(t, err, "state dir "+stateDir+" is in use by another harvest dev (pid "+strconv.Itoa(os.Getpid())+")")
	require.Equal(t, 200, stacktest.Call(t, "GET", first.URL()+"/api/harvest/executions?limit=1", nil, "").Status, "the first stack still serves")

	stacktest.Stop(t, first)
	second, err := startOn(t, stateDir, devstack.Config{DatabaseURL: pgtest.NewDatabase(t)})
	require.NoError(t, err)
	stacktest.Stop(t, second)
}

// TestBusyAddressesFailBeforeAnythingStarts: an HTTP address or an
// embedded NATS port another process holds fails Start at once, naming
// it, before NATS or PostgreSQL has started (no store, no cluster in the
// state dir).
func TestBusyAddressesFailBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	addr := busy.Addr().String()
	port := busy.Addr().(*net.TCPAddr).Port

	for _, tc := range []struct {
		cfg     devstack.Config
		service string
	}{
		{devstack.Config{Addr: addr}, devstack.ServiceAPI},
		{devstack.Config{NATSPort: port}, devstack.ServiceNATS},
	} {
		stateDir := t.TempDir()
		begin := time.Now()
		_, err := startOn(t, stateDir, tc.cfg)
		var listen *devstack.ListenError
		require.ErrorAs(t, err, &listen)
		require.Equal(t, tc.service, listen.Service)
		require.Equal(t, addr, listen.Addr)
		require.ErrorContains(t, err, tc.service+" cannot listen on "+addr+": ")
		require.Less(t, time.Since(begin), 5*time.Second, "at once")
		require.Equal(t, []string{"harvest.lock"}, entries(t, stateDir), "neither NATS nor PostgreSQL started")
		// The state dir is free again.
		s, err := startOn(t, stateDir, devstack.Config{DatabaseURL: pgtest.NewDatabase(t)})
		require.NoError(t, err)
		stacktest.Stop(t, s)
	}
}

// TestAStateDirKeepsItsShardCount: a state dir keeps the shard count its
// streams were created with; another count is a *ShardsError saying so.
func TestAStateDirKeepsItsShardCount(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	db := pgtest.NewDatabase(t)
	s, err := startOn(t, stateDir, devstack.Config{DatabaseURL: db})
	require.NoError(t, err)
	require.Equal(t, devstack.DefaultShards, s.Topology.Shards())
	stacktest.Stop(t, s)

	cfg := devstack.Config{DatabaseURL: db}
	cfg.Streams.Shards = 3
	_, err = startOn(t, stateDir, cfg)
	var shards *devstack.ShardsError
	require.ErrorAs(t, err, &shards)
	require.Equal(t, devstack.ShardsError{StateDir: stateDir, Have: 1, Want: 3}, *shards)
	require.ErrorIs(t, err, broker.ErrShardMismatch)
	require.EqualError(t, err, "state dir "+stateDir+" was created with 1 shard, which it keeps for life; the stack is configured with 3 shards")

	cfg.Streams.Shards = 1
	s, err = startOn(t, stateDir, cfg)
	require.NoError(t, err)
	stacktest.Stop(t, s)
}

// TestPostgresKeptInTheTempDirMovesIntoTheStateDir: the data an older
// harvest dev kept, as root, in os.TempDir()/harvest-dev-<hash> for a state
// dir the postgres user could not reach moves into the state dir, with
// what it held.
func TestPostgresKeptInTheTempDirMovesIntoTheStateDir(t *testing.T) {
	tmp, stateDir := t.TempDir(), filepath.Join(t.TempDir(), "state")
	t.Setenv("TMPDIR", tmp)
	sum := sha256.Sum256([]byte(filepath.Join(stateDir, "postgres")))
	old := filepath.Join(tmp, "harvest-dev-"+hex.EncodeToString(sum[:6]), "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pglocal.Start(ctx, pglocal.Config{DataDir: old})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE DATABASE harvest`)
	require.NoError(t, errors.Join(err, conn.Close(ctx)))
	conn, err = pgx.Connect(ctx, pg.URL("harvest"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE kept_from_before (v int)`)
	require.NoError(t, errors.Join(err, conn.Close(ctx)))
	require.NoError(t, pg.Stop(ctx))

	s, err := startOn(t, stateDir, devstack.Config{})
	require.NoError(t, err)
	var kept bool
	require.NoError(t, s.DB.QueryRow(ctx, `SELECT to_regclass('kept_from_before') IS NOT NULL`).Scan(&kept))
	require.True(t, kept, "the old cluster is the stack's")
	require.Empty(t, entries(t, tmp), "and the temp dir holds nothing of it")
	stacktest.Stop(t, s)
	_, err = os.Stat(filepath.Join(stateDir, "postgres", "PG_VERSION"))
	require.NoError(t, err)
}
