package console

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
)

// resetAPI is an API of one execution whose last task is no reset point:
// its dry runs answer by the point, its reset by answer.
type resetAPI struct {
	id     string
	answer func(w http.ResponseWriter)
	mu     sync.Mutex
	resets []api.ResetRequest // the bodies of the resets (not dry runs)
}

func (f *resetAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	path := "/api/harvest/executions/" + f.id
	switch {
	case r.Method == http.MethodGet && r.URL.Path == path:
		reply(http.StatusOK, api.Execution{ExecutionID: f.id, WorkflowName: "order", WorkflowID: "o-1", Status: api.StatusFailed, CreatedAt: at})
	case r.Method == http.MethodGet && r.URL.Path == path+"/history":
		reply(http.StatusOK, json.RawMessage(`{"events": [
			{"seq": 1, "type": "WorkflowStarted", "at": "2026-12-07T09:00:00Z"},
			{"seq": 2, "type": "WorkflowTaskCompleted", "at": "2026-12-07T09:00:00Z", "task_id": 1, "base_seq": 1},
			{"seq": 3, "type": "ActivityScheduled", "at": "2026-12-07T09:00:00Z", "activity_id": 1, "activity_name": "charge<card>", "idempotency_key": "k1"},
			{"seq": 4, "type": "ActivityFailed", "at": "2026-12-07T09:00:00Z", "activity_id": 1},
			{"seq": 5, "type": "WorkflowTaskCompleted", "at": "2026-12-07T09:00:00Z", "task_id": 2, "base_seq": 4},
			{"seq": 6, "type": "ActivityScheduled", "at": "2026-12-07T09:00:00Z", "activity_id": 2, "activity_name": "charge<card>", "idempotency_key": "k2"},
			{"seq": 7, "type": "ChildWorkflowInitiated", "at": "2026-12-07T09:00:00Z"},
			{"seq": 8, "type": "WorkflowTaskCompleted", "at": "2026-12-07T09:00:00Z", "task_id": 3, "base_seq": 7}]}`))
	case r.Method == http.MethodPost && r.URL.Path == path+"/reset":
		if r.Header.Get("Authorization") == "Bearer t-reader" {
			reply(http.StatusForbidden, api.ErrorResponse{Error: api.CodeForbidden, Message: `token "reader" lacks scope cancel`})
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var req api.ResetRequest
		_ = json.Unmarshal(raw, &req)
		if r.URL.Query().Get("dry_run") != "true" {
			f.mu.Lock()
			f.resets = append(f.resets, req)
			f.mu.Unlock()
			f.answer(w)
			return
		}
		switch string(req.To) {
		case `"last_task"`, `{"seq":8}`, `{"seq":7}`:
			reply(http.StatusUnprocessableEntity, api.ErrorResponse{Error: api.CodeInvalidResetPoint, Field: "to",
				Message: "execution cannot be reset to it: a child workflow was started after it", NearestPoints: []int{5}})
		default:
			plan := api.ResetPlan{DryRun: true, ExecutionID: f.id, PointSeq: 5, TaskID: 2, EventsKept: 4, EventsDropped: 4,
				ActivitiesPending: []api.ResetActivity{}, ActivitiesRerun: []api.ResetActivity{{ActivityID: 2, ActivityName: "charge<card>", IdempotencyKey: "k2"}},
				TimersPending: []api.ResetTimer{}, SignalsReapplied: []api.ResetSignal{}, ValidPoints: []int{2, 5}}
			reply(http.StatusOK, plan)
		}
	default:
		reply(http.StatusNotFound, api.ErrorResponse{Error: api.CodeNotFound, Message: "no route"})
	}
}

func postForm(t *testing.T, c *Console, path string, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	return rec
}

// TestTheResetFormOffersTheHistorysPoints: the form names the history's
// activities once each, escaped, and finds the valid points through the
// dry run of the valid point nearest to the last task when the last task
// is none; a plan asked for without a seq says what the form lacks; the
// plan's Confirm posts the plan's point by its seq, with the reason and
// the box as they were.
func TestTheResetFormOffersTheHistorysPoints(t *testing.T) {
	t.Parallel()
	const id = "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b61"
	f := &resetAPI{id: id}
	c, err := New(Config{API: f})
	require.NoError(t, err)
	status, body := get(t, c, "/ui/executions/"+id+"/reset")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, 1, strings.Count(body, "<option>charge&lt;card&gt;</option>"), "each activity once, as text")
	require.Contains(t, body, "event 2 (workflow task 1)")
	require.Contains(t, body, "event 5 (workflow task 2)")
	require.NotContains(t, body, "event 8 (")
	require.Contains(t, body, `value="last_task" checked`)

	status, body = get(t, c, "/ui/executions/"+id+"/reset?to=seq&seq=&plan=1")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "The form is not complete:")

	// A refused point: the nearest, each a link to its plan, the form as
	// it was (the box unchecked stays so).
	status, body = get(t, c, "/ui/executions/"+id+"/reset?to=seq&seq=7&reason=outage&plan=1")
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Contains(t, body, "422 invalid_reset_point")
	require.Contains(t, body, `id="nearest-points"`)
	require.Contains(t, body, `href="/ui/executions/`+id+`/reset?plan=1&amp;reapply_signals=false&amp;reason=outage&amp;seq=5&amp;to=seq"`)
	require.NotContains(t, body, `name="reapply_signals" value="true" checked`)

	status, body = get(t, c, "/ui/executions/"+id+"/reset?to=activity&activity=charge%3Ccard%3E&occurrence=last_failed&reason=outage&reapply_signals=true&plan=1")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "workflow task 2, recorded at event 5")
	require.Contains(t, body, `<input type="hidden" name="seq" value="5">`)
	require.Contains(t, body, `<input type="hidden" name="reason" value="outage">`)
	require.Contains(t, body, `<input type="hidden" name="reapply_signals" value="true">`)
	require.Contains(t, body, "keeps how it closed (Failed)")
	require.Contains(t, body, ">k2<")
}

