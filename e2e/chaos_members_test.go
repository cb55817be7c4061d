//go:build linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-engine/harvest/internal/dev/pglocal"
)

// The members of a chaos stack: processes run from binaries (NATS and the
// services) and PostgreSQL (run by pglocal), each stopped by a signal and
// started again where it was, with one log file per run.

// stopped is what stopping a member took.
type stopped struct {
	signal    syscall.Signal
	at        time.Time // signal sent
	exitedAt  time.Time
	escalated bool   // still running after the grace period: killed
	exit      string // how the process ended
}

// crash is an exit the harness did not cause.
type crash struct {
	member string
	run    int
	at     time.Time
	exit   string
}

// member is one fault target of the stack.
type member interface {
	name() string
	// start runs the member again, on the same port and state.
	start(ctx context.Context) error
	// stop sends sig and waits for the exit; a process still running after
	// grace is killed, as a supervisor would.
	stop(sig syscall.Signal, grace time.Duration) (stopped, error)
	// waitReady waits until the current run is ready to serve.
	waitReady(ctx context.Context) error
	logs() *runLogs
	// crashes returns the exits the harness did not cause and forgets them.
	crashes() []crash
	close()
}

var errNotRunning = errors.New("not running")

// runLogs is a member's output, one file per run: <name>.<run>.log.
type runLogs struct {
	dir, name string
	mu        sync.Mutex
	run       int
}

func (l *runLogs) next() (*os.File, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.run++
	f, err := os.Create(l.path(l.run))
	if err != nil {
		return nil, 0, fmt.Errorf("create log of %s: %w", l.name, err)
	}
	return f, l.run, nil
}

func (l *runLogs) path(run int) string {
	return filepath.Join(l.dir, fmt.Sprintf("%s.%d.log", l.name, run))
}

// logMark is a place in a member's output.
type logMark struct {
	run    int
	offset int64
}

func (l *runLogs) mark() logMark {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := logMark{run: l.run}
	if fi, err := os.Stat(l.path(l.run)); err == nil {
		m.offset = fi.Size()
	}
	return m
}

// excerpt quotes the output written since m: per run, the lines that
// interesting picks (at most maxPicked, the last ones) and the last tail
// lines.
func (l *runLogs) excerpt(m logMark, interesting func(string) bool, maxPicked, tail int) string {
	l.mu.Lock()
	last := l.run
	l.mu.Unlock()
	var b strings.Builder
	for run := max(m.run, 1); run <= last; run++ {
		data, err := os.ReadFile(l.path(run))
		if err != nil {
			continue
		}
		if run == m.run && m.offset <= int64(len(data)) {
			data = data[m.offset:]
		}
		var lines []string
		if text := strings.TrimRight(string(data), "\n"); text != "" {
			lines = strings.Split(text, "\n")
		}
		var picked []string
		for _, line := range lines {
			if interesting(line) {
				picked = append(picked, line)
			}
		}
		fmt.Fprintf(&b, "  --- %s (%d lines since the trial began) ---\n", filepath.Base(l.path(run)), len(lines))
		if len(picked) > maxPicked {
			fmt.Fprintf(&b, "  [%d earlier warnings and errors left out]\n", len(picked)-maxPicked)
			picked = picked[len(picked)-maxPicked:]
		}
		shown := map[string]bool{}
		for _, line := range picked {
			fmt.Fprintf(&b, "  ! %s\n", line)
			shown[line] = true
		}
		if len(lines) > tail {
			lines = lines[len(lines)-tail:]
		}
		for _, line := range lines {
			if !shown[line] {
				fmt.Fprintf(&b, "  | %s\n", line)
			}
		}
	}
	return b.String()
}

// readyWriter writes a process's output to its log and notices the line
// that says it is ready.
type readyWriter struct {
	w     io.Writer
	line  []byte
	once  sync.Once
	ready chan struct{}
}

