package pglocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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
	if err := os.MkdirAll(parent, 0o755); err != nil { //nolint:gosec // G301: postgres, run as another user, must traverse it
		return fmt.Errorf("pglocal: create parent of data dir: %w", err)
	}
	if !l.byDescriptor() {
		if err := l.who.checkTraversable(l.dataDir); err != nil {
			return err
		}
	}
	_, err := os.Stat(filepath.Join(l.dataDir, "PG_VERSION"))
	switch {
	case err == nil:
		// Existing cluster: it may have been created by someone else (or by
		// us before we ran as root), so hand it over again.
		if err := l.who.chownR(l.dataDir); err != nil {
			return err
		}
		if err := os.Chmod(l.dataDir, 0o700); err != nil { //nolint:gosec // G302: a directory, owner-only
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
	if err := os.Chmod(dir, 0o700); err != nil { //nolint:gosec // G302: a directory, owner-only
		return fmt.Errorf("pglocal: %w", err)
	}
	return l.who.chownR(dir)
}

func (l *launcher) initdb(ctx context.Context, dir string, start time.Time) error {
	cd, err := l.openForChild(dir)
	if err != nil {
		return err
	}
	defer cd.close()
	args := []string{"-D", cd.path, "-U", l.cfg.User, "--auth=trust", "-E", "UTF8", "--locale=C"}
	if !l.cfg.Durable {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(l.binDir, exe("initdb")), args...)
	cd.apply(cmd)
	cmd.SysProcAttr = sysProcAttr(l.who.credential(), syscall.SIGKILL)
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = outputGrace
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	exited := make(chan error, 1)
	if err := startLocked(cmd, func(err error) { exited <- err }); err != nil {
		return fmt.Errorf("pglocal: run initdb: %w", err)
	}
	err = <-exited
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
	cd, err := l.openForChild(l.dataDir)
	if err != nil {
		return nil, err
	}
	defer cd.close()
	args := []string{
		"-D", cd.path,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "max_connections=200",
	}
	if !l.cfg.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(l.binDir, exe("postgres")), args...)
	cd.apply(cmd)
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
		password:   l.cfg.Password,
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
		if pgErr := (*pgconn.PgError)(nil); errors.As(lastErr, &pgErr) && strings.HasPrefix(pgErr.Code, "28") {
			// invalid_password or invalid_authorization_specification: the
			// cluster requires a password (Config.Password) other than ours.
			return fmt.Errorf("postgres refused our connection (does the cluster require another Config.Password?): %w", lastErr)
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
// another one that holds the port: the postmaster.pid of the answering
// server's data directory names our postmaster.
func (s *Server) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var pid string
	if err := conn.QueryRow(ctx, `SELECT split_part(pg_read_file('postmaster.pid'), E'\n', 1)`).Scan(&pid); err != nil {
		return fmt.Errorf("read postmaster.pid: %w", err)
	}
	if pid != strconv.Itoa(s.proc.Pid) {
		return fmt.Errorf("port %d is served by another PostgreSQL (postmaster pid %s, ours %d)", s.port, pid, s.proc.Pid)
	}
	return nil
}
