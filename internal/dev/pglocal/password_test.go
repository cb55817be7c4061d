package pglocal

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// connectAs connects to s's postgres database as another local user
// would: to its port, as its superuser, with password (none when empty).
func connectAs(s *Server, password string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := url.Parse(s.URL("postgres"))
	if err != nil {
		return err
	}
	u.User = url.User(s.user)
	if password != "" {
		u.User = url.UserPassword(s.user, password)
	}
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// requireRefused checks that err is PostgreSQL refusing the password.
func requireRefused(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "28P01", pgErr.Code, "invalid_password: %v", err)
}

// TestAPasswordIsRequiredOfEveryConnection: with Config.Password, a new
// cluster refuses a connection without it or with another, from the
// first moment it listens; a cluster made without one (every local user
// its superuser) is brought to it at the next start, and to a new one at
// the start after; pg_hba.conf trusts nothing, and neither the log nor
// the errors show the password.
func TestAPasswordIsRequiredOfEveryConnection(t *testing.T) {
	t.Parallel()
	var log lockedBuffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const first, second = "first-s3cret-'quoted'", "second-s3cret"

	// A new cluster.
	s := start(t, Config{DataDir: dataDir(t), Password: first, Logger: logger})
	require.Equal(t, "postgres://harvest:first-s3cret-%27quoted%27@127.0.0.1:"+itoa(s.Port())+"/postgres?sslmode=disable", s.URL("postgres"))
	requireRefused(t, connectAs(s, ""))
	requireRefused(t, connectAs(s, "guess"))
	require.NoError(t, connectAs(s, first))
	stop(t, s)

	// A cluster from before, which trusts everyone.
	dir := dataDir(t)
	s = start(t, Config{DataDir: dir, Logger: logger})
	require.NoError(t, connectAs(s, ""), "without a password, the old behaviour: trust")
	stop(t, s)
	s = start(t, Config{DataDir: dir, Password: first, Logger: logger})
	requireRefused(t, connectAs(s, ""))
	require.NoError(t, connectAs(s, first))
	conn := connect(t, s)
	var rules []string
	rows, err := conn.Query(context.Background(), `SELECT type || ' ' || auth_method FROM pg_hba_file_rules`)
	require.NoError(t, err)
	rules, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"local scram-sha-256", "host scram-sha-256"}, rules, "no trust")
	require.NoError(t, conn.Close(context.Background()))
	fi, err := os.Stat(filepath.Join(dir, hbaFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	stop(t, s)

	// Another password: the old one no longer opens it.
	s = start(t, Config{DataDir: dir, Password: second, Logger: logger})
	requireRefused(t, connectAs(s, first))
	require.NoError(t, connectAs(s, second))
	stop(t, s)

	// Nor does it go back to trust when started without: it fails at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = Start(ctx, Config{DataDir: dir, Logger: logger})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "28P01", pgErr.Code)
	require.ErrorContains(t, err, "does the cluster require another Config.Password?")
	require.NoError(t, ctx.Err(), "at once")

	require.NotContains(t, log.String(), "s3cret")
}

// TestAPasswordWithALineBreakIsRefused: the password travels as one line
// to the single-user backend.
func TestAPasswordWithALineBreakIsRefused(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Config{DataDir: dataDir(t), Password: "a\nb"})
	require.EqualError(t, err, "pglocal: Config.Password holds a line break or NUL")
}

func itoa(n int) string { return strconv.Itoa(n) }