func (r *readyWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, r.line) {
		r.once.Do(func() { close(r.ready) })
	}
	return r.w.Write(p)
}

// chaosProc is a member run from a binary. An exit the harness did not
// cause is recorded and the process started again after restartDelay.
type chaosProc struct {
	id        string
	bin       string
	args, env []string
	readyLine string
	// readyURL is the member's /readyz, on its API or admin address
	// (none for NATS).
	readyURL string
	log      *runLogs

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current run has exited
	exitErr  error         // the current run's exit, once exited is closed
	ready    chan struct{} // closed when the current run logged readyLine
	stopping bool          // the harness is stopping the current run
	closed   bool
	restart  *time.Timer
	crashed  []crash
}

func (p *chaosProc) name() string   { return p.id }
func (p *chaosProc) logs() *runLogs { return p.log }

func (p *chaosProc) start(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("start %s: the stack is closed", p.id)
	}
	if p.cmd != nil && !closedChan(p.exited) {
		return fmt.Errorf("start %s: already running", p.id)
	}
	if p.restart != nil {
		p.restart.Stop()
	}
	return p.startLocked()
}

func (p *chaosProc) startLocked() error {
	f, run, err := p.log.next()
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	w := &readyWriter{w: f, line: []byte(p.readyLine), ready: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w, w
	// Killed with us if the test binary dies (a -timeout panic).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		// Linux sends Pdeathsig when the forking thread exits, so that
		// thread stays with this goroutine until the child is gone.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		_ = f.Close()
		p.onExit(cmd, run, err, exited)
	}()
	if err := <-started; err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", p.id, err)
	}
	p.cmd, p.exited, p.exitErr, p.ready, p.stopping = cmd, exited, nil, w.ready, false
	return nil
}

func (p *chaosProc) onExit(cmd *exec.Cmd, run int, err error, exited chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.exitErr = err
	close(exited)
	if p.stopping || p.closed || p.cmd != cmd {
		return
	}
	p.crashed = append(p.crashed, crash{member: p.id, run: run, at: time.Now(), exit: exitString(err)})
	p.restart = time.AfterFunc(restartDelay, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed || p.cmd != cmd {
			return
		}
		if err := p.startLocked(); err != nil {
			p.crashed = append(p.crashed, crash{member: p.id, run: run, at: time.Now(), exit: "restart failed: " + err.Error()})
		}
	})
}

func (p *chaosProc) stop(sig syscall.Signal, grace time.Duration) (stopped, error) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil || closedChan(exited) {
		p.mu.Unlock()
		return stopped{}, fmt.Errorf("stop %s: %w", p.id, errNotRunning)
	}
	p.stopping = true
	p.mu.Unlock()
	res := stopped{signal: sig, at: time.Now()}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return res, fmt.Errorf("signal %s: %w", p.id, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		res.escalated = true
		_ = cmd.Process.Kill()
		<-exited
	}
	res.exitedAt = time.Now()
	p.mu.Lock()
	res.exit = exitString(p.exitErr)
	p.mu.Unlock()
	return res, nil
}

func (p *chaosProc) waitReady(ctx context.Context) error {
	p.mu.Lock()
	ready, exited := p.ready, p.exited
	p.mu.Unlock()
	if ready == nil {
		return fmt.Errorf("%s: never started", p.id)
	}
	select {
	case <-ready:
		return nil
	case <-exited:
		return fmt.Errorf("%s exited before it was ready", p.id)
	case <-ctx.Done():
		return fmt.Errorf("%s not ready (no %q in its log): %w", p.id, p.readyLine, ctx.Err())
	}
}

// running says whether the member's current run has started and not
// exited.
func (p *chaosProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !closedChan(p.exited)
}

func (p *chaosProc) crashes() []crash {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.crashed
	p.crashed = nil
	return out
}

