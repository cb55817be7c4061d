package pglocal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
	// User is the superuser initdb creates; default DefaultUser. It only
	// matters when the cluster is created.
	User string
	// Password, when set, is required of every connection: at each Start,
	// before the server listens, User's password is set to it and
	// pg_hba.conf is rewritten to allow password authentication
	// (scram-sha-256) only, so a cluster made without a password (or with
	// another) is brought to this one. [Server.URL] carries it. It must not
	// hold a line break or NUL. When empty, a new cluster trusts every
	// connection to 127.0.0.1 (any local user logs in as the superuser) and
	// an existing cluster's pg_hba.conf is left as it is: for throwaway
	// test clusters only.
	Password string
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
	log      *slog.Logger
	user     string
	password string
	port     int
	dataDir  string

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
	if strings.ContainsAny(cfg.Password, "\x00\r\n") {
		return nil, errors.New("pglocal: Config.Password holds a line break or NUL")
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
	waitedShmem := false
	if err := l.requirePassword(ctx, &waitedShmem); err != nil {
		return nil, err
	}

	retriedPort := false
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
			if l.waitShmem(ctx, &waitedShmem) {
				continue
			}
		}
		return nil, err
	}
}

// waitShmem waits a moment for backends orphaned by a killed postmaster,
// which still hold its shared memory and exit as soon as they notice the
// postmaster died. It reports false if ctx ended first. waited says whether
// we told already (at Info) that we wait.
func (l *launcher) waitShmem(ctx context.Context, waited *bool) bool {
	level := slog.LevelDebug
	if !*waited {
		level, *waited = slog.LevelInfo, true
	}
	l.log.Log(ctx, level, "pglocal: previous server's processes still exiting, retrying", "data_dir", l.dataDir)
	t := time.NewTimer(2 * pollInterval)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// URL returns the connection URL for database dbname, e.g.
// postgres://harvest@127.0.0.1:54321/dbname?sslmode=disable, with
// Config.Password when it is set (postgres://harvest:…@127.0.0.1:…).
func (s *Server) URL(dbname string) string {
	user := url.User(s.user)
	if s.password != "" {
		user = url.UserPassword(s.user, s.password)
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     user,
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
