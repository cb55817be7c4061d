package console_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestConsoleShowsAPendingExecution: an execution started over its
// concurrency start policy's limit shows Pending, with its own badge, and
// says on its page and in the executions list that it waits for a slot of
// its key; the status filter offers Pending and keeps only it; a Pending
// execution can be cancelled from its page.
func TestConsoleShowsAPendingExecution(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	c, ctx := stacktest.Client(t, s)
	opts := client.StartOptions{StartPolicy: &client.StartPolicy{Concurrency: &client.Concurrency{Limit: 1, Key: "/customer"}}}
	in := map[string]any{"every": 100, "until": 1, "customer": "c1"}
	running, err := c.Start(ctx, examples.WorkflowTally, in, opts)
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, running.Status)
	pending, err := c.Start(ctx, examples.WorkflowTally, in, opts)
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, pending.Status)

	page := uiPage(t, s, "/ui/executions/"+pending.ExecutionID)
	require.Contains(t, page, `<span class="status pending execution">Pending</span>`)
	require.Contains(t, page, `id="waiting-for-concurrency"`)
	require.Contains(t, page, "waits for a concurrency slot (key c1)")
	require.Contains(t, page, `href="/ui/executions/`+pending.ExecutionID+`/cancel"`, "a Pending execution is not closed")
	page = uiPage(t, s, "/ui/executions/"+running.ExecutionID)
	require.Contains(t, page, `<span class="status running execution">Running</span>`)
	require.NotContains(t, page, "waits for a concurrency slot")

	list := uiPage(t, s, "/ui/executions?"+url.Values{"workflow": {examples.WorkflowTally}, "status": {client.StatusPending}}.Encode())
	require.Contains(t, list, `<option value="Pending" selected>Pending</option>`)
	rows := list[strings.Index(list, "<tbody>"):strings.Index(list, "</tbody>")]
	require.Contains(t, rows, pending.ExecutionID)
	require.NotContains(t, rows, running.ExecutionID)
	require.Contains(t, rows, `<span class="status pending execution">Pending</span> <small class="waits-for">waits for a concurrency slot (key c1)</small>`)

	require.Contains(t, uiPage(t, s, "/ui/workflows"), `<th>Pending</th>`)
}
