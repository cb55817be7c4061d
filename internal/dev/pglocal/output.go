package pglocal

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
)

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
