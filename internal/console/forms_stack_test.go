package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/browsertest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestStartAndSignalInABrowser drives the Start… and Signal… forms in
// headless Chromium: the workflows page lists collect and not
// bench_echo (the dev worker registers it; it never ran); its Start…
// starts a collect of two items under a key and lands on its page,
// which refreshes itself while it runs; Signal… sends an item under a
// key, and the same again is answered as delivered before; a payload
// that is not JSON is refused on the form; the second item completes
// the execution, whose page then no longer refreshes. The executions
// filter offers collect by name.
func TestStartAndSignalInABrowser(t *testing.T) {
	t.Parallel()
	b := browsertest.Start(t)
	s := stacktest.Start(t, devstack.Config{})
	c, cctx := stacktest.Client(t, s)

	// The workflows page, Start….
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/workflows")))
	workflows := browsertest.Get(b, chromedp.Text("#workflows"))
	require.Contains(t, workflows, examples.WorkflowCollect)
	require.NotContains(t, workflows, examples.WorkflowBenchEcho, "an internal workflow that never ran")
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#start`)))
	b.Do(chromedp.SetValue(`select[name="workflow"]`, examples.WorkflowCollect),
		chromedp.SetValue(`textarea[name="input"]`, `{"count": 2}`),
		chromedp.SendKeys(`input[name="idempotency_key"]`, "console-start-1"))
	b.Screenshot("start")
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#start-form button[type="submit"]`)))
	loc, err := url.Parse(browsertest.Get(b, chromedp.Location()))
	require.NoError(t, err)
	id := strings.TrimPrefix(loc.Path, "/ui/executions/")
	require.Equal(t, "started", loc.Query().Get("done"))
	require.Contains(t, browsertest.Get(b, chromedp.Text(".done")), "Started.")
	require.True(t, browsertest.Get(b, chromedp.Evaluate[bool](`document.querySelector('meta[http-equiv="refresh"]') !== null`)), "a running execution's page refreshes itself")
	e, err := c.Describe(cctx, id)
	require.NoError(t, err)
	require.Equal(t, examples.WorkflowCollect, e.WorkflowName)
	require.Equal(t, "console-start-1", e.IdempotencyKey)

	// Signal…: the first item, under a key, twice.
	for i, want := range []string{"Signal sent", "was delivered before"} {
		require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/executions/"+id+"/signal")), i)
		b.Do(chromedp.SendKeys(`input[name="name"]`, "item"),
			chromedp.SetValue(`textarea[name="payload"]`, `{"sku": "a"}`),
			chromedp.SendKeys(`input[name="idempotency_key"]`, "console-signal-form-1"))
		if i == 0 {
			b.Screenshot("signal")
		}
		require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#signal-form button[type="submit"]`)))
		require.Contains(t, browsertest.Get(b, chromedp.Text(".done")), want)
	}

	// A payload that is not JSON: refused on the form, kept.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/executions/"+id+"/signal")))
	b.Do(chromedp.SendKeys(`input[name="name"]`, "item"), chromedp.SetValue(`textarea[name="payload"]`, `{"sku": b}`))
	require.EqualValues(t, http.StatusBadRequest, b.Load(chromedp.Click(`#signal-form button[type="submit"]`)))
	require.Contains(t, browsertest.Get(b, chromedp.Text("#signal-refused")), "The payload is not JSON")
	require.Equal(t, `{"sku": b}`, browsertest.Get(b, chromedp.Value(`textarea[name="payload"]`)))

	// The second item completes it.
	b.Do(chromedp.SetValue(`textarea[name="payload"]`, `{"sku": "b"}`))
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#signal-form button[type="submit"]`)))
	done, err := c.WaitResult(cctx, id, nil)
	require.NoError(t, err)
	require.Equal(t, client.StatusCompleted, done.Status)
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/executions/"+id)))
	require.False(t, browsertest.Get(b, chromedp.Evaluate[bool](`document.querySelector('meta[http-equiv="refresh"]') !== null`)), "a closed execution's page does not refresh")
	history := browsertest.Get(b, chromedp.Text("#history"))
	require.Contains(t, history, "signal item · key console-signal-form-1")

	// The executions filter offers the workflow by name.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/executions")))
	require.True(t, browsertest.Get(b, chromedp.Evaluate[bool](`Array.from(document.querySelectorAll('#workflow-names option')).some(o => o.value === "collect")`)))
}
