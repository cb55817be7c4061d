package pglocal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// helperEnv, when set, turns the test binary into a helper process that
// starts a server on the data dir it names, prints the postmaster's pid and
// blocks: TestPostmasterDiesWithParent kills it.
const helperEnv = "PGLOCAL_TEST_HELPER_DATADIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		helperMain(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

func helperMain(dataDir string) {
	s, err := Start(context.Background(), Config{DataDir: dataDir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(s.proc.Pid)
	// Block until killed (stdin stays open as long as the test holds it).
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(2)
}

// dataDir returns a fresh data directory path inside t.TempDir(). As
// root on Linux PostgreSQL reaches it by descriptor, whatever the modes
// of its parents; elsewhere the temp dirs (testing creates them 0700) are
// made traversable for the postgres user.
func dataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 && runtime.GOOS != "linux" {
		tmp := filepath.Clean(os.TempDir())
		for d := dir; d != tmp && strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
			require.NoError(t, os.Chmod(d, 0o755))
		}
	}
	return filepath.Join(dir, "data")
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// tWriter sends log output to t.Log, so it shows only for failing tests
// (or with -v).
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	begin := time.Now()
	s, err := Start(ctx, cfg)
	require.NoError(t, err)
	t.Logf("started in %v on port %d", time.Since(begin), s.Port())
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

func connect(t *testing.T, s *Server) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func stop(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	require.NoError(t, s.Stop(ctx))
	t.Logf("stopped in %v", time.Since(begin))
	require.NoError(t, s.Stop(ctx), "second Stop")
}

func TestStartQueryStopRestart(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	s := start(t, Config{DataDir: dir})

	assert.Regexp(t, `^postgres://harvest@127\.0\.0\.1:\d+/mydb\?sslmode=disable$`, s.URL("mydb"))
	assert.Equal(t, strconv.Itoa(s.Port()), strings.Split(strings.Split(s.URL("x"), ":")[2], "/")[0])

	ctx := context.Background()
	conn := connect(t, s)
	var user, fsync string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_user, current_setting('fsync')`).Scan(&user, &fsync))
	assert.Equal(t, "harvest", user)
	assert.Equal(t, "off", fsync)
	_, err := conn.Exec(ctx, `CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	stop(t, s)

	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	// Same data dir, durable this time: the cluster is reused, not re-made.
	s2 := start(t, Config{DataDir: dir, Durable: true})
	conn2 := connect(t, s2)
	var v string
	require.NoError(t, conn2.QueryRow(ctx, `SELECT v FROM kept`).Scan(&v))
	assert.Equal(t, "hello", v)
	require.NoError(t, conn2.QueryRow(ctx, `SELECT current_setting('fsync')`).Scan(&fsync))
	assert.Equal(t, "on", fsync)
	require.NoError(t, conn2.Close(ctx))
	stop(t, s2)
}

func TestStartAfterPostmasterKilled(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	s := start(t, Config{DataDir: dir, User: "someone"})
	ctx := context.Background()
	conn := connect(t, s)
	// synchronous_commit=on so the row is in the WAL when we kill.
	_, err := conn.Exec(ctx, `SET synchronous_commit = on; CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)`)
	require.NoError(t, err)

	// Kill only the postmaster, as a crash would: its backends (including
	// ours) are orphaned and postmaster.pid stays behind.
	require.NoError(t, syscall.Kill(s.proc.Pid, syscall.SIGKILL))
	<-s.exited
	_, err = os.Stat(filepath.Join(dir, "postmaster.pid"))
	require.NoError(t, err, "stale postmaster.pid should be left behind")
	err = s.Stop(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "already exited")

	s2 := start(t, Config{DataDir: dir, User: "someone"})
	conn2 := connect(t, s2)
	var v int
	require.NoError(t, conn2.QueryRow(ctx, `SELECT v FROM kept`).Scan(&v))
	assert.Equal(t, 42, v)
	require.NoError(t, conn2.Close(ctx))
	stop(t, s2)
}

// TestSignalAndKill stops one data directory's server in each way a fault
// injector does, restarting it on the same port each time: SIGTERM (a
// smart shutdown, which waits for the open session), Kill (a crash), and
// SIGINT (a fast shutdown).
func TestSignalAndKill(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	ctx := context.Background()
	s := start(t, Config{DataDir: dir})
	port := s.Port()
	conn := connect(t, s)
	_, err := conn.Exec(ctx, `SET synchronous_commit = on; CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)`)
	require.NoError(t, err)

	// SIGTERM: the open session goes on, new ones are refused, and the
	// server exits once the session ends.
	require.NoError(t, s.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			_ = c.Close(ctx)
		}
		return err != nil
	}, 10*time.Second, 20*time.Millisecond, "new sessions are refused during a smart shutdown")
	_, err = conn.Exec(ctx, `INSERT INTO kept VALUES (2)`)
	require.NoError(t, err, "the open session outlives SIGTERM")
	select {
	case <-s.Exited():
		t.Fatal("postgres exited while a session was open")
	default:
	}
	require.NoError(t, conn.Close(ctx))
	waitExited(t, s)
	require.ErrorIs(t, s.Signal(syscall.SIGTERM), os.ErrProcessDone)

	// Kill: a crash; the next start recovers.
	s = start(t, Config{DataDir: dir, Port: port})
	conn = connect(t, s)
	_, err = conn.Exec(ctx, `SET synchronous_commit = on; INSERT INTO kept VALUES (3)`)
	require.NoError(t, err)
	s.Kill()
	waitExited(t, s)
	s.Kill() // a no-op once exited
	require.ErrorContains(t, s.Stop(ctx), "already exited")

	// SIGINT: a fast shutdown, open sessions or not.
	s = start(t, Config{DataDir: dir, Port: port})
	conn = connect(t, s)
	var sum int
	require.NoError(t, conn.QueryRow(ctx, `SELECT sum(v) FROM kept`).Scan(&sum))
	require.Equal(t, 6, sum, "every committed row survives each stop")
	require.NoError(t, s.Signal(os.Interrupt))
	waitExited(t, s)
}

