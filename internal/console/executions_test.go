package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
)

// TestTheExecutionsFilterOffersTodayTheKnownNamesAndSearchAttributes:
// the start-time placeholders are today's (the console's clock, UTC);
// the workflow filter offers the names the API knows, bench_echo not
// until it ran; the search attributes typed (comma-separated, or the
// parameter repeated) reach the API as attr.* parameters and stay in the
// form and the pager's links; one that is not NAME=VALUE is refused
// before the API is asked, and the API's 400 is shown with its field.
func TestTheExecutionsFilterOffersTodayTheKnownNamesAndSearchAttributes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var asked url.Values
	attrRefused := false
	fake := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/harvest/workflows":
			_ = json.NewEncoder(w).Encode(api.ListWorkflowsResponse{Workflows: []api.WorkflowSummary{
				{Name: "bench_echo", Counts: map[string]int64{}}, {Name: "charge", Counts: map[string]int64{"Completed": 2}}, {Name: "refund", Counts: map[string]int64{}},
			}})
		case "/api/harvest/executions":
			mu.Lock()
			asked = r.URL.Query()
			refuse := attrRefused
			mu.Unlock()
			if refuse {
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.CodeInvalidSearchAttribute, Field: "attr.region",
					Message: `search attribute "region" is not declared by any workflow`})
				return
			}
			_ = json.NewEncoder(w).Encode(api.ListExecutionsResponse{Executions: []api.Execution{}, NextCursor: "c2"})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	now := time.Date(2031, 2, 3, 17, 45, 0, 0, time.FixedZone("CET", 3600))
	c, err := New(Config{API: fake, Now: func() time.Time { return now }})
	require.NoError(t, err)

	status, body := get(t, c, "/ui/executions")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `placeholder="2031-02-03T00:00"`)
	require.Contains(t, body, `placeholder="2031-02-03T23:59"`)
	require.NotContains(t, body, "2026-12-04")
	names := section(t, body, `<datalist id="workflow-names">`, "</datalist>")
	require.Contains(t, names, `<option value="charge">`)
	require.Contains(t, names, `<option value="refund">`)
	require.NotContains(t, names, "bench_echo", "an internal workflow that never ran")

	status, body = get(t, c, "/ui/executions?workflow=charge&attr="+url.QueryEscape("customer_id=c_1, amount.gte=500")+"&attr="+url.QueryEscape("vip=true"))
	require.Equal(t, http.StatusOK, status)
	mu.Lock()
	require.Equal(t, []string{"c_1"}, asked["attr.customer_id"])
	require.Equal(t, []string{"500"}, asked["attr.amount.gte"])
	require.Equal(t, []string{"true"}, asked["attr.vip"])
	require.Equal(t, "charge", asked.Get("workflow"))
	mu.Unlock()
	require.Contains(t, body, `name="attr" value="customer_id=c_1, amount.gte=500, vip=true"`)
	require.Contains(t, body, `attr=customer_id%3Dc_1%2C&#43;amount.gte%3D500%2C&#43;vip%3Dtrue`, "the next page keeps the filter")

	status, body = get(t, c, "/ui/executions?attr=region")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, `Search attributes: &#34;region&#34; is not NAME=VALUE`)

	mu.Lock()
	attrRefused = true
	mu.Unlock()
	status, body = get(t, c, "/ui/executions?attr=region%3Deu")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, `<p class="problem" role="alert">search attribute &#34;region&#34; is not declared by any workflow (attr.region)</p>`)
	require.Contains(t, body, `name="attr" value="region=eu"`, "the form keeps what was typed")
}

// TestInternalWorkflowsAreListedOnceTheyRan: bench_echo, which the dev
// worker registers for harvest bench, is not on the workflows page until
// it has executions.
func TestInternalWorkflowsAreListedOnceTheyRan(t *testing.T) {
	t.Parallel()
	answers := map[string]any{
		"/api/harvest/workflows": api.ListWorkflowsResponse{Workflows: []api.WorkflowSummary{
			{Name: "bench_echo", Counts: map[string]int64{}, Workers: 1, InputSchema: json.RawMessage("null")},
			{Name: "charge", Counts: map[string]int64{}, Workers: 1, InputSchema: json.RawMessage("null")},
		}},
	}
	c, err := New(Config{API: fakeAPI(answers)})
	require.NoError(t, err)
	_, body := get(t, c, "/ui/workflows")
	require.Contains(t, body, `<a href="/ui/executions?workflow=charge">charge</a>`)
	require.NotContains(t, body, "bench_echo")

	answers["/api/harvest/workflows"] = api.ListWorkflowsResponse{Workflows: []api.WorkflowSummary{
		{Name: "bench_echo", Counts: map[string]int64{api.StatusCompleted: 3}, Workers: 1, InputSchema: json.RawMessage("null")},
	}}
	_, body = get(t, c, "/ui/workflows")
	require.Contains(t, body, `<a href="/ui/executions?workflow=bench_echo">bench_echo</a>`)
}

// TestTheStylesheetHasADarkScheme: the console follows the system's
// colour scheme, and its colours are the variables the dark scheme sets.
func TestTheStylesheetHasADarkScheme(t *testing.T) {
	t.Parallel()
	c, err := New(Config{API: fakeAPI(nil)})
	require.NoError(t, err)
	status, css := get(t, c, "/ui/static/console.css")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, css, "color-scheme: light dark")
	dark := section(t, css, "@media (prefers-color-scheme: dark)", "\n}\n")
	for _, v := range []string{"--fg:", "--bg:", "--panel:", "--head:", "--line:", "--accent:"} {
		require.Contains(t, dark, v)
	}
	require.NotContains(t, css[:len(css)-len(dark)], "background: #fff;", "a white background the dark scheme would not change")
}
