package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestWorkflowReset: `harvest workflow reset --dry-run` prints the plan
// and changes nothing; the reset prints the new run, and the old one
// closes Terminated naming it; a --to that names no point is refused
// before anything is sent, and one the history has no such point for
// names the API's code and the valid points.
func TestWorkflowReset(t *testing.T) {
	s := startStack(t, devstack.Config{})
	out, _, err := runCLI(t, "workflow", "start", "collect", "--input", `{"count": 5}`, "--addr", s.URL(), "--json")
	require.NoError(t, err)
	var started struct {
		ExecutionID string `json:"execution_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &started), out)
	id := started.ExecutionID
	probe.Until(t, 30*time.Second, "the first workflow task", func() bool {
		return len(stacktest.HistoryTypes(t, s, id)) >= 2
	})
	_, _, err = runCLI(t, "workflow", "signal", id, "item", "--input", `{"n": 1}`, "--idempotency-key", "item-a", "--addr", s.URL())
	require.NoError(t, err)

	out, _, err = runCLI(t, "workflow", "reset", id, "--to", "first_task", "--dry-run", "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, "reset of execution "+id+" to workflow task 1 (event 2): events 1 to 1 kept")
	require.Contains(t, out, "signals received again: \n  event ")
	require.Contains(t, out, " item  key item-a\n")
	require.Contains(t, out, "valid points (seq:N): 2")

	_, _, err = runCLI(t, "workflow", "reset", id, "--to", "middle", "--addr", s.URL())
	require.ErrorContains(t, err, `--to "middle"`)
	_, _, err = runCLI(t, "workflow", "reset", id, "--to", "seq:1", "--addr", s.URL())
	require.ErrorContains(t, err, "invalid_reset_point")

	out, _, err = runCLI(t, "workflow", "reset", id, "--to", "first_task", "--reason", "bad deploy", "--addr", s.URL())
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "reset execution "+id+" to event 2: new run "), out)
	out, _, err = runCLI(t, "workflow", "describe", id, "--addr", s.URL(), "--json")
	require.NoError(t, err)
	var old map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &old))
	require.Equal(t, "Terminated", old["status"])
	require.NotEmpty(t, old["reset_to"])
}
