package pglocal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultUser is the database superuser initdb creates when Config.User is
// empty.
const DefaultUser = "harvest"

const (
	// defaultStartTimeout bounds Start when its context has no deadline.
	defaultStartTimeout = 30 * time.Second
	// defaultStopTimeout bounds the fast shutdown when Stop's context has no
	// deadline; after it, postgres is killed.
	defaultStopTimeout = 30 * time.Second
	// pollInterval paces the readiness probe and start-up retries.
	pollInterval = 50 * time.Millisecond
	// outputGrace bounds how long we wait, after postgres exited, for the
	// last of its output (orphaned backends may hold the pipe briefly).
	outputGrace = 5 * time.Second
	// tailLines is how many lines of postgres output errors quote.
	tailLines = 40
	// deathSignal reaches the postmaster if our process dies (Linux only):
	// SIGQUIT is an immediate shutdown, which also stops the backends and
	// releases shared memory, so the next Start need not wait for orphans.
	// The next start runs crash recovery.
	deathSignal = syscall.SIGQUIT
)

// Config configures [Start]. Zero values mean the documented defaults.
type Config struct {
	// DataDir is the cluster directory; required. A cluster in it (marked by
	// PG_VERSION) is reused as is; otherwise DataDir must be absent or empty,
	// and initdb creates one. Its parent directories are created as needed.
	DataDir string
	// BinDir holds initdb and postgres. Default: $HARVEST_PG_BIN, else
	// `pg_config --bindir` when pg_config is on PATH, else the highest version
	// under /usr/lib/postgresql/*/bin, else the directory of `postgres` on
	// PATH (symlinks resolved). An explicit BinDir or $HARVEST_PG_BIN without
	// the binaries is an error rather than a reason to look elsewhere.
	BinDir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// User is the superuser initdb creates (authentication is "trust");
	// default DefaultUser. It only matters when the cluster is created.
	User string
	// Durable keeps PostgreSQL's crash-safety defaults. When false (tests),
	// the server runs with fsync, synchronous_commit and full_page_writes off
	// and initdb skips its final sync: fast, but a crash of postgres itself
	// (Kill, or the immediate shutdown it gets when our process dies) may
	// lose the transactions it committed in its last fraction of a second,
	// and a crash of the machine may corrupt the cluster. Tests that kill
	// postgres and check what survived set Durable.
	Durable bool
	// Logger receives PostgreSQL's output at Debug level and our lifecycle
	// messages at Info. Default: discard.
	Logger *slog.Logger
}

// Server is a running PostgreSQL started by [Start].
type Server struct {
	log     *slog.Logger
	user    string
	port    int
	dataDir string

	proc       *os.Process   // the postmaster; set before Start returns
	exited     chan struct{} // closed once the postmaster has been reaped
	exitErr    error         // cmd.Wait's result; read only after exited is closed
	outputDone chan struct{} // closed when postgres's output pipe hit EOF
	out        *tailBuffer

	stopMu  sync.Mutex
	stopped bool
	stopErr error
}

// Start starts PostgreSQL as described by cfg and returns once it accepts
// connections. ctx bounds the whole start-up (default 30 s when it has no
// deadline); cancelling it after Start returned does not affect the server.
// It returns an error wrapping [ErrNotInstalled] when no binaries are found.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pglocal: Config.DataDir is required")
	}
	if cfg.User == "" {
		cfg.User = DefaultUser
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("pglocal: invalid port %d", cfg.Port)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}

	binDir, err := findBinDir(ctx, cfg.BinDir)
	if err != nil {
		return nil, err
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("pglocal: data dir: %w", err)
	}
	who, err := lookupRunAs()
	if err != nil {
		return nil, err
	}
	l := &launcher{log: log, cfg: cfg, binDir: binDir, dataDir: dataDir, who: who}
	if err := l.prepareDataDir(ctx); err != nil {
		return nil, err
	}

	retriedPort, waitedShmem := false, false
	for {
		port := cfg.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		s, err := l.launch(ctx, port)
		if err == nil {
			return s, nil
		}
		var le *launchError
		if !errors.As(err, &le) {
			return nil, err
		}
		switch {
		case le.addrInUse && cfg.Port == 0 && !retriedPort:
			// Someone took the port between freePort and postgres binding it.
			retriedPort = true
			log.Info("pglocal: port taken, retrying on another", "port", port)
			continue
		case le.shmemInUse:
			// Backends orphaned by a killed postmaster still hold its shared
			// memory; they exit as soon as they notice the postmaster died.
			level := slog.LevelDebug
			if !waitedShmem {
				level, waitedShmem = slog.LevelInfo, true
			}
			log.Log(ctx, level, "pglocal: previous server's processes still exiting, retrying", "data_dir", dataDir)
			t := time.NewTimer(2 * pollInterval)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return nil, err
			}
		}
		return nil, err
	}
}

