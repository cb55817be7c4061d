package console

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
)

// TestAnExecutionPageShowsItsTaskFailing: an execution whose workflow
// task fails on its worker says so on its page, with the reason, the
// failures in a row, the build and the message, escaped.
func TestAnExecutionPageShowsItsTaskFailing(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	const id = "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b60"
	answers := map[string]any{
		"/api/harvest/executions/" + id: api.Execution{ExecutionID: id, WorkflowName: "order", WorkflowID: "o-1", Status: "Running", CreatedAt: at,
			TaskFailing: &api.TaskFailing{Reason: "nondeterminism", Message: "the history has <ActivityScheduled>", BuildID: "v2+abc~1234abcd",
				TaskID: 4, Attempts: 3, Since: at, NextAttemptAt: at.Add(4 * time.Second)}},
		"/api/harvest/executions/" + id + "/history": api.HistoryResponse{Events: []api.Event{}},
	}
	c, err := New(Config{API: fakeAPI(answers)})
	require.NoError(t, err)
	status, body := get(t, c, "/ui/executions/"+id)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `id="task-failing"`)
	require.Contains(t, body, "(nondeterminism)")
	require.Contains(t, body, "3 in a row")
	require.Contains(t, body, "v2&#43;abc~1234abcd")
	require.Contains(t, body, "the history has &lt;ActivityScheduled&gt;")

	delete(answers, "/api/harvest/executions/"+id)
	answers["/api/harvest/executions/"+id] = api.Execution{ExecutionID: id, WorkflowName: "order", WorkflowID: "o-1", Status: "Running", CreatedAt: at}
	_, body = get(t, c, "/ui/executions/"+id)
	require.NotContains(t, body, `id="task-failing"`)
}
