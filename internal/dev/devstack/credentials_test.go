package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/dev/pglocal"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// fullLog keeps everything a stack logged.
type fullLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *fullLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *fullLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// stateDirCredentials reads the state dir's credentials file.
func stateDirCredentials(t *testing.T, stateDir string) (natsPassword, postgresPassword string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(stateDir, "credentials.json"))
	require.NoError(t, err)
	var c struct {
		NATS     string `json:"nats_password"`
		Postgres string `json:"postgres_password"`
	}
	require.NoError(t, json.Unmarshal(data, &c))
	require.NotEmpty(t, c.NATS)
	require.NotEmpty(t, c.Postgres)
	return c.NATS, c.Postgres
}

// requireMode checks path's permission bits.
func requireMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, want, fi.Mode().Perm(), path)
}

// connectNATS connects to the stack's NATS server as another local user
// would, with the user and password given (none when user is empty), and
// asks JetStream for the account's streams.
func connectNATS(s *devstack.Stack, user, password string) error {
	u, err := url.Parse(s.NATSURL())
	if err != nil {
		return err
	}
	u.User = nil
	if user != "" {
		u.User = url.UserPassword(user, password)
	}
	nc, err := nats.Connect(u.String(), nats.MaxReconnects(0))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// connectPostgres connects to the stack's PostgreSQL as another local
// user would: to its port, as its superuser, with password (none when
// empty), to database db.
func connectPostgres(s *devstack.Stack, db, password string) error {
	cc := s.DB.Config().ConnConfig
	u := url.URL{Scheme: "postgres", User: url.User(cc.User), Host: fmt.Sprintf("%s:%d", cc.Host, cc.Port), Path: "/" + db, RawQuery: "sslmode=disable"}
	if password != "" {
		u.User = url.UserPassword(cc.User, password)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, `SELECT 1`)
	return err
}

// requirePasswordRefused checks that PostgreSQL refused the password.
func requirePasswordRefused(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "refused by PostgreSQL: %v", err)
	require.Equal(t, "28P01", pgErr.Code, "invalid_password: %v", err)
}

// TestTheDevServersRequireTheStateDirsCredentials: another local user
// reaches the embedded NATS server's port and the private PostgreSQL's,
// but neither without the credentials that the state dir keeps (a file
// of mode 0600 in a directory of mode 0700); the stack's NATS URL carries
// them, and a stack started again on the state dir has the same ones.
// The log shows neither password.
func TestTheDevServersRequireTheStateDirsCredentials(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state")
	log := &fullLog{}
	s, err := startOn(t, stateDir, devstack.Config{Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	requireMode(t, stateDir, 0o700)
	requireMode(t, filepath.Join(stateDir, "credentials.json"), 0o600)
	natsPassword, pgPassword := stateDirCredentials(t, stateDir)

	u, err := url.Parse(s.NATSURL())
	require.NoError(t, err)
	require.Equal(t, "nats://harvest:"+natsPassword+"@"+u.Host, s.NATSURL())
	require.Equal(t, "nats://harvest:xxxxx@"+u.Host, s.NATSURLRedacted())
	require.ErrorIs(t, connectNATS(s, "", ""), nats.ErrAuthorization, "no credentials")
	require.ErrorIs(t, connectNATS(s, "harvest", "guess"), nats.ErrAuthorization, "a guessed password")
	require.NoError(t, connectNATS(s, "harvest", natsPassword), "the URL's credentials")

	require.Equal(t, pgPassword, s.DB.Config().ConnConfig.Password, "the stack's pool gives the password")
	for _, db := range []string{"harvest", "postgres"} {
		requirePasswordRefused(t, connectPostgres(s, db, ""))
		requirePasswordRefused(t, connectPostgres(s, db, "guess"))
		require.NoError(t, connectPostgres(s, db, pgPassword))
	}
	stacktest.Stop(t, s)

	again, err := startOn(t, stateDir, devstack.Config{Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	n, p := stateDirCredentials(t, stateDir)
	require.Equal(t, []string{natsPassword, pgPassword}, []string{n, p}, "the credentials are kept")
	require.ErrorIs(t, connectNATS(again, "", ""), nats.ErrAuthorization)
	require.NoError(t, connectNATS(again, "harvest", natsPassword))
	requirePasswordRefused(t, connectPostgres(again, "harvest", ""))
	require.NoError(t, connectPostgres(again, "harvest", pgPassword))
	stacktest.Stop(t, again)

	require.NotContains(t, log.String(), natsPassword)
	require.NotContains(t, log.String(), pgPassword)
}

// TestAStateDirFromBeforeCredentialsIsClosed: a state dir that an older
// harvest dev made (mode 0755, a PostgreSQL cluster that trusts every
// connection, no credentials) is made private and its PostgreSQL requires
// the password made for it; credentials others could read are replaced.
func TestAStateDirFromBeforeCredentialsIsClosed(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Mkdir(stateDir, 0o755))
	require.NoError(t, os.Chmod(stateDir, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pglocal.Start(ctx, pglocal.Config{DataDir: filepath.Join(stateDir, "postgres")})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	require.NoError(t, err, "the old cluster lets anyone in")
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, pg.Stop(ctx))

	s, err := startOn(t, stateDir, devstack.Config{})
	require.NoError(t, err)
	requireMode(t, stateDir, 0o700)
	requireMode(t, filepath.Join(stateDir, "credentials.json"), 0o600)
	natsPassword, pgPassword := stateDirCredentials(t, stateDir)
	requirePasswordRefused(t, connectPostgres(s, "postgres", ""))
	require.NoError(t, connectPostgres(s, "postgres", pgPassword))
	require.ErrorIs(t, connectNATS(s, "", ""), nats.ErrAuthorization)
	stacktest.Stop(t, s)

	// Credentials another user could have read are secrets no longer.
	require.NoError(t, os.Chmod(filepath.Join(stateDir, "credentials.json"), 0o644))
	s, err = startOn(t, stateDir, devstack.Config{})
	require.NoError(t, err)
	requireMode(t, filepath.Join(stateDir, "credentials.json"), 0o600)
	n, p := stateDirCredentials(t, stateDir)
	require.NotEqual(t, natsPassword, n)
	require.NotEqual(t, pgPassword, p)
	requirePasswordRefused(t, connectPostgres(s, "postgres", pgPassword))
	require.NoError(t, connectPostgres(s, "postgres", p))
	require.ErrorIs(t, connectNATS(s, "harvest", natsPassword), nats.ErrAuthorization)
	require.NoError(t, connectNATS(s, "harvest", n))
	stacktest.Stop(t, s)
}