// URL returns the connection URL for database dbname, e.g.
// postgres://harvest@127.0.0.1:54321/dbname?sslmode=disable.
func (s *Server) URL(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(s.user),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the server listens on at 127.0.0.1.
func (s *Server) Port() int { return s.port }

// Stop shuts the server down fast (SIGINT: roll back open transactions,
// disconnect clients, checkpoint) and waits for it to exit. If it has not
// exited when ctx is done (default 30 s when ctx has no deadline), Stop kills
// it and its backends with SIGKILL; the next start then runs crash recovery.
// Stop reports an error if postgres had already exited on its own. It is safe
// to call more than once, also concurrently; later calls return the first
// call's result.
func (s *Server) Stop(ctx context.Context) error {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if !s.stopped {
		s.stopped = true
		s.stopErr = s.stop(ctx)
	}
	return s.stopErr
}

func (s *Server) stop(ctx context.Context) error {
	select {
	case <-s.exited:
		s.waitOutput()
		return fmt.Errorf("pglocal: postgres had already exited (%s)%s", exitStatus(s.exitErr), s.out.quote())
	default:
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStopTimeout)
		defer cancel()
	}
	start := time.Now()
	if err := s.proc.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.log.Warn("pglocal: signalling postgres failed, killing it", "pid", s.proc.Pid, "err", err)
		s.kill()
		return fmt.Errorf("pglocal: signal postgres: %w", err)
	}
	select {
	case <-s.exited:
		s.waitOutput()
		if s.exitErr != nil {
			return fmt.Errorf("pglocal: postgres shutdown: %w%s", s.exitErr, s.out.quote())
		}
		s.log.Info("pglocal: postgres stopped", "port", s.port, "elapsed", time.Since(start))
		return nil
	case <-ctx.Done():
		s.log.Warn("pglocal: postgres fast shutdown timed out, killing it", "pid", s.proc.Pid)
		s.kill()
		return fmt.Errorf("pglocal: postgres did not shut down in time and was killed: %w", ctx.Err())
	}
}

// Signal sends sig to the postmaster alone and returns without waiting:
// SIGTERM asks for a smart shutdown (which waits for every client session
// to end), SIGINT for a fast one, SIGQUIT for an immediate one. [Server.Exited]
// tells when postgres is gone. Signalling a postgres that has exited
// returns an error wrapping [os.ErrProcessDone].
func (s *Server) Signal(sig os.Signal) error {
	select {
	case <-s.exited:
		return fmt.Errorf("pglocal: signal postgres: %w", os.ErrProcessDone)
	default:
	}
	if err := s.proc.Signal(sig); err != nil {
		return fmt.Errorf("pglocal: signal postgres: %w", err)
	}
	return nil
}

// Kill crashes the server: it SIGKILLs the postmaster and its backends
// (the whole process group, as when a container is killed) and returns once
// the postmaster is reaped. The next [Start] on the data directory runs
// crash recovery. It does nothing if postgres has exited already; a later
// [Server.Stop] reports that postgres had exited.
func (s *Server) Kill() { s.kill() }

// Exited is closed once the postmaster has exited and been reaped, however
// it ended.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// kill SIGKILLs the postmaster's process group and waits until the
// postmaster is reaped and its output drained.
func (s *Server) kill() {
	select {
	case <-s.exited:
	default:
		if err := killGroup(s.proc); err != nil {
			_ = s.proc.Kill()
		}
		<-s.exited
	}
	s.waitOutput()
}

