package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
)

// TestWorkflowConcurrency: `harvest workflow start --start-policy` passes
// a concurrency policy through, and the start over its limit says it is
// Pending; `harvest workflow concurrency` counts the key's running and
// pending executions; `list --status Pending` finds the waiting one and
// `describe` says what it waits for. A --start-policy with a member the
// policy does not have is refused before anything is sent.
func TestWorkflowConcurrency(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	const policy = `{"concurrency": {"limit": 2, "key": "/customer"}}`
	start := func() (string, string) {
		t.Helper()
		out, _, err := runCLI(t, "workflow", "start", "tally", "--input", `{"every": 100, "until": 1, "customer": "c1"}`,
			"--start-policy", policy, "--addr", s.URL(), "--json")
		require.NoError(t, err)
		var a struct {
			ExecutionID string `json:"execution_id"`
			Status      string `json:"status"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &a), out)
		return a.ExecutionID, a.Status
	}
	_, first := start()
	_, second := start()
	pending, third := start()
	require.Equal(t, []string{"Running", "Running", "Pending"}, []string{first, second, third})

	out, _, err := runCLI(t, "workflow", "start", "tally", "--input", `{"every": 100, "until": 1, "customer": "c1"}`,
		"--start-policy", policy, "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, " fresh, Pending: it waits for a concurrency slot\n")

	out, _, err = runCLI(t, "workflow", "concurrency", "tally", "--key", "c1", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, []string{"WORKFLOW", "KEY", "RUNNING", "PENDING", "LIMIT"}, strings.Fields(strings.Split(out, "\n")[0]))
	require.Equal(t, []string{"tally", "c1", "2", "2", "2"}, strings.Fields(strings.Split(out, "\n")[1]))
	out, _, err = runCLI(t, "workflow", "concurrency", "tally", "--key", "c2", "--addr", s.URL(), "--json")
	require.NoError(t, err)
	require.JSONEq(t, `{"workflow": "tally", "key": "c2", "running": 0, "pending": 0, "limit": 0}`, out)

	out, _, err = runCLI(t, "workflow", "list", "--workflow", "tally", "--status", "Pending", "--addr", s.URL())
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Contains(t, out, pending)
	require.Contains(t, lines[1], "Pending (concurrency, key c1)")

	out, _, err = runCLI(t, "workflow", "describe", pending, "--addr", s.URL())
	require.NoError(t, err)
	require.Regexp(t, `\nstatus: +Pending\n`, out)
	require.Regexp(t, `\nwaiting_for: +concurrency\n`, out)
	require.Regexp(t, `\nconcurrency_key: +c1\n`, out)

	_, _, err = runCLI(t, "workflow", "start", "tally", "--start-policy", `{"concurency": {"limit": 2}}`, "--addr", s.URL())
	require.ErrorContains(t, err, `--start-policy: json: unknown field "concurency"`)
	_, _, err = runCLI(t, "workflow", "start", "tally", "--input", `{"every": 100}`, "--start-policy", policy, "--addr", s.URL())
	require.ErrorContains(t, err, "concurrency_key_missing")
}
