package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/browsertest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestConsoleInABrowser drives the console in headless Chromium against a
// real stack: the executions page lists a started execution, the filter
// finds it by its key, its page shows the activities' idempotency keys,
// the history, the duplicates its key absorbed and its completion
// callback, an input holding HTML is shown as text, a signal retried is
// marked deduplicated, cancel (behind its confirmation) cancels, and the
// webhooks page counts a source's deliveries.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	b := browsertest.Start(t)
	s := consoleStack(t)
	receiver := callbackReceiver(t)
	c, cctx := stacktest.Client(t, s)

	// An onboarding whose input carries HTML, run to completion, its
	// start retried once (the broker drops the retry), its outcome
	// delivered to a callback at the second attempt.
	hostile := `<script>document.title=location.host</script><b id=bold>bold</b>`
	opts := client.StartOptions{IdempotencyKey: "console-evt-1", CompletionCallback: receiver.URL + "/flaky"}
	done, err := c.Start(cctx, examples.WorkflowOnboarding, map[string]any{"user_id": 7, "note": hostile}, opts)
	require.NoError(t, err)
	finished, err := c.WaitResult(cctx, done.ExecutionID, nil)
	require.NoError(t, err)
	require.Equal(t, client.StatusCompleted, finished.Status)
	retried, err := c.Start(cctx, examples.WorkflowOnboarding, map[string]any{"user_id": 7, "note": hostile}, opts)
	require.NoError(t, err)
	require.Equal(t, done.ExecutionID, retried.ExecutionID)
	// A collect that waits for signals, with one received and retried: it
	// is the one to cancel.
	waiting, err := c.Start(cctx, examples.WorkflowCollect, examples.CollectInput{Count: 3}, client.StartOptions{IdempotencyKey: "console-evt-2"})
	require.NoError(t, err)
	for range 2 {
		_, err = c.SendSignalIdempotent(cctx, waiting.ExecutionID, "item", map[string]any{"sku": "A-1"}, "console-signal-1")
		require.NoError(t, err)
	}
	// What the pages will show once the scheduler has counted it.
	probe.Until(t, 30*time.Second, "the duplicates to be counted and the callback delivered", func() bool {
		d, err := c.Describe(cctx, done.ExecutionID)
		require.NoError(t, err)
		w, err := c.Describe(cctx, waiting.ExecutionID)
		require.NoError(t, err)
		return d.IdempotencyClaim != nil && d.IdempotencyClaim.Duplicates.Broker == 1 &&
			d.CompletionCallback != nil && d.CompletionCallback.Status == client.CallbackDelivered &&
			len(w.SignalKeys) == 1 && w.SignalKeys[0].Deduplicated && w.WaitingOn != nil
	})
	// Webhook deliveries: one accepted, delivered again, one with a bad
	// signature, one that breaks the source's schema.
	ev := stacktest.PaymentEvent("evt_browser", 250)
	require.Equal(t, 202, stacktest.Deliver(t, s, "stripe", ev, stacktest.StripeSign(ev, time.Now()), "application/json").Status)
	require.Equal(t, 200, stacktest.Deliver(t, s, "stripe", ev, stacktest.StripeSign(ev, time.Now()), "application/json").Status)
	require.Equal(t, 401, stacktest.Deliver(t, s, "stripe", ev, "t=1,v1=00", "application/json").Status)
	noData := []byte(`{"id": "evt_nodata", "type": "payment_intent.succeeded"}`)
	require.Equal(t, 422, stacktest.Deliver(t, s, "stripe", noData, stacktest.StripeSign(noData, time.Now()), "application/json").Status)
	for range 3 {
		_, err := c.Start(cctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 100, CustomerID: "cus_console"}, client.StartOptions{})
		require.NoError(t, err)
	}
	hist, err := c.History(cctx, done.ExecutionID)
	require.NoError(t, err)
	var activityKeys []string
	for _, e := range hist {
		if e.Type == "ActivityScheduled" {
			activityKeys = append(activityKeys, e.Attrs["idempotency_key"].(string))
		}
	}
	require.Len(t, activityKeys, 2)

	// The executions page lists both keyed executions.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/")))
	table := browsertest.Get(b, chromedp.Text("#executions tbody"))
	require.Contains(t, table, "console-evt-1")
	require.Contains(t, table, "console-evt-2")
	b.Screenshot("executions")

	// The filter, typed into the form, finds the first by its key, and the
	// URL carries it.
	b.Do(chromedp.SendKeys(`input[name="key"]`, "console-evt-1"))
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Submit(`input[name="key"]`)))
	require.Contains(t, browsertest.Get(b, chromedp.Location()), "key=console-evt-1")
	table = browsertest.Get(b, chromedp.Text("#executions tbody"))
	require.Contains(t, table, "console-evt-1")
	require.NotContains(t, table, "console-evt-2")

	// Its page: the activities' keys, the history, the input as text.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#executions tbody a`)))
	activities := browsertest.Get(b, chromedp.Text("#activities"))
	for _, key := range activityKeys {
		require.Contains(t, activities, key)
	}
	require.Contains(t, activities, examples.ActivityCreateDBUser)
	history := browsertest.Get(b, chromedp.Text("#history"))
	for _, typ := range []string{"WorkflowStarted", "ActivityScheduled", "ActivityCompleted", "WorkflowCompleted"} {
		require.Contains(t, history, typ)
	}
	require.Contains(t, browsertest.Get(b, chromedp.Text("#input")), hostile, "the input's HTML is shown as text")
	require.Zero(t, browsertest.Get(b, chromedp.Evaluate[int](`document.scripts.length`)), "no script element came from the input")
	require.Zero(t, browsertest.Get(b, chromedp.Evaluate[int](`document.querySelectorAll("#bold").length`)), "no element came from the input")
	require.True(t, strings.HasPrefix(browsertest.Get(b, chromedp.Title()), "Execution "), "the page's own title")
	// Its key's duplicates, by layer, and its callback's attempts.
	dups := browsertest.Get(b, chromedp.Text("#key-duplicates"))
	for _, want := range []string{"1:", "replay 0", "broker 1", "claim 0"} {
		require.Contains(t, dups, want)
	}
	require.Contains(t, browsertest.Get(b, chromedp.Text("#key-claim")), "first seen")
	require.Contains(t, browsertest.Get(b, chromedp.Text("#callback")), receiver.URL+"/flaky")
	require.Equal(t, "2", browsertest.Get(b, chromedp.Text("#callback-attempts")))
	b.Screenshot("execution")

	// Cancel the waiting one: its page, the confirmation, the form. It
	// says which signal its code waits for. Its signal, sent twice, was
	// delivered once.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/executions/"+waiting.ExecutionID)))
	require.Contains(t, browsertest.Get(b, chromedp.Text("#waiting-for")), `its code (workflow function) waits for signal "item"`)
	b.Screenshot("execution-waiting")
	signals := browsertest.Get(b, chromedp.Text("#signals"))
	require.Contains(t, signals, "console-signal-1")
	require.Contains(t, signals, "deduplicated")
	require.Contains(t, signals, "broker 1")
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`a[href$="/cancel"]`)))
	b.Screenshot("confirm")
	b.Do(chromedp.SendKeys(`input[name="reason"]`, "cancelled from the console test"))
	// The form posts, and the answer redirects to the execution's page.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`button[type="submit"].danger`)))
	require.Contains(t, browsertest.Get(b, chromedp.Text(".done")), "Cancellation requested")
	cancelled, err := c.WaitResult(cctx, waiting.ExecutionID, nil)
	var failed *client.ExecutionFailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, client.StatusCancelled, cancelled.Status)

	// The workflows page: counts by status and the admission gates.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/workflows")))
	workflows := browsertest.Get(b, chromedp.Text("#workflows"))
	for _, name := range []string{examples.WorkflowOnboarding, examples.WorkflowCollect, examples.WorkflowCharge} {
		require.Contains(t, workflows, name)
	}
	require.Contains(t, workflows, "open")
	require.Contains(t, workflows, "declared_only", "a workflow that never ran")
	b.Screenshot("workflows")

	// The webhooks page, from the navigation: the source's deliveries by
	// what became of them, and whose counts they are.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`nav a[href="/ui/webhooks"]`)))
	require.Contains(t, browsertest.Get(b, chromedp.Text("#counted-since")), "this ingest process")
	for class, n := range map[string]string{"accepted": "1", "duplicate": "1", "bad-signature": "1", "schema": "1", "too-large": "0"} {
		require.Equal(t, n, browsertest.Get(b, chromedp.Text("#source-stripe td."+class)), class)
	}
	require.Contains(t, browsertest.Get(b, chromedp.Text("#source-stripe")), "payment_intent.succeeded")
	b.Screenshot("webhooks")
}

