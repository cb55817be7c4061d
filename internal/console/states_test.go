package console

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
)

// TestAnExecutionPageShowsItsQueryStates: an execution's page lists its
// query states, each with its value (escaped), seq and time; one without
// states shows no such section, and one whose states cannot be read says
// so while the rest of the page stands.
func TestAnExecutionPageShowsItsQueryStates(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	const id = "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b62"
	answers := map[string]any{
		"/api/harvest/executions/" + id:              api.Execution{ExecutionID: id, WorkflowName: "tally", WorkflowID: "t-1", Status: "Running", CreatedAt: at},
		"/api/harvest/executions/" + id + "/history": api.HistoryResponse{Events: []api.Event{}},
		"/api/harvest/executions/" + id + "/state": api.ListStatesResponse{ExecutionID: id, Status: "Running", States: []api.State{
			{ExecutionID: id, Name: "progress", Value: json.RawMessage(`{"count": 2, "note": "<b>"}`), Seq: 17, UpdatedAt: at, Status: "Running"},
		}},
	}
	c, err := New(Config{API: fakeAPI(answers)})
	require.NoError(t, err)
	status, body := get(t, c, "/ui/executions/"+id)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `id="states"`)
	require.Contains(t, body, `<td class="mono">progress</td>`)
	require.Contains(t, body, `&#34;count&#34;:2`)
	require.Contains(t, body, `&lt;b&gt;`)
	require.Contains(t, body, `<td>17</td>`)

	answers["/api/harvest/executions/"+id+"/state"] = api.ListStatesResponse{ExecutionID: id, Status: "Running", States: []api.State{}}
	_, body = get(t, c, "/ui/executions/"+id)
	require.NotContains(t, body, `id="states"`)
	require.NotContains(t, body, `id="states-problem"`)

	answers["/api/harvest/executions/"+id+"/state"] = api.ErrorResponse{Error: api.CodeForbidden, Message: "no"}
	status, body = get(t, c, "/ui/executions/"+id)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `id="states-problem"`)
}
