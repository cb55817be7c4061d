package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
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

// TestResetInABrowser drives an execution's Reset… in headless Chromium:
// a collect that waits for its second item, with the first received
// under a key. Its page's Reset… leads to the form, which offers the
// valid points; a seq that is no point is refused on the form, with the
// points nearest to it, and changes nothing; the first task's plan lists
// the signal re-applied; Confirm resets and lands on the new run's page,
// which names the run it was reset from, while the old run is Terminated
// and names the new one; a reset of the old run to another point is
// refused (409) on the form. The new run got the signal again: one more
// item completes it.
func TestResetInABrowser(t *testing.T) {
	t.Parallel()
	b := browsertest.Start(t)
	s := stacktest.Start(t, devstack.Config{})
	c, cctx := stacktest.Client(t, s)
	run, err := c.Start(cctx, examples.WorkflowCollect, examples.CollectInput{Count: 2}, client.StartOptions{IdempotencyKey: "console-reset-1"})
	require.NoError(t, err)
	// The signal comes after the first task, so that each has a task of
	// its own.
	probe.Until(t, 30*time.Second, "the first workflow task to complete", func() bool {
		return slices.Contains(stacktest.HistoryTypes(t, s, run.ExecutionID), "WorkflowTaskCompleted")
	})
	_, err = c.SendSignalIdempotent(cctx, run.ExecutionID, "item", map[string]any{"sku": "a"}, "console-reset-signal-1")
	require.NoError(t, err)
	probe.Until(t, 30*time.Second, "the signal's workflow task to complete", func() bool {
		types := stacktest.HistoryTypes(t, s, run.ExecutionID)
		return len(types) == 4 && types[2] == "SignalReceived" && types[3] == "WorkflowTaskCompleted"
	})

	// Its page, Reset…: the form offers the valid points.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Navigate(s.URL()+"/ui/executions/"+run.ExecutionID)))
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`a[href$="/reset"]`)))
	points := browsertest.Get(b, chromedp.Text("#valid-points-list"))
	require.Contains(t, points, "event 2 (workflow task 1)")
	require.Contains(t, points, "event 4 (workflow task 2)")

	// Event 3, the signal, is no point: refused on the form, with the
	// points around it.
	b.Do(chromedp.Click(`input[name="to"][value="seq"]`), chromedp.SendKeys(`input[name="seq"]`, "3"))
	require.EqualValues(t, http.StatusUnprocessableEntity, b.Load(chromedp.Click(`button[name="plan"]`)))
	refused := browsertest.Get(b, chromedp.Text("#reset-refused"))
	require.Contains(t, refused, "422 invalid_reset_point")
	require.Contains(t, refused, "Nothing was changed.")
	nearest := browsertest.Get(b, chromedp.Text("#nearest-points"))
	require.Contains(t, nearest, "event 2")
	require.Contains(t, nearest, "event 4")
	require.True(t, browsertest.Get(b, chromedp.Evaluate[bool](`document.querySelector('input[name="to"][value="seq"]').checked`)), "the form keeps what was chosen")
	e, err := c.Describe(cctx, run.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, e.Status)
	require.Empty(t, e.ResetTo)

	// The first task: its plan, the signal received again with its key.
	b.Do(chromedp.Click(`input[name="to"][value="first_task"]`), chromedp.SendKeys(`input[name="reason"]`, "reset from the console test"))
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`button[name="plan"]`)))
	require.Contains(t, browsertest.Get(b, chromedp.Text("#plan-point")), "workflow task 1, recorded at event 2")
	require.Equal(t, "1", browsertest.Get(b, chromedp.Text("#plan-kept")))
	require.Equal(t, "3", browsertest.Get(b, chromedp.Text("#plan-dropped")))
	signals := browsertest.Get(b, chromedp.Text("#plan-signals"))
	require.Contains(t, signals, "item")
	require.Contains(t, signals, "console-reset-signal-1")
	require.Equal(t, "none", browsertest.Get(b, chromedp.Text("#plan-rerun")))
	b.Screenshot("reset")
	e, err = c.Describe(cctx, run.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, e.Status, "a plan changes nothing")

	// Confirm: the new run's page, reset from the old one.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#reset-confirm button[type="submit"]`)))
	loc, err := url.Parse(browsertest.Get(b, chromedp.Location()))
	require.NoError(t, err)
	newID := strings.TrimPrefix(loc.Path, "/ui/executions/")
	require.NotEqual(t, run.ExecutionID, newID)
	require.Equal(t, "reset", loc.Query().Get("done"))
	require.Contains(t, browsertest.Get(b, chromedp.Text(".done")), "from event 2")
	require.Contains(t, browsertest.Get(b, chromedp.Text("#reset-from")), run.ExecutionID)

	// The old run, through the link: Terminated, reset to the new one.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`#reset-from a`)))
	require.Equal(t, "Terminated", browsertest.Get(b, chromedp.Text("h1 .status")))
	require.Contains(t, browsertest.Get(b, chromedp.Text("#reset-to")), newID)
	old, err := c.Describe(cctx, run.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, newID, old.ResetTo)

	// Its Reset… says it is no longer the newest run; a reset to its last
	// task is planned, and its Confirm refused on the form.
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`a[href$="/reset"]`)))
	require.Contains(t, browsertest.Get(b, chromedp.Text("#not-latest")), newID)
	b.Do(chromedp.Click(`input[name="to"][value="last_task"]`))
	require.EqualValues(t, http.StatusOK, b.Load(chromedp.Click(`button[name="plan"]`)))
	require.Contains(t, browsertest.Get(b, chromedp.Text("#plan-point")), "event 4")
	require.EqualValues(t, http.StatusConflict, b.Load(chromedp.Click(`#reset-confirm button[type="submit"]`)))
	refused = browsertest.Get(b, chromedp.Text("#reset-refused"))
	require.Contains(t, refused, "409 execution_not_latest")
	require.Contains(t, refused, newID)
	require.Contains(t, refused, "Nothing was changed.")
	b.Screenshot("reset-refused")

	// The new run received the first item again: the second completes it.
	_, err = c.SendSignalIdempotent(cctx, newID, "item", map[string]any{"sku": "b"}, "console-reset-signal-2")
	require.NoError(t, err)
	var result examples.CollectResult
	done, err := c.WaitResult(cctx, newID, &result)
	require.NoError(t, err)
	require.Equal(t, client.StatusCompleted, done.Status)
	require.Len(t, result.Items, 2)
	var first map[string]string
	require.NoError(t, json.Unmarshal(result.Items[0], &first))
	require.Equal(t, "a", first["sku"])
}
