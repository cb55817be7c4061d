package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScheduleRequestsAreTheRoutes: the schedule methods send their
// route's method and path, the id escaped as one path segment, their
// query and body, and read created from the status.
func TestScheduleRequestsAreTheRoutes(t *testing.T) {
	type sent struct{ method, path, query, body string }
	got := make(chan sent, 1)
	status, answer := http.StatusOK, `{}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- sent{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(body)}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL})
	require.NoError(t, err)
	ctx := context.Background()
	const path = "/api/harvest/schedules/a%2Fb%20c"

	status, answer = http.StatusCreated, `{"schedule_id": "a/b c"}`
	sc, created, err := c.PutSchedule(ctx, "a/b c", ScheduleRequest{Workflow: "w", Spec: ScheduleSpec{Every: "1m"}})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "a/b c", sc.ScheduleID)
	require.Equal(t, sent{"PUT", path, "", `{"workflow":"w","spec":{"every":"1m"}}`}, <-got)
	status = http.StatusOK
	_, created, err = c.PutSchedule(ctx, "a/b c", ScheduleRequest{Workflow: "w", Spec: ScheduleSpec{Every: "1m"}})
	require.NoError(t, err)
	require.False(t, created)
	<-got

	answer = `{"schedule_id": "a/b c", "action": "paused"}`
	for _, tc := range []struct {
		call func() (*ScheduleActionResponse, error)
		want sent
	}{
		{func() (*ScheduleActionResponse, error) { return c.PauseSchedule(ctx, "a/b c", "") }, sent{"POST", path + "/pause", "", ""}},
		{func() (*ScheduleActionResponse, error) { return c.PauseSchedule(ctx, "a/b c", "n") }, sent{"POST", path + "/pause", "", `{"note":"n"}`}},
		{func() (*ScheduleActionResponse, error) { return c.UnpauseSchedule(ctx, "a/b c", "") }, sent{"POST", path + "/unpause", "", ""}},
		{func() (*ScheduleActionResponse, error) { return c.TriggerSchedule(ctx, "a/b c") }, sent{"POST", path + "/trigger", "", ""}},
		{func() (*ScheduleActionResponse, error) { return c.DeleteSchedule(ctx, "a/b c") }, sent{"DELETE", path, "", ""}},
	} {
		r, err := tc.call()
		require.NoError(t, err)
		require.Equal(t, "a/b c", r.ScheduleID)
		require.Equal(t, tc.want, <-got)
	}

	answer = `{"fires": null}`
	fires, err := c.ScheduleFires(ctx, "a/b c", ListFiresOptions{Limit: 1, Cursor: "x y"})
	require.NoError(t, err)
	require.NotNil(t, fires.Fires, "an empty list, not nil")
	require.Equal(t, sent{"GET", path + "/fires", "cursor=x+y&limit=1", ""}, <-got)
	answer = `{"schedules": []}`
	_, err = c.ListSchedules(ctx, ListSchedulesOptions{})
	require.NoError(t, err)
	require.Equal(t, sent{"GET", "/api/harvest/schedules", "", ""}, <-got)

	_, err = c.TriggerSchedule(ctx, "")
	require.EqualError(t, err, "client: TriggerSchedule: schedule id is required")
}
