package console

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
)

// TestAnExecutionPageShowsItsHistory: an execution's page gives its
// history's length and size, and, past the warning threshold, the
// warning with its limits.
func TestAnExecutionPageShowsItsHistory(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	const id = "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b61"
	answers := map[string]any{
		"/api/harvest/executions/" + id: api.Execution{ExecutionID: id, WorkflowName: "order", WorkflowID: "o-1", Status: "Running", CreatedAt: at,
			HistoryLength: 12345, HistoryBytes: 6789012,
			HistoryWarning: &api.HistoryWarning{Message: "long", Events: 12345, Bytes: 6789012, WarnEvents: 10000, WarnBytes: 10485760,
				MaxEvents: 50000, MaxBytes: 52428800}},
		"/api/harvest/executions/" + id + "/history": api.HistoryResponse{Events: []api.Event{}},
	}
	c, err := New(Config{API: fakeAPI(answers)})
	require.NoError(t, err)
	status, body := get(t, c, "/ui/executions/"+id)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "12345 events, 6789012 bytes")
	require.Contains(t, body, `id="history-warning"`)
	require.Contains(t, body, "past the warning threshold of 10000 events or 10485760 bytes")
	require.Contains(t, body, "At more than 50000 events or 52428800 bytes the execution fails with HistoryLimitExceeded")

	delete(answers, "/api/harvest/executions/"+id)
	answers["/api/harvest/executions/"+id] = api.Execution{ExecutionID: id, WorkflowName: "order", WorkflowID: "o-1", Status: "Running", CreatedAt: at,
		HistoryLength: 3, HistoryBytes: 400}
	_, body = get(t, c, "/ui/executions/"+id)
	require.NotContains(t, body, `id="history-warning"`)
	require.Contains(t, body, "3 events, 400 bytes")
}