// waitOutput waits, briefly, for the output reader to reach EOF so error
// messages include postgres's last words and no goroutine outlives Stop.
func (s *Server) waitOutput() {
	t := time.NewTimer(outputGrace)
	defer t.Stop()
	select {
	case <-s.outputDone:
	case <-t.C:
		s.log.Warn("pglocal: postgres output still open after exit; leaving its reader behind")
	}
}

// launcher holds what one Start needs across its attempts.
type launcher struct {
	log     *slog.Logger
	cfg     Config
	binDir  string
	dataDir string
	who     *runAs
}

// prepareDataDir makes sure dataDir holds a cluster owned by whoever runs
// postgres, with mode 0700, running initdb if there is none.
func (l *launcher) prepareDataDir(ctx context.Context) error {
	parent := filepath.Dir(l.dataDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("pglocal: create parent of data dir: %w", err)
	}
	if err := l.who.checkTraversable(l.dataDir); err != nil {
		return err
	}
	_, err := os.Stat(filepath.Join(l.dataDir, "PG_VERSION"))
	switch {
	case err == nil:
		// Existing cluster: it may have been created by someone else (or by
		// us before we ran as root), so hand it over again.
		if err := l.who.chownR(l.dataDir); err != nil {
			return err
		}
		if err := os.Chmod(l.dataDir, 0o700); err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("pglocal: data dir: %w", err)
	}

	entries, err := os.ReadDir(l.dataDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("pglocal: data dir: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("pglocal: data dir %s is not empty but holds no PostgreSQL cluster (no PG_VERSION): empty it or choose another directory", l.dataDir)
	}
	return l.initCluster(ctx)
}

// initCluster runs initdb in a fresh sibling of dataDir and renames it into
// place, so a run killed during initdb leaves no half-made cluster behind.
func (l *launcher) initCluster(ctx context.Context) error {
	parent, base := filepath.Split(l.dataDir)
	prefix := "." + base + ".initdb-"
	if stale, _ := filepath.Glob(filepath.Join(parent, prefix+"*")); len(stale) > 0 {
		for _, d := range stale {
			_ = os.RemoveAll(d)
		}
	}
	start := time.Now()
	l.log.Info("pglocal: initialising PostgreSQL cluster", "data_dir", l.dataDir, "bin_dir", l.binDir)

	tmp, err := os.MkdirTemp(parent, prefix+"*")
	if err != nil {
		// Parent not writable (DataDir pre-created for us): initdb in place.
		l.log.Debug("pglocal: cannot stage initdb next to data dir, running it in place", "err", err)
		if err := l.makeOwnedDir(l.dataDir); err != nil {
			return err
		}
		return l.initdb(ctx, l.dataDir, start)
	}
	if err := l.makeOwnedDir(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := l.initdb(ctx, tmp, start); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	// Renaming onto an empty directory replaces it.
	if err := os.Rename(tmp, l.dataDir); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("pglocal: move new cluster into place: %w", err)
	}
	return nil
}

// makeOwnedDir creates dir (if needed) with mode 0700, owned by whoever runs
// postgres.
func (l *launcher) makeOwnedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	return l.who.chownR(dir)
}

