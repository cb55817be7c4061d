package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// devLog collects harvest dev's output and notices when it is ready.
type devLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	ready chan struct{}
}

func (l *devLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if strings.Contains(l.buf.String(), "harvest dev ready") {
		l.once.Do(func() { close(l.ready) })
	}
	return len(p), nil
}

func (l *devLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// cliResult is one run of the harvest CLI.
type cliResult struct {
	stdout, stderr string
	err            error
}

// TestWorkflowCLI drives `harvest workflow` against one `harvest dev`:
// keyed starts and signals and their retries, describe, history, list,
// --json, and a refused call.
func TestWorkflowCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs harvest dev")
	}
	bin := buildHarvest(t)
	addr := freeAddr(t)
	dev := exec.Command(bin, "dev", "--addr", addr, "--state-dir", filepath.Join(t.TempDir(), "state"))
	dev.Env = devEnv()
	logs := &devLog{ready: make(chan struct{})}
	dev.Stdout, dev.Stderr = logs, logs
	require.NoError(t, dev.Start())
	t.Cleanup(func() {
		if dev.ProcessState == nil {
			_ = dev.Process.Kill()
			_ = dev.Wait()
		}
	})
	select {
	case <-logs.ready:
	case <-time.After(60 * time.Second):
		t.Fatalf("harvest dev did not log ready within 60s; logs:\n%s", logs)
	}

	harvest := func(args ...string) cliResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(append([]string{"workflow"}, args...), "--addr", "http://"+addr)...)
		cmd.Env = devEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return cliResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
	}
	ok := func(args ...string) string {
		t.Helper()
		r := harvest(args...)
		require.NoError(t, r.err, "harvest workflow %v: stderr: %s", args, r.stderr)
		require.Empty(t, r.stderr)
		return r.stdout
	}
	fails := func(want string, args ...string) {
		t.Helper()
		r := harvest(args...)
		var exit *exec.ExitError
		require.ErrorAs(t, r.err, &exit, "harvest workflow %v must fail; stdout: %s", args, r.stdout)
		require.Equal(t, 1, exit.ExitCode())
		require.Empty(t, r.stdout)
		require.True(t, strings.HasPrefix(r.stderr, "harvest: "), r.stderr)
		require.Contains(t, r.stderr, want)
	}

	// A keyed start, then its retry.
	startLine := regexp.MustCompile(`^started execution (\S+) \(workflow collect, workflow_id (\S+)\) (fresh|deduplicated|existing)\n$`)
	out := ok("start", "collect", "--input", `{"count": 1}`, "--idempotency-key", "cli-evt-1")
	m := startLine.FindStringSubmatch(out)
	require.NotNil(t, m, "start prints: %q", out)
	id, workflowID := m[1], m[2]
	require.Equal(t, "fresh", m[3])
	m = startLine.FindStringSubmatch(ok("start", "collect", "--input", `{"count": 1}`, "--idempotency-key", "cli-evt-1"))
	require.NotNil(t, m)
	require.Equal(t, []string{id, workflowID, "deduplicated"}, m[1:])

	// --json prints the server's answer.
	var started map[string]any
	require.NoError(t, json.Unmarshal([]byte(ok("start", "collect", "--json", "--input", `{"count": 1}`, "--idempotency-key", "cli-evt-1")), &started))
	require.Equal(t, id, started["execution_id"])
	require.Equal(t, "collect", started["workflow_name"])
	require.Equal(t, true, started["deduplicated"])
	require.Equal(t, false, started["started_fresh"])
	require.NotEmpty(t, started["first_seen_at"])

	// An unkeyed start on a workflow_id of our own.
	m = startLine.FindStringSubmatch(ok("start", "collect", "--input", `{"count": 5}`, "--workflow-id", "cli-order-1"))
	require.NotNil(t, m)
	require.Equal(t, "cli-order-1", m[2])
	require.Equal(t, "fresh", m[3])
	m = startLine.FindStringSubmatch(ok("start", "collect", "--input", `{"count": 5}`, "--workflow-id", "cli-order-1"))
	require.NotNil(t, m)
	require.Equal(t, "existing", m[3])

	// A keyed signal, then its retry; it completes the execution.
	require.Equal(t, "signal delivered\n", ok("signal", id, "item", "--input", `{"n": 1}`, "--idempotency-key", "cli-sig-1"))
	require.Equal(t, "signal already delivered (deduplicated)\n", ok("signal", id, "item", "--input", `{"n": 1}`, "--idempotency-key", "cli-sig-1"))
	var sent map[string]any
	require.NoError(t, json.Unmarshal([]byte(ok("signal", id, "item", "--json", "--input", `{"n": 1}`, "--idempotency-key", "cli-sig-1")), &sent))
	require.Equal(t, map[string]any{"ok": true, "signal_delivered": false}, sent)

	var described map[string]any
	deadline := time.Now().Add(60 * time.Second)
	for tick := time.NewTicker(50 * time.Millisecond); ; <-tick.C {
		described = nil
		require.NoError(t, json.Unmarshal([]byte(ok("describe", id, "--json")), &described))
		if described["status"] == "Completed" {
			tick.Stop()
			break
		}
		require.True(t, time.Now().Before(deadline), "execution %s did not complete within 60s: %v", id, described)
	}
	require.Equal(t, map[string]any{"items": []any{map[string]any{"n": 1.0}}}, described["result"])
	require.Equal(t, workflowID, described["workflow_id"])

	// describe for people: aligned "key: value" lines.
	desc := ok("describe", id)
	lines := strings.Split(strings.TrimSuffix(desc, "\n"), "\n")
	require.Len(t, lines, 16, desc)
	col := -1
	values := map[string]string{}
	for _, line := range lines {
		key, rest, found := strings.Cut(line, ":")
		require.True(t, found, line)
		value := strings.TrimLeft(rest, " ")
		at := len(line) - len(value)
		if col < 0 {
			col = at
		}
		require.Equal(t, col, at, "values are aligned:\n%s", desc)
		values[key] = value
	}
	require.Equal(t, id, values["execution_id"])
	require.Equal(t, "collect", values["workflow_name"])
	require.Equal(t, "Completed", values["status"])
	require.Equal(t, "default", values["task_queue"])
	require.Equal(t, "3", values["priority"])
	require.Equal(t, `{"count":1}`, values["input"])
	require.Equal(t, `{"items":[{"n":1}]}`, values["result"])
	require.Equal(t, "-", values["error"])
	require.NotEqual(t, "-", values["closed_at"])
	require.Regexp(t, `^5 events, \d+ bytes$`, values["history"])
	require.Equal(t, "cli-evt-1", values["idempotency_key"])
	require.Regexp(t, `^first seen \S+, until \S+; duplicates: \d+ replayed, \d+ by the broker, \d+ by the claim$`, values["claim"])
	require.Regexp(t, `^cli-sig-1, received \S+, \d+ duplicate\(s\) dropped$`, values["signal_key"])

	// history: a table, and the server's JSON.
	hist := strings.Split(strings.TrimSuffix(ok("history", id), "\n"), "\n")
	require.Regexp(t, `^SEQ\s+TYPE\s+AT\s+DETAILS$`, hist[0])
	var types []string
	for i, line := range hist[1:] {
		f := strings.Fields(line)
		require.Equal(t, strconv.Itoa(i+1), f[0], line)
		_, err := time.Parse(time.RFC3339Nano, f[2])
		require.NoError(t, err, line)
		types = append(types, f[1])
	}
	// Whether the signal came before the first workflow task completed
	// depends on timing: the workflow's own events do not.
	require.Equal(t, []string{"WorkflowStarted", "SignalReceived", "WorkflowCompleted"},
		slices.DeleteFunc(slices.Clone(types), func(typ string) bool { return typ == "WorkflowTaskCompleted" }))
	require.Contains(t, types, "WorkflowTaskCompleted")
	var events struct {
		Events []map[string]any `json:"events"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok("history", id, "--json")), &events))
	require.Len(t, events.Events, len(types))
	for i, e := range events.Events {
		require.Equal(t, types[i], e["type"])
		require.EqualValues(t, i+1, e["seq"])
	}

	// list: a table, filtered, and the server's JSON.
	list := ok("list", "--workflow", "collect")
	require.Regexp(t, `^EXECUTION_ID\s+WORKFLOW\s+WORKFLOW_ID\s+STATUS\s+CREATED_AT\n`, list)
	require.Regexp(t, regexp.QuoteMeta(id)+`\s+collect\s+`+regexp.QuoteMeta(workflowID)+`\s+Completed\s+`, list)
	require.Regexp(t, `\s+collect\s+cli-order-1\s+Running\s+`, list)
	require.Len(t, strings.Split(strings.TrimSuffix(list, "\n"), "\n"), 3)
	var listed struct {
		Executions []map[string]any `json:"executions"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok("list", "--json", "--status", "Completed")), &listed))
	require.Len(t, listed.Executions, 1)
	require.Equal(t, id, listed.Executions[0]["execution_id"])

	// Refusals exit 1 with the server's message.
	const unknown = "01a23712-0000-7000-8000-000000000000"
	fails(`execution_not_found: no execution "`+unknown+`"`, "describe", unknown)
	fails("execution_not_found", "history", unknown)
	fails("execution_not_found", "signal", unknown, "item", "--input", "1")
	fails("execution_terminal", "signal", id, "item", "--input", "1", "--idempotency-key", "cli-sig-2")
	fails("invalid_status", "list", "--status", "Sleeping")
	fails("input_invalid", "start", "collect", "--input", `{"count": -1}`)
	fails("--input is not JSON", "start", "collect", "--input", `{"count":`)

	require.NoError(t, dev.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- dev.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "harvest dev exits cleanly on SIGTERM; logs:\n%s", logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("harvest dev did not stop within 30s of SIGTERM")
	}
}
