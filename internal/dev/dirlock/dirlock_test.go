package dirlock_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/dirlock"
)

// helperEnv, when set, makes the test binary a process that takes the
// lock in the directory it names, says so, and holds it until killed.
const helperEnv = "DIRLOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		if _, err := dirlock.Acquire(dir, "lock"); err != nil {
			_, _ = os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		_, _ = os.Stdout.WriteString("locked\n")
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func TestOneHolderAtATime(t *testing.T) {
	dir := t.TempDir()
	l, err := dirlock.Acquire(dir, "lock")
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(dir, "lock"))
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(data)), itoa(os.Getpid()), "the file records the holder")

	_, err = dirlock.Acquire(dir, "lock")
	require.ErrorIs(t, err, dirlock.ErrLocked, "a second Acquire, even in the same process, waits its turn")
	var locked *dirlock.LockedError
	require.ErrorAs(t, err, &locked)
	require.Equal(t, os.Getpid(), locked.PID)
	require.False(t, dirlock.Stale(dir, "lock", 0), "a held lock is not stale")

	require.NoError(t, l.Release())
	require.NoError(t, l.Release(), "twice")
	l, err = dirlock.Acquire(dir, "lock")
	require.NoError(t, err)
	require.NoError(t, l.Release())
}

// TestAKilledHolderLeavesNoLock: the kernel releases the lock of a
// process that is SIGKILLed; its file is stale then.
func TestAKilledHolderLeavesNoLock(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	dir := t.TempDir()
	require.False(t, dirlock.Stale(dir, "lock", 0), "no file, nothing stale")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)

	_, err = dirlock.Acquire(dir, "lock")
	var locked *dirlock.LockedError
	require.ErrorAs(t, err, &locked)
	require.Equal(t, cmd.Process.Pid, locked.PID)
	require.Contains(t, err.Error(), "locked by another process (pid "+itoa(cmd.Process.Pid)+")")
	require.False(t, dirlock.Stale(dir, "lock", 0))

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.False(t, dirlock.Stale(dir, "lock", time.Hour), "written too recently")
	require.True(t, dirlock.Stale(dir, "lock", 0))
	l, err := dirlock.Acquire(dir, "lock")
	require.NoError(t, err)
	require.NoError(t, l.Release())
}

func itoa(n int) string { return strconv.Itoa(n) }
