package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestWorkflowCancelAndTerminate: `harvest workflow cancel` and
// `harvest workflow terminate` close a running execution (collect waits
// for signals) with --reason, print what they did or, for a closed
// execution, how it had closed; --json prints the server's answer; an
// unknown execution is an error naming execution_not_found.
func TestWorkflowCancelAndTerminate(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	startCollect := func() string {
		t.Helper()
		out, _, err := runCLI(t, "workflow", "start", "collect", "--input", `{"count": 5}`, "--addr", s.URL(), "--json")
		require.NoError(t, err)
		var a struct {
			ExecutionID string `json:"execution_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &a), out)
		return a.ExecutionID
	}

	id := startCollect()
	out, _, err := runCLI(t, "workflow", "terminate", id, "--reason", "stuck on a bad deploy", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, "terminated execution "+id+" (workflow collect, workflow_id ", out[:len("terminated execution "+id+" (workflow collect, workflow_id ")])
	require.True(t, strings.HasSuffix(out, "): Terminated\n"), out)
	history, _, err := runCLI(t, "workflow", "history", id, "--addr", s.URL(), "--json")
	require.NoError(t, err)
	require.Contains(t, history, `"type": "WorkflowTerminated"`)
	require.Contains(t, history, `"reason": "stuck on a bad deploy"`)

	// Again, and cancelling it: nothing changes, and the answer says so.
	out, _, err = runCLI(t, "workflow", "terminate", id, "--addr", s.URL(), "--json")
	require.NoError(t, err)
	var a map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &a), out)
	require.Equal(t, "Terminated", a["status"])
	require.Equal(t, id, a["execution_id"])
	out, _, err = runCLI(t, "workflow", "cancel", id, "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, "had already closed: Terminated")

	other := startCollect()
	out, _, err = runCLI(t, "workflow", "cancel", other, "--reason", "customer left", "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, "cancel requested for execution "+other, "its code is told, and closes it")
	probe.Until(t, 30*time.Second, "the cancelled execution closed", func() bool {
		out, _, err = runCLI(t, "workflow", "describe", other, "--addr", s.URL())
		require.NoError(t, err)
		return strings.Contains(out, "Cancelled")
	})
	require.Contains(t, out, `customer left`)
	out, _, err = runCLI(t, "workflow", "terminate", other, "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, "had already closed: Cancelled")

	_, _, err = runCLI(t, "workflow", "terminate", "01a23712-0000-7000-8000-000000000000", "--addr", s.URL())
	require.ErrorContains(t, err, "execution_not_found")
	_, _, err = runCLI(t, "workflow", "cancel", "--addr", s.URL())
	require.Error(t, err, "an execution id is required")
}

// TestWorkflowStartTaskQueue: `harvest workflow start --task-queue`
// starts the execution on that queue, and describe shows it; without the
// flag the start goes to the workflow's configured queue. A queue the
// workflow is neither served nor declared on is an error naming
// unknown_workflow and the queue, and a name no task queue can have one
// naming invalid_task_queue.
func TestWorkflowStartTaskQueue(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Ingest: ingest.Config{
		DeclaredWorkflows: []string{"tq_declared"}, TaskQueues: map[string]string{"tq_declared": "mine"}}})
	startOn := func(args ...string) string {
		t.Helper()
		out, _, err := runCLI(t, append([]string{"workflow", "start", "tq_declared", "--addr", s.URL(), "--json"}, args...)...)
		require.NoError(t, err)
		var a struct {
			ExecutionID string `json:"execution_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &a), out)
		return a.ExecutionID
	}
	for _, id := range []string{startOn("--task-queue", "mine"), startOn()} {
		out, _, err := runCLI(t, "workflow", "describe", id, "--addr", s.URL())
		require.NoError(t, err)
		require.Regexp(t, `(?m)^task_queue: +mine$`, out)
	}

	_, _, err := runCLI(t, "workflow", "start", "tq_declared", "--task-queue", "other", "--addr", s.URL())
	require.ErrorContains(t, err, "unknown_workflow")
	require.ErrorContains(t, err, `on task queue "other"`)
	_, _, err = runCLI(t, "workflow", "start", "tq_declared", "--task-queue", "my queue", "--addr", s.URL())
	require.ErrorContains(t, err, "invalid_task_queue")
}

// TestWorkflowDescribeShowsTheHistory: `harvest workflow describe` gives
// the execution's history, its events and bytes, and the warning of one
// past the warning threshold; and what its code waits for, the signal
// "item" by name.
func TestWorkflowDescribeShowsTheHistory(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Scheduler: scheduler.Config{HistoryLimits: scheduler.HistoryLimits{WarnEvents: 2}}})
	out, _, err := runCLI(t, "workflow", "start", "collect", "--input", `{"count": 5}`, "--addr", s.URL(), "--json")
	require.NoError(t, err)
	var a struct {
		ExecutionID string `json:"execution_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &a), out)
	probe.Until(t, 30*time.Second, "the first workflow task to complete", func() bool {
		out, _, err = runCLI(t, "workflow", "describe", a.ExecutionID, "--addr", s.URL())
		require.NoError(t, err)
		return strings.Contains(out, "history_warning:")
	})
	require.Regexp(t, `\nhistory: +2 events, [0-9]+ bytes\n`, out)
	require.Contains(t, out, "past the warning threshold of 2 events or 10485760 bytes")
	require.Contains(t, out, "at more than 50000 events or 52428800 bytes the execution fails with HistoryLimitExceeded")
	require.Regexp(t, `\nwaiting_on: +workflow function: signal "item" \(as of event 2\)\n`, out)
}

// TestWorkflowState: `harvest workflow state <id> <name>` prints the
// query state tally sets as JSON, with the seq it reflects;
// --after-seq and --wait wait for the value a signal leads to; without a
// name it prints every state; an unknown state is an error naming
// state_not_found, and a bad --wait one naming invalid_wait.
func TestWorkflowState(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	out, _, err := runCLI(t, "workflow", "start", "tally", "--input", `{"every": 10}`, "--addr", s.URL(), "--json")
	require.NoError(t, err)
	var started struct {
		ExecutionID string `json:"execution_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &started), out)
	id := started.ExecutionID
	type state struct {
		ExecutionID string          `json:"execution_id"`
		Name        string          `json:"name"`
		Value       json.RawMessage `json:"value"`
		Seq         int             `json:"seq"`
		Status      string          `json:"status"`
	}
	var first state
	probe.Until(t, 30*time.Second, "tally to set its state", func() bool {
		out, _, err = runCLI(t, "workflow", "state", id, "progress", "--addr", s.URL())
		return err == nil
	})
	require.NoError(t, json.Unmarshal([]byte(out), &first), out)
	require.Equal(t, state{ExecutionID: id, Name: "progress", Value: first.Value, Seq: first.Seq, Status: "Running"}, first)
	require.JSONEq(t, `{"every": 10, "until": 0, "total": 0, "count": 0, "runs": 1}`, string(first.Value))

	_, _, err = runCLI(t, "workflow", "signal", id, "add", "--input", "4", "--addr", s.URL())
	require.NoError(t, err)
	out, _, err = runCLI(t, "workflow", "state", id, "progress", "--after-seq", strconv.Itoa(first.Seq), "--wait", "30s", "--addr", s.URL())
	require.NoError(t, err)
	var next state
	require.NoError(t, json.Unmarshal([]byte(out), &next), out)
	require.Greater(t, next.Seq, first.Seq)
	require.JSONEq(t, `{"every": 10, "until": 0, "total": 4, "count": 1, "runs": 1}`, string(next.Value))

	out, _, err = runCLI(t, "workflow", "state", id, "--addr", s.URL())
	require.NoError(t, err)
	var all struct {
		Status string  `json:"status"`
		States []state `json:"states"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &all), out)
	require.Equal(t, "Running", all.Status)
	require.Len(t, all.States, 1)
	require.Equal(t, next.Seq, all.States[0].Seq)
	require.JSONEq(t, string(next.Value), string(all.States[0].Value))

	// An update, answered by tally's handler; the same key again is the
	// same update; a refused one is an error with its code.
	out, _, err = runCLI(t, "workflow", "update", id, "add", "--input", "6", "--idempotency-key", "cli-1", "--addr", s.URL())
	require.NoError(t, err)
	var u struct {
		Status       string `json:"status"`
		UpdateID     string `json:"update_id"`
		Deduplicated bool   `json:"deduplicated"`
		Result       struct {
			Total int `json:"total"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &u), out)
	require.Equal(t, "completed", u.Status)
	require.Equal(t, 10, u.Result.Total)
	updateID := u.UpdateID
	out, _, err = runCLI(t, "workflow", "update", id, "add", "--input", "6", "--idempotency-key", "cli-1", "--addr", s.URL())
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &u), out)
	require.Equal(t, updateID, u.UpdateID)
	require.True(t, u.Deduplicated)
	_, _, err = runCLI(t, "workflow", "update", id, "add", "--input", "-1", "--addr", s.URL())
	require.ErrorContains(t, err, "update_rejected")

	_, _, err = runCLI(t, "workflow", "state", id, "nope", "--addr", s.URL())
	require.ErrorContains(t, err, "state_not_found")
	_, _, err = runCLI(t, "workflow", "state", id, "progress", "--wait", "2m", "--addr", s.URL())
	require.ErrorContains(t, err, "invalid_wait")
}
