package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
)

// historyOf is a history answer of events given as JSON objects.
func historyOf(t *testing.T, events ...string) json.RawMessage {
	t.Helper()
	return json.RawMessage(`{"events": [` + strings.Join(events, ",") + `]}`)
}

// TestAnExecutionPageShowsItsTimelineAndWhatItWaitsFor: the history is a
// timeline of one line per event (what it names, its attempt, its
// error) with its attributes as indented JSON behind a <details>, text
// escaped; a running execution says what its code's goroutines wait for
// (describe's waiting_on: a signal by name, a selector's cases), and
// what it waits for from the history (the activity not closed, with no
// live worker for it, the timer until when, the child still running) and not the activity, timer or
// cancelled timer that closed; its search attributes are listed, each
// linked to the list filtered on it; it refreshes itself while it runs,
// unless turned off, and not once it closed.
func TestAnExecutionPageShowsItsTimelineAndWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	const id = "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b63"
	retryAt := time.Date(2026, 12, 6, 12, 30, 0, 0, time.UTC)
	child := "01a2398e-6c1f-7b0a-9d35-2f4c8e1a7b64"
	describe := api.Execution{ExecutionID: id, WorkflowName: "order", WorkflowID: "o-1", Status: "Running",
		CreatedAt:                 time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC),
		WaitingForActivityWorkers: []string{"ship"},
		WaitingOn: &api.Waiting{Seq: 9, Waits: []api.Wait{
			{Goroutine: "workflow function", WaitCase: api.WaitCase{Kind: api.WaitSignal, Name: "approve<now>"}},
			{Goroutine: "workflow goroutine 1", WaitCase: api.WaitCase{Kind: api.WaitSelector}, Cases: []api.WaitCase{
				{Kind: api.WaitActivity, Name: "ship", ID: 2}, {Kind: api.WaitTimer, ID: 1, Until: &retryAt}}},
		}},
		SearchAttributes: map[string]any{"customer_id": "c<1>", "amount": 500},
		PendingActivities: []api.PendingActivity{{ActivityID: 2, ActivityName: "ship", Attempt: 2, State: api.ActivityRetrying,
			NextAttemptAt: &retryAt, LastFailure: json.RawMessage(`{"type": "Timeout", "message": "carrier <slow>"}`),
			LastHeartbeatAt: &retryAt, HeartbeatDetails: json.RawMessage(`{"page": 7}`)}}}
	answers := map[string]any{
		"/api/harvest/executions/" + id: describe,
		"/api/harvest/executions/" + id + "/history": historyOf(t,
			`{"seq": 1, "type": "WorkflowStarted", "at": "2026-12-06T12:00:00Z", "workflow_name": "order", "input": {"note": "<b>x</b>"}}`,
			`{"seq": 2, "type": "ActivityScheduled", "at": "2026-12-06T12:00:01Z", "activity_id": 1, "activity_name": "charge", "idempotency_key": "k-1"}`,
			`{"seq": 3, "type": "ActivityFailed", "at": "2026-12-06T12:00:02Z", "activity_id": 1, "activity_name": "charge", "attempt": 3, "failure": {"message": "card declined"},
				"started_at": "2026-12-06T12:00:01.5Z", "ended_at": "2026-12-06T12:00:01.7345Z"}`,
			`{"seq": 4, "type": "ActivityScheduled", "at": "2026-12-06T12:00:03Z", "activity_id": 2, "activity_name": "ship", "idempotency_key": "k-2"}`,
			`{"seq": 5, "type": "TimerStarted", "at": "2026-12-06T12:00:03Z", "timer_id": 1, "fire_at": "2026-12-07T09:30:00Z"}`,
			`{"seq": 6, "type": "TimerStarted", "at": "2026-12-06T12:00:03Z", "timer_id": 2, "fire_at": "2026-12-06T12:00:04Z"}`,
			`{"seq": 7, "type": "TimerFired", "at": "2026-12-06T12:00:04Z", "timer_id": 2}`,
			`{"seq": 8, "type": "TimerStarted", "at": "2026-12-06T12:00:04Z", "timer_id": 3, "fire_at": "2026-12-08T00:00:00Z"}`,
			`{"seq": 9, "type": "TimerCancelled", "at": "2026-12-06T12:00:05Z", "timer_id": 3}`,
		),
		"/api/harvest/executions/" + id + "/children": api.ListChildrenResponse{Children: []api.Child{
			{ChildID: 1, WorkflowName: "pack", WorkflowID: "p-1", ExecutionID: child, Status: "Running"},
			{ChildID: 2, WorkflowName: "pack", WorkflowID: "p-2", Status: "Completed"},
		}},
	}
	c, err := New(Config{API: fakeAPI(answers)})
	require.NoError(t, err)
	status, body := get(t, c, "/ui/executions/"+id)
	require.Equal(t, http.StatusOK, status)

	history := section(t, body, `<ol id="history"`, "</ol>")
	require.Contains(t, history, `<strong>ActivityFailed</strong> <span class="summary">activity charge #1 · attempt 3 · ran 234.5ms · error: card declined</span>`)
	require.Contains(t, history, `<span class="summary">activity charge #1 · key k-1</span>`)
	require.Contains(t, history, `<span class="summary">timer #1 · fires at 2026-12-07 09:30:00.000</span>`)
	require.Contains(t, history, "<details><summary>attributes</summary><pre>{\n  &#34;input&#34;: {\n    &#34;note&#34;: &#34;&lt;b&gt;x&lt;/b&gt;&#34;\n  },")
	require.NotContains(t, history, "<b>x</b>")

	waiting := section(t, body, `<div class="waiting" id="waiting-for"`, "</div>")
	require.Contains(t, waiting, `its code (<span class="mono">workflow function</span>) waits for signal &#34;approve&lt;now&gt;&#34; <small class="hint">as its last workflow task (event 9) left it</small>`)
	require.Contains(t, waiting, `its code (<span class="mono">workflow goroutine 1</span>) waits for one of: activity &#34;ship&#34; (id 2); timer 1, until 2026-12-06T12:30:00Z`)
	require.Contains(t, waiting, "activity <strong>ship</strong> #2")
	require.Contains(t, waiting, "no live worker registers it")
	require.Contains(t, waiting, "attempt 2 is tried again at 2026-12-06 12:30:00.000")
	require.Contains(t, waiting, "the last failed: <span class=\"problem\">Timeout: carrier &lt;slow&gt;</span>")
	require.Contains(t, waiting, `<code>{&#34;page&#34;:7}</code>`)
	require.NotContains(t, waiting, "charge")
	require.Contains(t, waiting, "timer #1 until 2026-12-07 09:30:00.000")
	require.NotContains(t, waiting, "timer #2")
	require.NotContains(t, waiting, "timer #3")
	require.Contains(t, waiting, `<a class="mono" href="/ui/executions/`+child+`">p-1</a>`)
	require.NotContains(t, waiting, "p-2")
	require.Contains(t, body, "cancelled 2026-12-06 12:00:05.000", "the timers table says the cancelled one is")

	attrs := section(t, body, `<dd id="search-attributes">`, "</dd>")
	require.Contains(t, attrs, `<span class="mono">amount</span> = <a class="mono" href="/ui/executions?attr=amount%3D500&amp;workflow=order"`)
	require.Contains(t, attrs, `<span class="mono">customer_id</span> = <a class="mono" href="/ui/executions?attr=customer_id%3Dc%3C1%3E&amp;workflow=order"`)
	require.Contains(t, attrs, `&#34;c&lt;1&gt;&#34;`)

	require.Contains(t, body, `<meta http-equiv="refresh" content="5; url=/ui/executions/`+id+`">`)
	require.Contains(t, body, `href="/ui/executions/`+id+`/signal">Signal…</a>`)
	_, body = get(t, c, "/ui/executions/"+id+"?refresh=off")
	require.NotContains(t, body, `http-equiv="refresh"`)
	require.Contains(t, body, "Not refreshing.")

	describe.Status = "Completed"
	answers["/api/harvest/executions/"+id] = describe
	_, body = get(t, c, "/ui/executions/"+id)
	require.NotContains(t, body, `http-equiv="refresh"`)
	require.NotContains(t, body, `id="refreshing"`)
	require.NotContains(t, body, `id="waiting-for"`, "a closed execution waits for nothing")
	require.NotContains(t, body, "Signal…")
}

// section is the part of body from the first from to the next to.
func section(t *testing.T, body, from, to string) string {
	t.Helper()
	i := strings.Index(body, from)
	require.GreaterOrEqual(t, i, 0, "no %s in the page", from)
	s := body[i:]
	j := strings.Index(s, to)
	require.GreaterOrEqual(t, j, 0)
	return s[:j]
}
