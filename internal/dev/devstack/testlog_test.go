package devstack_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLog keeps the last lines a stack logged, and prints them when the
// test fails: a stack that stalls under a loaded run says why.
type testLog struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

const testLogLines = 400

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if len(l.lines) < testLogLines {
			l.lines = append(l.lines, line)
			continue
		}
		l.lines[l.next] = line
		l.next = (l.next + 1) % testLogLines
		l.full = true
	}
	return len(p), nil
}

func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	if l.full {
		b.WriteString("(earlier lines dropped)\n")
	}
	for i := range l.lines {
		b.WriteString(l.lines[(l.next+i)%len(l.lines)])
		b.WriteByte('\n')
	}
	return b.String()
}

// captureLog returns a logger whose lines t prints if it fails.
func captureLog(t *testing.T) *slog.Logger {
	l := &testLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the stack's log:\n%s", l)
		}
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
