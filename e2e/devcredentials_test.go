package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestDevServersAreClosedToOtherLocalUsers runs harvest dev and tries its
// servers as another local account would: the embedded NATS server and
// the private PostgreSQL, which listen on 127.0.0.1, refuse a client
// without the state dir's credentials; the URL harvest dev prints carries
// them, and nats.url, which holds it, is readable by its owner alone (it
// replaces one an older harvest dev left readable to all), in a state dir
// of mode 0700. The log does not show the passwords.
func TestDevServersAreClosedToOtherLocalUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs harvest dev")
	}
	bin := buildHarvest(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Mkdir(stateDir, 0o755))
	require.NoError(t, os.Chmod(stateDir, 0o755))
	urlFile := filepath.Join(stateDir, "nats.url")
	require.NoError(t, os.WriteFile(urlFile, []byte("nats://127.0.0.1:4222\n"), 0o644))
	require.NoError(t, os.Chmod(urlFile, 0o644))

	dev := startDev(t, bin, t.TempDir(), "--addr", freeAddr(t), "--state-dir", stateDir)
	var printed string
	probe.Until(t, 30*time.Second, "harvest dev to print the NATS URL", func() bool {
		for _, line := range strings.Split(dev.logs.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "export HARVEST_NATS_URL="); ok {
				printed = v
			}
		}
		return printed != ""
	})
	u, err := url.Parse(printed)
	require.NoError(t, err)
	password, ok := u.User.Password()
	require.True(t, ok, "the printed URL carries a password: %s", printed)
	require.Equal(t, "harvest", u.User.Username())

	written, err := os.ReadFile(urlFile)
	require.NoError(t, err)
	require.Equal(t, printed+"\n", string(written))
	for path, mode := range map[string]os.FileMode{stateDir: 0o700, urlFile: 0o600, filepath.Join(stateDir, "credentials.json"): 0o600} {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, mode, fi.Mode().Perm(), path)
	}

	// NATS: the port alone, then a guess, then the printed URL.
	for _, try := range []*url.Userinfo{nil, url.UserPassword("harvest", "guess")} {
		bare := *u
		bare.User = try
		_, err := nats.Connect(bare.String(), nats.MaxReconnects(0))
		require.ErrorIs(t, err, nats.ErrAuthorization, "NATS as %v", try)
	}
	nc, err := nats.Connect(printed, nats.MaxReconnects(0))
	require.NoError(t, err, "NATS with the printed URL")
	nc.Close()

	// PostgreSQL: its port is in its postmaster.pid (4th line), as
	// `ss -ltn` would show another user.
	pid, err := os.ReadFile(filepath.Join(stateDir, "postgres", "postmaster.pid"))
	require.NoError(t, err)
	lines := strings.Split(string(pid), "\n")
	require.Greater(t, len(lines), 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, as := range []string{"harvest", "harvest:guess", "postgres"} {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@127.0.0.1:%s/postgres?sslmode=disable", as, strings.TrimSpace(lines[3])))
		if err == nil {
			_ = conn.Close(ctx)
		}
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "PostgreSQL as %s is refused: %v", as, err)
		require.Equal(t, "28P01", pgErr.Code, "PostgreSQL as %s: %v", as, err)
	}

	dev.stop(t)
	logs := strings.ReplaceAll(dev.logs.String(), "export HARVEST_NATS_URL="+printed, "")
	require.NotContains(t, logs, password, "the log shows no password")
	_, err = os.Stat(urlFile)
	require.ErrorIs(t, err, os.ErrNotExist, "nats.url goes with harvest dev")
}