func waitExited(t *testing.T, s *Server) {
	t.Helper()
	select {
	case <-s.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("postgres did not exit within 30s")
	}
}

func TestPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	begin := time.Now()
	s, err := Start(context.Background(), Config{DataDir: dataDir(t), Port: port, Logger: testLogger(t)})
	if s != nil {
		_ = s.Stop(context.Background())
	}
	require.Error(t, err)
	t.Logf("failed after %v: %v", time.Since(begin), err)
	assert.Contains(t, err.Error(), "Address already in use", "error should quote postgres's output")
	assert.Contains(t, err.Error(), "postgres exited")
}

func TestNotInstalled(t *testing.T) {
	empty := t.TempDir()
	_, err := Start(context.Background(), Config{DataDir: filepath.Join(t.TempDir(), "data"), BinDir: empty})
	require.ErrorIs(t, err, ErrNotInstalled)
	assert.Contains(t, err.Error(), empty)

	t.Setenv(EnvBinDir, empty)
	_, err = Start(context.Background(), Config{DataDir: filepath.Join(t.TempDir(), "data")})
	require.ErrorIs(t, err, ErrNotInstalled)
	assert.Contains(t, err.Error(), EnvBinDir)

	assert.NotContains(t, ErrNotInstalled.Error(), "\n")
}

func TestFindBinDir(t *testing.T) {
	dir, err := findBinDir(context.Background(), "")
	if errors.Is(err, ErrNotInstalled) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Logf("found %s", dir)
	assert.True(t, hasServerBinaries(dir))

	root := t.TempDir()
	for _, v := range []string{"9.6", "13", "15", "notaversion", "16"} {
		bin := filepath.Join(root, v, "bin")
		require.NoError(t, os.MkdirAll(bin, 0o755))
		if v == "16" {
			continue // no binaries: must be passed over
		}
		for _, name := range []string{"initdb", "postgres"} {
			require.NoError(t, os.WriteFile(filepath.Join(bin, name), nil, 0o755))
		}
	}
	assert.Equal(t, filepath.Join(root, "15", "bin"), highestDebianBinDir(root))
}