func (l *launcher) initdb(ctx context.Context, dir string, start time.Time) error {
	args := []string{"-D", dir, "-U", l.cfg.User, "--auth=trust", "-E", "UTF8", "--locale=C"}
	if !l.cfg.Durable {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(l.binDir, exe("initdb")), args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr(l.who.credential(), syscall.SIGKILL)
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = outputGrace
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	exited := make(chan error, 1)
	if err := startLocked(cmd, func(err error) { exited <- err }); err != nil {
		return fmt.Errorf("pglocal: run initdb: %w", err)
	}
	err := <-exited
	l.log.Debug("pglocal: initdb output", "output", out.String())
	if err != nil {
		return fmt.Errorf("pglocal: initdb: %w%s", err, quote("initdb", lastLines(out.String(), tailLines)))
	}
	l.log.Info("pglocal: cluster initialised", "data_dir", l.dataDir, "elapsed", time.Since(start))
	return nil
}

// launchError is a postgres start-up failure with the server's output.
type launchError struct {
	err        error
	output     string
	addrInUse  bool // could not bind the port
	shmemInUse bool // an older server's backends still hold shared memory
}

func (e *launchError) Error() string {
	return fmt.Sprintf("pglocal: postgres failed to start: %v%s", e.err, quote("postgres", e.output))
}

func (e *launchError) Unwrap() error { return e.err }

// launch starts postgres on port and waits until it accepts connections.
func (l *launcher) launch(ctx context.Context, port int) (*Server, error) {
	args := []string{
		"-D", l.dataDir,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "max_connections=200",
	}
	if !l.cfg.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(l.binDir, exe("postgres")), args...)
	cmd.Dir = l.dataDir
	cmd.SysProcAttr = sysProcAttr(l.who.credential(), deathSignal)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	// An *os.File, not an io.Writer: exec then hands the pipe straight to the
	// child, and Wait does not wait for backends that inherited it.
	cmd.Stdout, cmd.Stderr = w, w

	s := &Server{
		log:        l.log,
		user:       l.cfg.User,
		port:       port,
		dataDir:    l.dataDir,
		exited:     make(chan struct{}),
		outputDone: make(chan struct{}),
		out:        &tailBuffer{max: tailLines},
	}
	start := time.Now()
	err = startLocked(cmd, func(err error) {
		s.exitErr = err
		close(s.exited)
	})
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("pglocal: run postgres: %w", err)
	}
	s.proc = cmd.Process
	go s.readOutput(r)

	if err := s.waitReady(ctx); err != nil {
		s.kill()
		out := s.out.String()
		return nil, &launchError{
			err:        err,
			output:     out,
			addrInUse:  strings.Contains(out, "Address already in use"),
			shmemInUse: strings.Contains(out, "pre-existing shared memory block"),
		}
	}
	l.log.Info("pglocal: postgres ready", "port", port, "pid", s.proc.Pid, "data_dir", l.dataDir, "elapsed", time.Since(start))
	return s, nil
}

// startLocked starts cmd from a goroutine locked to its OS thread, and keeps
// that goroutine (so the thread) alive until cmd exits: Linux delivers the
// parent-death signal when the forking thread exits, not the process, and
// the Go runtime may otherwise retire idle threads. onExit receives
// cmd.Wait's result. startLocked returns cmd.Start's error.
func startLocked(cmd *exec.Cmd, onExit func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread is discarded with this goroutine, after
		// the child is gone.
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		onExit(cmd.Wait())
	}()
	return <-started
}

// waitReady polls until postgres accepts a connection, fails, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	// Abort a pending attempt as soon as postgres exits: whatever holds the
	// port (if postgres failed to bind it) may never answer.
	probeCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.exited:
			cancel()
		case <-probeCtx.Done():
		}
	}()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		lastErr = s.probe(probeCtx)
		if lastErr == nil {
			return nil
		}
		select {
		case <-s.exited:
			s.waitOutput()
			return fmt.Errorf("postgres exited (%s)", exitStatus(s.exitErr))
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections in time (last attempt: %v): %w", lastErr, ctx.Err())
		case <-ticker.C:
		}
	}
}

// probe connects once and checks that the server answering is ours, not
// another one that holds the port.
func (s *Server) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return fmt.Errorf("read data_directory: %w", err)
	}
	if filepath.Clean(dir) != s.dataDir && !sameFile(dir, s.dataDir) {
		return fmt.Errorf("port %d is served by another PostgreSQL (data_directory %s)", s.port, dir)
	}
	return nil
}

// sameFile reports whether paths a and b name the same existing file.
func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// readOutput logs postgres's output line by line and keeps its tail for
// error messages, until every holder of the pipe has exited.
func (s *Server) readOutput(r *os.File) {
	defer close(s.outputDone)
	defer func() { _ = r.Close() }()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		s.out.add(line)
		s.log.Debug("postgres", "line", line)
	}
	// On an over-long line keep draining, so postgres never blocks on a
	// full pipe.
	_, _ = io.Copy(io.Discard, r)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pglocal: pick a free port: %w", err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// tailBuffer keeps the last max lines written to it.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *tailBuffer) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.max {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:t.max-1]
	}
	t.lines = append(t.lines, line)
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// quote formats the tail for appending to an error message.
func (t *tailBuffer) quote() string { return quote("postgres", t.String()) }

// quote formats program's output for appending to an error message.
func quote(program, output string) string {
	output = strings.TrimSpace(output)
	if output == "" {
		return ""
	}
	return "\n--- " + program + " output (last lines) ---\n" + output
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