// TestTheSchedulesPagesInABrowser drives the schedules pages in headless
// Chromium: the navigation leads to the list, which shows a schedule
// made through the API; its page shows its ledger, whose fire links to
// the execution it started, which links back; pause, with a note typed
// into its confirmation, pauses it.
func TestTheSchedulesPagesInABrowser(t *testing.T) {
	t.Parallel()
	b := browsertest.Start(t)
	s := stacktest.Start(t, devstack.Config{})
	schedURL := s.URL() + "/api/harvest/schedules/charge-every-second"
	put := stacktest.Call(t, http.MethodPut, schedURL, nil,
		`{"workflow": "charge", `+stacktest.ChargeInput+`, "spec": {"every": "1s", "timezone": "Europe/Berlin"}}`)
	require.Equal(t, http.StatusCreated, put.Status, put.Body)
	probe.Until(t, 30*time.Second, "a fire whose execution completed", func() bool {
		got := stacktest.Call(t, http.MethodGet, schedURL+"/fires", nil, "")
		require.Equal(t, http.StatusOK, got.Status, got.Body)
		for _, f := range got.Body["fires"].([]any) {
			if f := f.(map[string]any); f["outcome"] == "started" && f["execution_status"] == "Completed" {
				return true
			}
		}
		return false
	})

	// The list, from the navigation.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/")))
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`nav a[href="/ui/schedules"]`)))
	row := browsertest.Get(b, chromedp.Text("#schedule-charge-every-second"))
	for _, want := range []string{"charge-every-second", "charge", "every 1s", "in Europe/Berlin", "skip", "active"} {
		require.Contains(t, row, want)
	}
	b.Screenshot("schedules")

	// Its page: the definition and the ledger; a completed fire's
	// execution, and back.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#schedule-charge-every-second a[href="/ui/schedules/charge-every-second"]`)))
	require.Contains(t, browsertest.Get(b, chromedp.Text("#spec")), "every 1s")
	require.Contains(t, browsertest.Get(b, chromedp.Text("#fires")), "Completed")
	b.Screenshot("schedule")
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#fires a[href^="/ui/executions/"]`)))
	require.Contains(t, browsertest.Get(b, chromedp.Text("#started-by")), "schedule charge-every-second")
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#started-by a`)))

	// Pause, through its confirmation, with a note.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`a[href$="/pause"]`)))
	b.Do(chromedp.SendKeys(`input[name="note"]`, "paused in the browser test"))
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`button[type="submit"]`)))
	require.Contains(t, browsertest.Get(b, chromedp.Text(".done")), "The schedule was paused.")
	require.Contains(t, browsertest.Get(b, chromedp.Text("#paused")), "paused in the browser test")
	got := stacktest.Call(t, http.MethodGet, schedURL, nil, "")
	require.Equal(t, true, got.Body["paused"])
	require.Equal(t, "paused in the browser test", got.Body["note"])
}
