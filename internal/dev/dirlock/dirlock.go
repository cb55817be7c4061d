package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrLocked is wrapped by the error of Acquire when another process holds
// the lock.
var ErrLocked = errors.New("locked by another process")

// LockedError is Acquire's error when another process holds the lock.
type LockedError struct {
	// Path is the lock file.
	Path string
	// PID is the holder's process id, 0 when the file does not say.
	PID int
}

func (e *LockedError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("%s: %v", e.Path, ErrLocked)
	}
	return fmt.Sprintf("%s: %v (pid %d)", e.Path, ErrLocked, e.PID)
}

// Unwrap makes errors.Is(err, ErrLocked) hold.
func (e *LockedError) Unwrap() error { return ErrLocked }

// Lock is a held lock. Its methods are not safe for concurrent use.
type Lock struct {
	f *os.File
}

// Acquire takes the lock file name in dir (created if need be) without
// waiting, and writes our process id into it. When another process holds
// it the error is a *LockedError.
func Acquire(dir, name string) (*Lock, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644) //nolint:gosec // G302: it holds only a pid, for whoever finds the lock held
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	held, err := tryLock(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !held {
		_ = f.Close()
		return nil, &LockedError{Path: path, PID: readPID(path)}
	}
	pid := strconv.Itoa(os.Getpid()) + "\n"
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(pid), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: record our pid: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up and leaves the file, which says nothing once
// unlocked. Safe to call twice.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor releases the flock
	l.f = nil
	return err
}

// Stale says whether the lock file name in dir exists, is held by no
// process, and has not been written for at least age: what a process that
// ended without cleaning up leaves behind. A directory without the file
// is not stale: it may be older than this package, or still being set up.
func Stale(dir, name string, age time.Duration) bool {
	path := filepath.Join(dir, name)
	fi, err := os.Stat(path)
	if err != nil || time.Since(fi.ModTime()) < age {
		return false
	}
	l, err := Acquire(dir, name)
	if err != nil {
		return false
	}
	_ = l.Release()
	return true
}

// readPID reads the process id a lock file records, 0 when it holds none.
func readPID(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0
	}
	return pid
}
