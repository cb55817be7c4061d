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
	t.Parallel()
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

// TestWorkflowStartWaitSignalWithStartShowFollowAndDescribe: `start
// --wait` prints the result; `signal-with-start` starts once and
// delivers a key once; `show --follow` prints the events as they come
// and returns when the execution closes; describe prints the key, its
// claim and the signal keys.
func TestWorkflowStartWaitSignalWithStartShowFollowAndDescribe(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	out, _, err := runCLI(t, "workflow", "start", "collect", "--input", `{"count": 0}`, "--wait", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, "{\"items\":[]}\n", out)

	args := []string{"workflow", "signal-with-start", "collect", "item", "--workflow-id", "cli-sws", "--input", `{"count": 2}`,
		"--payload", `{"sku": "a"}`, "--idempotency-key", "sws-1", "--addr", s.URL()}
	out, _, err = runCLI(t, args...)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "signal delivered to a new execution "), out)
	id := strings.Fields(out)[6]
	out, _, err = runCLI(t, args...)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "signal already delivered (deduplicated) to the running execution "+id), out)

	out, _, err = runCLI(t, "workflow", "describe", id, "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, "signal_key:")
	require.Contains(t, out, "sws-1, received ")

	followed := make(chan string, 1)
	go func() {
		out, _, err := runCLI(t, "workflow", "show", id, "--follow", "--timeout", "1m", "--addr", s.URL())
		if err != nil {
			out = "error: " + err.Error()
		}
		followed <- out
	}()
	probe.Until(t, 30*time.Second, "the first signal's task", func() bool {
		return len(stacktest.HistoryTypes(t, s, id)) >= 3
	})
	r := stacktest.Signal(t, s, id, "item", "sws-2", "", `{"sku": "b"}`)
	require.Equal(t, true, r.Body["signal_delivered"], r.Body)
	select {
	case out = <-followed:
	case <-time.After(time.Minute):
		t.Fatal("show --follow did not return once the execution closed")
	}
	require.Contains(t, out, "SEQ  TYPE")
	require.Contains(t, out, "WorkflowCompleted")
	require.Equal(t, 2, strings.Count(out, "SignalReceived"), out)
}
