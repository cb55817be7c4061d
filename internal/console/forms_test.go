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
)

// posted is a POST the fake API received.
type posted struct {
	Path  string
	Query url.Values
	Body  string
}

// postingAPI answers GETs as fakeAPI does and POSTs with answer(path,
// body): its status and body. It records the POSTs.
type postingAPI struct {
	answers map[string]any
	answer  func(p posted) (int, any)
	mu      sync.Mutex
	posts   []posted
}

func (a *postingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		fakeAPI(a.answers).ServeHTTP(w, r)
		return
	}
	b, _ := io.ReadAll(r.Body)
	p := posted{Path: r.URL.Path, Query: r.URL.Query(), Body: string(b)}
	a.mu.Lock()
	a.posts = append(a.posts, p)
	a.mu.Unlock()
	status, body := a.answer(p)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func (a *postingAPI) last() posted {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.posts) == 0 {
		return posted{}
	}
	return a.posts[len(a.posts)-1]
}

func (a *postingAPI) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.posts)
}

// post posts form to path as a browser of the console's own site does.
func post(t *testing.T, c *Console, path string, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	return rec
}

// TestTheSignalFormSendsBySignalsRoute: the Signal… form offers the
// names the history received; posted, it sends the payload as the body
// of POST /api/harvest/executions/{id}/signals/{name} with its key, and
// leads back to the execution saying what became of it (delivered,
// delivered before, accepted); a payload that is not JSON is refused on
// the form before the API is asked, the API's refusal is shown on it
// with its code, and what was typed stays; a form from another site is
// refused.
func TestTheSignalFormSendsBySignalsRoute(t *testing.T) {
	t.Parallel()
	const id = "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b65"
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	delivered := true
	a := &postingAPI{answers: map[string]any{
		"/api/harvest/executions/" + id: api.Execution{ExecutionID: id, WorkflowName: "collect", WorkflowID: "c-1", Status: "Running", CreatedAt: at},
		"/api/harvest/executions/" + id + "/history": historyOf(t,
			`{"seq": 3, "type": "SignalReceived", "at": "2026-12-06T12:00:01Z", "signal_name": "item", "payload": {"sku": "a"}}`),
	}}
	a.answer = func(posted) (int, any) {
		return http.StatusAccepted, api.SignalResponse{OK: true, SignalDelivered: &delivered}
	}
	c, err := New(Config{API: a})
	require.NoError(t, err)

	status, body := get(t, c, "/ui/executions/"+id+"/signal")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<datalist id="signal-names"><option value="item"></datalist>`)
	require.NotContains(t, body, `http-equiv="refresh"`, "a form does not reload under its user's typing")

	rec := post(t, c, "/ui/executions/"+id+"/signal", url.Values{"name": {"item"}, "payload": {`{"sku": "b"}`}, "idempotency_key": {"sig-1"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, "/ui/executions/"+id+"?done=signal", rec.Header().Get("Location"))
	sent := a.last()
	require.Equal(t, "/api/harvest/executions/"+id+"/signals/item", sent.Path)
	require.Equal(t, "sig-1", sent.Query.Get("idempotency_key"))
	require.JSONEq(t, `{"sku": "b"}`, sent.Body)
	_, body = get(t, c, "/ui/executions/"+id+"?done=signal")
	require.Contains(t, body, "Signal sent")

	delivered = false
	rec = post(t, c, "/ui/executions/"+id+"/signal", url.Values{"name": {"item"}, "idempotency_key": {"sig-1"}})
	require.Equal(t, "/ui/executions/"+id+"?done=signal-again", rec.Header().Get("Location"))
	require.Empty(t, a.last().Body, "no payload, no body")

	a.answer = func(posted) (int, any) {
		return http.StatusAccepted, api.SignalResponse{OK: true, CommandID: "cmd-1", Status: "accepted"}
	}
	rec = post(t, c, "/ui/executions/"+id+"/signal", url.Values{"name": {"item"}})
	require.Equal(t, "/ui/executions/"+id+"?done=signal-accepted", rec.Header().Get("Location"))
	require.Empty(t, a.last().Query.Get("idempotency_key"))

	n := a.count()
	rec = post(t, c, "/ui/executions/"+id+"/signal", url.Values{"name": {"item"}, "payload": {`{"sku": <b>`}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "The payload is not JSON")
	require.Contains(t, rec.Body.String(), `{&#34;sku&#34;: &lt;b&gt;</textarea>`)
	require.Equal(t, n, a.count(), "nothing sent")

	a.answer = func(posted) (int, any) {
		return http.StatusConflict, api.ErrorResponse{Error: "execution_closed", Message: "the execution is Completed: it takes no signal"}
	}
	rec = post(t, c, "/ui/executions/"+id+"/signal", url.Values{"name": {"item"}, "payload": {`1`}})
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Contains(t, rec.Body.String(), "The API refused it (409 execution_closed):</strong> the execution is Completed: it takes no signal")
	require.Contains(t, rec.Body.String(), "No signal was sent.")
	require.Contains(t, rec.Body.String(), `name="name" value="item"`)

	n = a.count()
	req := httptest.NewRequest(http.MethodPost, "/ui/executions/"+id+"/signal", strings.NewReader("name=item"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	cross := httptest.NewRecorder()
	c.ServeHTTP(cross, req)
	require.Equal(t, http.StatusForbidden, cross.Code)
	require.Equal(t, n, a.count())
}

// TestTheStartFormStartsAndGoesToTheExecution: the Start… form offers
// the workflows the page lists (bench_echo not until it ran) and the
// chosen one's input schema; posted, it starts by POST
// /api/harvest/workflows/{name}/start with the input, workflow_id and
// key, and goes to the execution (saying so when the key had started it
// before); a 202 is shown on the form with its command; an input that is
// not JSON, no workflow, and the API's refusal are shown on the form.
func TestTheStartFormStartsAndGoesToTheExecution(t *testing.T) {
	t.Parallel()
	const id = "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b66"
	fresh, dup := true, false
	a := &postingAPI{answers: map[string]any{
		"/api/harvest/workflows": api.ListWorkflowsResponse{Workflows: []api.WorkflowSummary{
			{Name: "bench_echo", Counts: map[string]int64{}, InputSchema: json.RawMessage("null")},
			{Name: "charge", Counts: map[string]int64{}, InputSchema: json.RawMessage(`{"type": "object", "required": ["amount_cents"]}`)},
		}},
	}}
	a.answer = func(posted) (int, any) {
		return http.StatusCreated, api.StartResponse{ExecutionID: id, WorkflowName: "charge", WorkflowID: "w-1", Status: "Running", StartedFresh: &fresh, Deduplicated: &dup}
	}
	c, err := New(Config{API: a})
	require.NoError(t, err)

	status, body := get(t, c, "/ui/workflows/start?workflow=charge")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "<option selected>charge</option>")
	require.NotContains(t, body, "bench_echo")
	require.Contains(t, section(t, body, `<details id="input-schema">`, "</details>"), "&#34;required&#34;")
	_, body = get(t, c, "/ui/workflows")
	require.Contains(t, body, `href="/ui/workflows/start?workflow=charge"`)

	rec := post(t, c, "/ui/workflows/start", url.Values{"workflow": {"charge"}, "input": {`{"amount_cents": 500}`}, "workflow_id": {"w-1"}, "idempotency_key": {"k-1"}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, "/ui/executions/"+id+"?done=started", rec.Header().Get("Location"))
	sent := a.last()
	require.Equal(t, "/api/harvest/workflows/charge/start", sent.Path)
	require.JSONEq(t, `{"input": {"amount_cents": 500}, "workflow_id": "w-1", "idempotency_key": "k-1"}`, sent.Body)

	fresh, dup = false, true
	rec = post(t, c, "/ui/workflows/start", url.Values{"workflow": {"charge"}, "idempotency_key": {"k-1"}})
	require.Equal(t, "/ui/executions/"+id+"?done=started-again", rec.Header().Get("Location"))
	require.JSONEq(t, `{"idempotency_key": "k-1"}`, a.last().Body)

	a.answer = func(posted) (int, any) {
		return http.StatusAccepted, api.AcceptedResponse{CommandID: "cmd-9", Status: api.CommandDeferred}
	}
	rec = post(t, c, "/ui/workflows/start", url.Values{"workflow": {"charge"}})
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `id="start-accepted"`)
	require.Contains(t, rec.Body.String(), "cmd-9")

	n := a.count()
	rec = post(t, c, "/ui/workflows/start", url.Values{"workflow": {"charge"}, "input": {"{amount"}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "The input is not JSON")
	rec = post(t, c, "/ui/workflows/start", url.Values{"input": {"1"}})
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "Choose the workflow to start.")
	require.Equal(t, n, a.count(), "nothing sent")

	a.answer = func(posted) (int, any) {
		return http.StatusUnprocessableEntity, api.ErrorResponse{Error: api.CodeInputInvalid, Field: "input", Message: "input does not match the schema of charge",
			Violations: []api.Violation{{Field: "/amount_cents", Message: "is required"}}}
	}
	rec = post(t, c, "/ui/workflows/start", url.Values{"workflow": {"charge"}, "input": {"{}"}})
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Contains(t, rec.Body.String(), "The API refused it (422 input_invalid):</strong> input does not match the schema of charge</p>")
	require.Contains(t, rec.Body.String(), `<li><code>/amount_cents</code>: is required</li>`)
	require.Contains(t, rec.Body.String(), "Nothing was started.")
}
