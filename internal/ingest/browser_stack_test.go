package ingest_test

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
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

// TestAPageOnAnotherSiteCannotStartAWorkflow: harvest dev's API needs no
// token, and a page the developer visits on another site (here
// http://localhost:<port>, another site than the API's 127.0.0.1) tries
// to start a charge in headless Chromium, as a form posted with
// enctype=text/plain whose fields spell a JSON body, and as a no-cors
// fetch with a text/plain body: both are refused with 403
// cross_site_request, and no charge exists. Without Chromium the test is
// skipped (see browser).
func TestAPageOnAnotherSiteCannotStartAWorkflow(t *testing.T) {
	t.Parallel()
	b := browsertest.Start(t)
	s := stacktest.Start(t, devstack.Config{}) // no auth: the API needs no token, as in harvest dev
	c, cctx := stacktest.Client(t, s)
	start := s.URL() + "/api/harvest/workflows/" + examples.WorkflowCharge + "/start"

	// The form's one field, name=value, makes the body
	// {"input": {"amount_cents": 500, "customer_id": "cus_=x"}}.
	name := `{"input": {"amount_cents": 500, "customer_id": "cus_`
	page := fmt.Sprintf(`<!doctype html><title>cat pictures</title>
<form id="f" method="post" enctype="text/plain" action="%s"><input name="%s" value='x"}}'></form>`,
		html.EscapeString(start), html.EscapeString(name))
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(evil.Close)
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)

	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(evilURL)))
	require.EqualValues(t, http.StatusForbidden, b.Load(chromedp.Submit("#f")), "the form's start is refused")
	require.Contains(t, browsertest.Get(b, chromedp.Text("body")), client.CodeCrossSiteRequest)

	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(evilURL)))
	sent := browsertest.Get(b, chromedp.Evaluate[bool](fmt.Sprintf(`fetch(%q, {method: "POST", mode: "no-cors",
		headers: {"Content-Type": "text/plain"}, body: '{"input": {"amount_cents": 500, "customer_id": "cus_fetch"}}'}).then(() => true)`, start),
		chromedp.EvalAwaitPromise))
	require.True(t, sent, "the fetch was answered")

	// Each was answered after its refusal, and a start that was not
	// refused is applied before it is answered (201): had one got
	// through, its charge would be listed now.
	charges, err := c.List(cctx, client.ListOptions{Workflow: examples.WorkflowCharge})
	require.NoError(t, err)
	require.Empty(t, charges, "no charge was started from the page")
	require.Contains(t, metricsText(t, s), `harvest_ingest_requests_refused_total{reason="cross_site"} 2`)

	// The same start from a program, which sends no browser headers, is
	// served.
	_, err = c.Start(cctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 500, CustomerID: "cus_1"}, client.StartOptions{})
	require.NoError(t, err)
}