func (p *chaosProc) close() {
	p.mu.Lock()
	p.closed = true
	if p.restart != nil {
		p.restart.Stop()
	}
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

// pgMember is PostgreSQL, run by pglocal on a fixed port and data dir.
type pgMember struct {
	dataDir string
	port    int
	log     *runLogs

	mu       sync.Mutex
	srv      *pglocal.Server
	out      *os.File // the current run's log
	stopping bool
	closed   bool
	watch    chan struct{} // closed to end the current run's exit watcher
	watched  sync.WaitGroup
	crashed  []crash
	runs     int
}

func (p *pgMember) name() string   { return "postgres" }
func (p *pgMember) logs() *runLogs { return p.log }

func (p *pgMember) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked(ctx)
}

func (p *pgMember) startLocked(ctx context.Context) error {
	if p.closed {
		return errors.New("start postgres: the stack is closed")
	}
	if p.srv != nil && !closedChan(p.srv.Exited()) {
		return errors.New("start postgres: already running")
	}
	p.release()
	f, run, err := p.log.next()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// Durable: with synchronous_commit off, a killed postgres forgets the
	// transactions it committed in its last fraction of a second, which
	// no deployment would accept.
	srv, err := pglocal.Start(ctx, pglocal.Config{DataDir: p.dataDir, Port: p.port, Logger: logger, Durable: true})
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	p.srv, p.out, p.stopping, p.runs = srv, f, false, run
	watch := make(chan struct{})
	p.watch = watch
	p.watched.Go(func() {
		select {
		case <-watch:
			return
		case <-srv.Exited():
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stopping || p.closed || p.srv != srv {
			return
		}
		p.crashed = append(p.crashed, crash{member: "postgres", run: run, at: time.Now(), exit: "exited on its own"})
		time.AfterFunc(restartDelay, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.closed || p.srv != srv {
				return
			}
			if err := p.startLocked(context.Background()); err != nil {
				p.crashed = append(p.crashed, crash{member: "postgres", run: run, at: time.Now(), exit: "restart failed: " + err.Error()})
			}
		})
	})
	return nil
}

// release waits for the exited server's output and closes its log.
func (p *pgMember) release() {
	if p.srv == nil {
		return
	}
	_ = p.srv.Stop(context.Background()) // drains the output of a server that exited
	if p.out != nil {
		_ = p.out.Close()
		p.out = nil
	}
}

// stop signals the postmaster (SIGKILL: the whole process group, as a
// container's death would).
func (p *pgMember) stop(sig syscall.Signal, grace time.Duration) (stopped, error) {
	p.mu.Lock()
	srv := p.srv
	if srv == nil || closedChan(srv.Exited()) {
		p.mu.Unlock()
		return stopped{}, fmt.Errorf("stop postgres: %w", errNotRunning)
	}
	p.stopping = true
	p.mu.Unlock()
	res := stopped{signal: sig, at: time.Now()}
	if sig == syscall.SIGKILL {
		srv.Kill()
	} else {
		if err := srv.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return res, err
		}
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-srv.Exited():
		case <-timer.C:
			res.escalated = true
			srv.Kill()
		}
	}
	res.exitedAt = time.Now()
	res.exit = "exited"
	if res.escalated || sig == syscall.SIGKILL {
		res.exit = "killed"
	}
	p.mu.Lock()
	p.release()
	p.mu.Unlock()
	return res, nil
}

func (p *pgMember) waitReady(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil || closedChan(p.srv.Exited()) {
		return fmt.Errorf("postgres: %w", errNotRunning)
	}
	return nil // pglocal.Start returns once it accepts connections
}

func (p *pgMember) crashes() []crash {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.crashed
	p.crashed = nil
	return out
}

func (p *pgMember) close() {
	p.mu.Lock()
	p.closed = true
	srv, watch := p.srv, p.watch
	p.mu.Unlock()
	if watch != nil {
		close(watch)
	}
	p.watched.Wait()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = srv.Stop(ctx)
		cancel()
	}
	p.mu.Lock()
	p.release()
	p.mu.Unlock()
}

func closedChan(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
