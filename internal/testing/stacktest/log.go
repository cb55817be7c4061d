package stacktest

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// LogTail keeps the last lines written to it (a stack's log), to print
// when a test fails: a stack that stalls under a loaded run says why.
// Its zero value is ready; it is safe for concurrent use.
type LogTail struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

// tailLines is how many lines a LogTail keeps.
const tailLines = 400

// Write keeps p's lines, dropping the oldest past tailLines.
func (l *LogTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if len(l.lines) < tailLines {
			l.lines = append(l.lines, line)
			continue
		}
		l.lines[l.next] = line
		l.next = (l.next + 1) % tailLines
		l.full = true
	}
	return len(p), nil
}

// String is the lines kept, oldest first.
func (l *LogTail) String() string {
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

// Logger returns a logger (text, level info) whose last lines t prints if
// it fails. Start gives one to a stack whose Config has none.
func Logger(t testing.TB) *slog.Logger {
	l := &LogTail{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the stack's log:\n%s", l)
		}
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