// TestResetAnswersLeadToTheirRun: Confirm goes to the new run (marked
// when the same reset was applied before), or back to the run while its
// outcome is not known (202); a Confirm from another site is refused;
// a token without the cancel scope is shown the API's refusal.
func TestResetAnswersLeadToTheirRun(t *testing.T) {
	t.Parallel()
	const id, newID = "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b61", "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b62"
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(api.ResetResponse{ExecutionID: newID, ResetFrom: id, PointSeq: 5, WorkflowName: "order"})
		},
		func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(api.ResetResponse{ExecutionID: newID, ResetFrom: id, PointSeq: 5, Deduplicated: true})
		},
		func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(api.AcceptedResponse{CommandID: "reset-1", Status: "accepted"})
		},
	}
	for i, want := range []string{"/ui/executions/" + newID + "?done=reset", "/ui/executions/" + newID + "?done=reset-again", "/ui/executions/" + id + "?done=reset-accepted"} {
		f := &resetAPI{id: id, answer: answers[i]}
		c, err := New(Config{API: f})
		require.NoError(t, err)
		rec := postForm(t, c, "/ui/executions/"+id+"/reset", url.Values{"to": {"seq"}, "seq": {"5"}, "reason": {"outage"}, "reapply_signals": {"false"}})
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		require.Equal(t, want, rec.Header().Get("Location"))
		require.Len(t, f.resets, 1)
		require.JSONEq(t, `{"seq": 5}`, string(f.resets[0].To))
		require.Equal(t, "outage", f.resets[0].Reason)
		require.NotNil(t, f.resets[0].ReapplySignals)
		require.False(t, *f.resets[0].ReapplySignals)
	}

	// A Confirm posted from another site is refused before the API is
	// called.
	f := &resetAPI{id: id}
	c, err := New(Config{API: f})
	require.NoError(t, err)
	resp := visit(t, c, http.MethodPost, "/ui/executions/"+id+"/reset", url.Values{"to": {"seq"}, "seq": {"5"}}, nil,
		"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Empty(t, f.resets)

	// The API is called with the session's token: a reader's dry run is
	// refused, and the page says so.
	a, err := auth.New([]auth.Token{{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}}})
	require.NoError(t, err)
	c, err = New(Config{API: &resetAPI{id: id}, Auth: a})
	require.NoError(t, err)
	resp = visit(t, c, http.MethodGet, "/ui/executions/"+id+"/reset", nil, []*http.Cookie{signIn(t, c, "t-reader")})
	defer resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(page), "lacks scope cancel")
}
