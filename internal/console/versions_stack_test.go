package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestTheWorkflowsPageTellsWhichCodeRuns: the workflows page shows, for a
// workflow with open executions, how many each build ran last and how
// many recorded each version of a change, as the versions route counts
// them, its text escaped; a token limited to other workflows sees none of
// it.
func TestTheWorkflowsPageTellsWhichCodeRuns(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Token{
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeStart}},
		{Name: "billing-service", SHA256: auth.Hash("t-billing"), Scopes: []auth.Scope{auth.ScopeRead}, Workflows: []string{"charge"}},
	})
	require.NoError(t, err)
	// The build id and the change id hold characters that the page
	// escapes: '+' and '<', '>'.
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Auth: a},
		Worker: harvest.WorkerConfig{BuildID: "v2.0.0+build.7"}, Register: func(w *harvest.Worker) {
			harvest.RegisterWorkflow(w, "versioned", func(ctx *harvest.WorkflowContext, _ struct{}) (int, error) {
				v := harvest.GetVersion(ctx, "fraud-check<v2>", harvest.DefaultVersion, 2)
				return v, harvest.GetSignalChannel(ctx, "go").Receive(nil)
			})
		}})
	c, err := client.New(client.Config{BaseURL: s.URL(), Token: "t-reader"})
	require.NoError(t, err)
	ctx := t.Context()
	for range 2 {
		_, err := c.Start(ctx, "versioned", struct{}{}, client.StartOptions{})
		require.NoError(t, err)
	}
	probe.Until(t, 30*time.Second, "the two executions to record their version", func() bool {
		v, err := c.WorkflowVersions(ctx, "versioned")
		require.NoError(t, err)
		return v.Open == 2 && len(v.Changes) == 1 && len(v.Changes[0].Versions) == 1 && v.Changes[0].Versions[0].Open == 2
	})

	// A browser signed in with token: the workflows page as it shows.
	workflowsPage := func(token string) string {
		t.Helper()
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		hc := &http.Client{Jar: jar}
		resp, err := hc.PostForm(s.URL()+"/ui/login", url.Values{"token": {token}, "next": {"/ui/workflows"}})
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "/ui/workflows", resp.Request.URL.Path)
		return string(body)
	}

	body := workflowsPage("t-reader")
	i := strings.Index(body, `<table id="versions-versioned">`)
	require.GreaterOrEqual(t, i, 0, body)
	table := body[i:]
	table = table[:strings.Index(table, "</table>")]
	require.Contains(t, table, `versioned</a>: 2 open`)
	require.Contains(t, table, `<tr><td>build</td><td><code>v2.0.0&#43;build.7</code></td><td class="num">2</td></tr>`)
	require.Contains(t, table, `<tr><td>change <code>fraud-check&lt;v2&gt;</code></td><td>version 2</td><td class="num">2</td></tr>`)
	require.Contains(t, table, `<tr><td>change <code>fraud-check&lt;v2&gt;</code></td><td>unrecorded</td><td class="num">0</td></tr>`)
	require.NotContains(t, body, "fraud-check<v2>")

	// The limited token lists no versioned workflow, so no code of it.
	body = workflowsPage("t-billing")
	require.NotContains(t, body, "versions-versioned")
	require.NotContains(t, body, "fraud-check")
}