func TestNonEmptyDataDirWithoutCluster(t *testing.T) {
	dir := dataDir(t)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "precious"), []byte("x"), 0o644))
	_, err := Start(context.Background(), Config{DataDir: dir})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no PG_VERSION")
	_, err = os.Stat(filepath.Join(dir, "precious"))
	assert.NoError(t, err)
}

// TestDataDirUnderAParentTheUserCannotSearch: as root, PostgreSQL runs as
// the postgres user, which cannot search a 0700 directory of root's. On
// Linux it reaches its data dir by descriptor: it starts, keeps its data
// there (no copy elsewhere), restarts on it, and no directory's mode
// changes. Elsewhere Start says which directory is in the way.
func TestDataDirUnderAParentTheUserCannotSearch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs PostgreSQL as another user")
	}
	t.Parallel()
	locked := filepath.Join(t.TempDir(), "locked")
	require.NoError(t, os.Mkdir(locked, 0o700))
	dir := filepath.Join(locked, "data")
	if runtime.GOOS != "linux" {
		_, err := Start(context.Background(), Config{DataDir: dir})
		require.ErrorIs(t, err, ErrDataDirUnreachable)
		assert.Contains(t, err.Error(), locked+" ")
		assert.Contains(t, err.Error(), "not traversable")
		return
	}
	ctx := context.Background()
	s := start(t, Config{DataDir: dir})
	conn := connect(t, s)
	var shown string
	require.NoError(t, conn.QueryRow(ctx, `SHOW data_directory`).Scan(&shown))
	assert.Equal(t, "/proc/self/fd/3", shown)
	_, err := conn.Exec(ctx, `CREATE DATABASE other`)
	require.NoError(t, err, "copying a database works through the descriptor")
	_, err = conn.Exec(ctx, `CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	stop(t, s)
	_, err = os.Stat(filepath.Join(dir, "PG_VERSION"))
	require.NoError(t, err, "the cluster lives in DataDir")
	fi, err := os.Stat(locked)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the parent's mode is left alone")

	s2 := start(t, Config{DataDir: dir})
	var v string
	require.NoError(t, connect(t, s2).QueryRow(ctx, `SELECT v FROM kept`).Scan(&v))
	assert.Equal(t, "hello", v)
	stop(t, s2)
}

// TestPostmasterDiesWithParent checks the parent-death signal: when the
// process that started postgres is SIGKILLed, the postmaster goes too.
func TestPostmasterDiesWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signal is Linux only")
	}
	t.Parallel()
	dir := dataDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	require.True(t, alive(pid), "postmaster should be running")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	begin := time.Now()
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 20*time.Millisecond,
		"postmaster %d outlived its parent", pid)
	t.Logf("postmaster gone %v after its parent", time.Since(begin))

	// And the data dir is usable again straight away.
	s := start(t, Config{DataDir: dir})
	stop(t, s)
}

// alive reports whether pid exists and is not a zombie (a container's init
// may not reap orphans promptly).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Format: pid (comm) state ...; comm may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestStartWhileOrphanBackendLingers kills the postmaster while a backend is
// busy in a query that does not check for postmaster death, so the backend
// keeps the old shared memory attached for a while: Start must wait it out.
func TestStartWhileOrphanBackendLingers(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	s := start(t, Config{DataDir: dir})
	conn := connect(t, s)
	queryDone := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), `SELECT count(*) FROM generate_series(1, 10000000)`)
		queryDone <- err
	}()
	ctx := context.Background()
	probe := connect(t, s)
	require.Eventually(t, func() bool {
		var n int
		err := probe.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT count(*) FROM generate_series%' AND state = 'active'`).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, syscall.Kill(s.proc.Pid, syscall.SIGKILL))
	<-s.exited
	s2 := start(t, Config{DataDir: dir})
	// The orphan must be gone: it held the shared memory Start waited for.
	select {
	case err := <-queryDone:
		t.Logf("orphaned query ended with %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("orphaned query still running after the restart")
	}
	var one int
	require.NoError(t, connect(t, s2).QueryRow(ctx, `SELECT 1`).Scan(&one))
	stop(t, s2)
}
