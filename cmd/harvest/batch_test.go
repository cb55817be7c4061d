package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestBatchCommands: `harvest batch start --wait` runs a batch to its
// end and prints it; list, describe and cancel show it; a batch with no
// filter condition is refused with the API's code.
func TestBatchCommands(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	for i := range 2 {
		_, _, err := runCLI(t, "workflow", "start", "collect", "--workflow-id", fmt.Sprintf("cli-batch-%d", i), "--input", `{"count": 1}`, "--addr", s.URL())
		require.NoError(t, err)
	}
	out, _, err := runCLI(t, "batch", "start", "signal", "--workflow", "collect", "--workflow-id-prefix", "cli-batch-",
		"--signal", "item", "--payload", `{"n": 1}`, "--wait", "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, ": signal of workflow=collect workflow_id_prefix=cli-batch-, completed\n")
	require.Contains(t, out, "  2 matched, 2 done, 0 failed, at 50 a second")
	id := strings.Fields(strings.TrimPrefix(out, "batch "))[0]
	id = strings.TrimSuffix(id, ":")

	out, _, err = runCLI(t, "batch", "list", "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, id)
	out, _, err = runCLI(t, "batch", "describe", id, "--addr", s.URL(), "--json")
	require.NoError(t, err)
	var b map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &b), out)
	require.Equal(t, "completed", b["state"])
	require.Equal(t, float64(2), b["done"])
	out, _, err = runCLI(t, "batch", "cancel", id, "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, "completed", "cancelling a finished batch changes nothing")

	_, _, err = runCLI(t, "batch", "start", "terminate", "--addr", s.URL())
	require.ErrorContains(t, err, "invalid_filter")
	_, _, err = runCLI(t, "batch", "describe", "6f1c7d7e-1111-4222-8333-944444444444", "--addr", s.URL())
	require.ErrorContains(t, err, "batch_not_found")
}

// TestWorkflowListPagesAndCount: `harvest workflow list` pages with
// --limit and --cursor, reads every page with --all, keeps next_cursor
// with --json, and takes every filter the API has, search attributes
// included; `harvest workflow count` counts what they match.
func TestWorkflowListPagesAndCount(t *testing.T) {
	t.Parallel()
	schema := searchattr.Schema{"collect": {"customer_id": "keyword"}}
	s := startStack(t, devstack.Config{Ingest: ingest.Config{SearchAttributes: schema}, Scheduler: scheduler.Config{SearchAttributes: schema}})
	for i := range 2 {
		r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/collect/start", nil,
			fmt.Sprintf(`{"workflow_id": "cli-list-%d", "input": {"count": 1}, "search_attributes": {"customer_id": "c_%d"}}`, i, i%2))
		require.Equal(t, 201, r.Status, r.Body)
	}
	// The third by the CLI, which sets search attributes too.
	_, _, err := runCLI(t, "workflow", "start", "collect", "--workflow-id", "cli-list-2", "--input", `{"count": 1}`,
		"--search-attribute", "customer_id=c_0", "--addr", s.URL())
	require.NoError(t, err)
	_, _, err = runCLI(t, "workflow", "start", "collect", "--search-attribute", "region=eu", "--addr", s.URL())
	require.ErrorContains(t, err, "invalid_search_attribute")
	_, _, err = runCLI(t, "workflow", "start", "collect", "--search-attribute", "customer_id", "--addr", s.URL())
	require.ErrorContains(t, err, "want NAME=VALUE")
	out, _, err := runCLI(t, "workflow", "list", "--workflow", "collect", "--limit", "2", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(out, "cli-list-"), out)
	require.Contains(t, out, "--cursor ")
	out, _, err = runCLI(t, "workflow", "list", "--workflow", "collect", "--limit", "2", "--addr", s.URL(), "--json")
	require.NoError(t, err)
	var page struct {
		Executions []map[string]any `json:"executions"`
		NextCursor string           `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Executions, 2)
	require.NotEmpty(t, page.NextCursor)
	out, _, err = runCLI(t, "workflow", "list", "--workflow", "collect", "--limit", "2", "--cursor", page.NextCursor, "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(out, "cli-list-"), out)
	require.Contains(t, out, "cli-list-0")
	out, _, err = runCLI(t, "workflow", "list", "--workflow", "collect", "--limit", "2", "--all", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(out, "cli-list-"), out)
	out, _, err = runCLI(t, "workflow", "list", "--attr", "customer_id=c_0", "--workflow-id-prefix", "cli-list-", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(out, "cli-list-"), out)
	out, _, err = runCLI(t, "workflow", "count", "--attr", "customer_id=c_0", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, "2\n", out)
	out, _, err = runCLI(t, "workflow", "count", "--workflow", "collect", "--addr", s.URL(), "--json")
	require.NoError(t, err)
	require.JSONEq(t, `{"count": 3}`, out)
	_, _, err = runCLI(t, "workflow", "count", "--attr", "region=eu", "--addr", s.URL())
	require.ErrorContains(t, err, "invalid_search_attribute")
	_, _, err = runCLI(t, "workflow", "list", "--created-after", "yesterday", "--addr", s.URL())
	require.ErrorContains(t, err, "--created-after")
	_, _, err = runCLI(t, "workflow", "signal-with-start", "collect", "item", "--workflow-id", "cli-list-sws", "--input", `{"count": 2}`,
		"--search-attribute", `customer_id="c_5"`, "--addr", s.URL())
	require.NoError(t, err)
	out, _, err = runCLI(t, "workflow", "count", "--attr", "customer_id=c_5", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, "1\n", out)
}

// TestAdmissionPrintsForPeopleAndJSON: `harvest admission` prints a line
// or a table, and the API's answer with --json.
func TestAdmissionPrintsForPeopleAndJSON(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	out, _, err := runCLI(t, "admission", "close", "onboarding", "--reason", "maintenance", "--addr", s.URL())
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "workflow onboarding: gate closed (maintenance), since "), out)
	out, _, err = runCLI(t, "admission", "list", "--addr", s.URL())
	require.NoError(t, err)
	require.Contains(t, out, "WORKFLOW")
	require.Contains(t, out, "maintenance")
	out, _, err = runCLI(t, "admission", "list", "--addr", s.URL(), "--json")
	require.NoError(t, err)
	var l struct {
		Closed []map[string]any `json:"closed"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	require.Len(t, l.Closed, 1)
	out, _, err = runCLI(t, "admission", "open", "onboarding", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, "workflow onboarding: gate open\n", out)
	out, _, err = runCLI(t, "admission", "list", "--addr", s.URL())
	require.NoError(t, err)
	require.Equal(t, "every workflow's gate is open\n", out)
}
