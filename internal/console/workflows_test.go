package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
)

// TestTheVersionsTablesShowEachBuildAndChange: a workflow with running
// executions gets a table of them by build ("(none yet)" for those that
// completed no workflow task) and by version of each change, unrecorded
// ones too; a workflow with none gets no table and costs no call; a
// refusal of the versions route is shown as the page's, with its status.
func TestTheVersionsTablesShowEachBuildAndChange(t *testing.T) {
	t.Parallel()
	summary := func(name string, running int64) api.WorkflowSummary {
		return api.WorkflowSummary{Name: name, Counts: map[string]int64{api.StatusRunning: running},
			InputSchema: json.RawMessage("null"), Admission: api.AdmissionGate{Workflow: name, State: "open"}}
	}
	answers := map[string]any{
		"/api/harvest/workflows": api.ListWorkflowsResponse{Workflows: []api.WorkflowSummary{summary("charge", 3), summary("idle", 0)}},
		"/api/harvest/workflows/charge/versions": api.WorkflowVersionsResponse{Workflow: "charge", Open: 3,
			Builds:  []api.BuildCount{{BuildID: "v1+b<2>", Open: 2}, {BuildID: "", Open: 1}},
			Changes: []api.ChangeVersions{{ChangeID: "fraud", Versions: []api.VersionCount{{Version: 1, Open: 1}, {Version: 2, Open: 1}}, Unrecorded: 1}}},
	}
	c, err := New(Config{API: fakeAPI(answers)})
	require.NoError(t, err)

	status, body := get(t, c, "/ui/workflows")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, "versions-idle")
	table := body[strings.Index(body, `<table id="versions-charge">`):]
	table = table[:strings.Index(table, "</table>")]
	require.Contains(t, table, `<a href="/ui/executions?workflow=charge&amp;status=Running">charge</a>: 3 open`)
	require.Contains(t, table, `<tr><td>build</td><td><code>v1&#43;b&lt;2&gt;</code></td><td class="num">2</td></tr>`)
	require.Contains(t, table, `<tr><td>build</td><td><small class="hint">(none yet)</small></td><td class="num">1</td></tr>`)
	require.Contains(t, table, `<tr><td>change <code>fraud</code></td><td>version 1</td><td class="num">1</td></tr>`)
	require.Contains(t, table, `<tr><td>change <code>fraud</code></td><td>version 2</td><td class="num">1</td></tr>`)
	require.Contains(t, table, `<tr><td>change <code>fraud</code></td><td>unrecorded</td><td class="num">1</td></tr>`)

	answers["/api/harvest/workflows/charge/versions"] = api.ErrorResponse{Error: api.CodeForbidden, Message: `token "billing" is limited to the workflows refund`}
	status, body = get(t, c, "/ui/workflows")
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, "token &#34;billing&#34; is limited to the workflows refund")

	delete(answers, "/api/harvest/workflows/charge/versions")
	status, body = get(t, c, "/ui/workflows")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, body, "no route")
}
