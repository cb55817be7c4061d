package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// uiAnswer is a console page as a browser got it, redirects not followed.
type uiAnswer struct {
	status   int
	location string
	body     string
}

// signedInBrowser signs in to s's console with token and returns a
// browser of its own (cookies kept, redirects shown, not followed), its
// forms posted from the console's own site.
func signedInBrowser(t *testing.T, s *devstack.Stack, token string) func(method, path string, form url.Values) uiAnswer {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, form url.Values) uiAnswer {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(t.Context(), method, s.URL()+path, body)
		require.NoError(t, err)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "same-origin")
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return uiAnswer{resp.StatusCode, resp.Header.Get("Location"), string(data)}
	}
	a := do(http.MethodPost, "/ui/login", url.Values{"token": {token}})
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	return do
}

// section is the part of a page from the element whose opening tag is
// start to the first end after it.
func section(t *testing.T, body, start, end string) string {
	t.Helper()
	i := strings.Index(body, start)
	require.GreaterOrEqual(t, i, 0, "no %s in the page:\n%s", start, body)
	s := body[i:]
	if j := strings.Index(s, end); j >= 0 {
		s = s[:j]
	}
	return s
}

// TestTheSchedulesPagesShowAScheduleItsLedgerAndItsActions: a schedule
// made through the API is listed with its spec and its last fire; its
// page shows its definition, next fires and ledger, each fire linked to
// the execution it started, whose page links back to the schedule; a
// token without the start scope is refused pause with the API's message,
// and one with it pauses (with a note), unpauses, triggers and deletes
// the schedule through the confirmation pages.
func TestTheSchedulesPagesShowAScheduleItsLedgerAndItsActions(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Token{
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeStart}},
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}},
	})
	require.NoError(t, err)
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Auth: a}})
	ops := map[string]string{"Authorization": "Bearer t-ops"}
	schedURL := s.URL() + "/api/harvest/schedules/console-every-second"
	put := stacktest.Call(t, http.MethodPut, schedURL, ops, `{"workflow": "charge", `+stacktest.ChargeInput+`, "spec": {"every": "1s"}}`)
	require.Equal(t, http.StatusCreated, put.Status, put.Body)

	// A fire that started an execution, which completed.
	var fire map[string]any
	probe.Until(t, 30*time.Second, "a fire whose execution completed", func() bool {
		got := stacktest.Call(t, http.MethodGet, schedURL+"/fires", ops, "")
		require.Equal(t, http.StatusOK, got.Status, got.Body)
		for _, f := range got.Body["fires"].([]any) {
			if f := f.(map[string]any); f["outcome"] == "started" && f["execution_status"] == "Completed" {
				fire = f
				return true
			}
		}
		return false
	})
	executionID := fire["execution_id"].(string)

	// The list: the schedule, its spec, its state and its last fire.
	browse := signedInBrowser(t, s, "t-ops")
	p := browse(http.MethodGet, "/ui/schedules", nil)
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, p.body, `<a href="/ui/schedules" aria-current="page">Schedules</a>`)
	row := section(t, p.body, `<tr id="schedule-console-every-second">`, "</tr>")
	require.Contains(t, row, `<a href="/ui/schedules/console-every-second">console-every-second</a>`)
	require.Contains(t, row, `>charge</a>`)
	require.Contains(t, row, "every 1s")
	require.Contains(t, row, "in UTC")
	require.Contains(t, row, ">skip<")
	require.Contains(t, row, `<span class="status active">active</span>`)
	require.Regexp(t, `<span class="status (started|starting|skipped_overlap)">`, section(t, row, `<td class="last">`, "</td>"))

	// Its page: the definition, the next fires, and the ledger, each
	// started fire linked to its execution.
	p = browse(http.MethodGet, "/ui/schedules/console-every-second", nil)
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, section(t, p.body, `<dd id="spec">`, "</dd>"), "every 1s")
	require.Contains(t, section(t, p.body, `<pre id="input">`, "</pre>"), `&#34;customer_id&#34;: &#34;c&#34;`)
	require.Equal(t, 5, strings.Count(section(t, p.body, `<table id="next-fires">`, "</table>"), "<tr><td>"))
	ledger := section(t, p.body, `<table id="fires">`, "</table>")
	require.Contains(t, ledger, `<a href="/ui/executions/`+executionID+`">`+executionID+`</a>`)
	require.Contains(t, ledger, `<span class="status completed">Completed</span>`)
	require.Contains(t, ledger, `<span class="status started">started</span>`)
	require.Contains(t, p.body, `href="/ui/schedules/console-every-second/pause">Pause…</a>`)

	// The execution a fire started says so, linked to the schedule.
	p = browse(http.MethodGet, "/ui/executions/"+executionID, nil)
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, p.body, `<dd id="started-by">schedule <a class="mono" href="/ui/schedules/console-every-second">console-every-second</a></dd>`)

	// A reader may look, not pause: the API's refusal is shown, and the
	// schedule runs on.
	reader := signedInBrowser(t, s, "t-reader")
	p = reader(http.MethodPost, "/ui/schedules/console-every-second/pause", url.Values{"note": {"no"}})
	require.Equal(t, http.StatusForbidden, p.status)
	require.Contains(t, p.body, "token &#34;reader&#34; lacks scope start")
	require.Equal(t, false, stacktest.Call(t, http.MethodGet, schedURL, ops, "").Body["paused"])

	// Pause: its confirmation asks for a note, its form pauses.
	p = browse(http.MethodGet, "/ui/schedules/console-every-second/pause", nil)
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, p.body, `<form method="post" action="/ui/schedules/console-every-second/pause"`)
	require.Contains(t, p.body, `name="note"`)
	p = browse(http.MethodPost, "/ui/schedules/console-every-second/pause", url.Values{"note": {"paused from <the console>"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/schedules/console-every-second?done=pause", p.location)
	got := stacktest.Call(t, http.MethodGet, schedURL, ops, "")
	require.Equal(t, true, got.Body["paused"])
	require.Equal(t, "paused from <the console>", got.Body["note"])
	p = browse(http.MethodGet, p.location, nil)
	require.Contains(t, p.body, "The schedule was paused.")
	require.Contains(t, section(t, p.body, `<p class="waiting" id="paused"`, "</p>"), "paused from &lt;the console&gt;")
	require.Contains(t, p.body, `href="/ui/schedules/console-every-second/unpause">Unpause…</a>`)
	p = browse(http.MethodGet, "/ui/schedules", nil)
	require.Contains(t, section(t, p.body, `<tr id="schedule-console-every-second">`, "</tr>"), `<span class="status paused">paused</span>`)

	// Unpause, and trigger: a fire made by the trigger joins the ledger.
	p = browse(http.MethodPost, "/ui/schedules/console-every-second/unpause", url.Values{})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, false, stacktest.Call(t, http.MethodGet, schedURL, ops, "").Body["paused"])
	p = browse(http.MethodPost, "/ui/schedules/console-every-second/trigger", url.Values{})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/schedules/console-every-second?done=trigger", p.location)
	p = browse(http.MethodGet, p.location, nil)
	require.Contains(t, section(t, p.body, `<table id="fires">`, "</table>"), "<td>trigger</td>")

	// An action the console does not have, and a schedule that is not.
	require.Equal(t, http.StatusNotFound, browse(http.MethodPost, "/ui/schedules/console-every-second/explode", url.Values{}).status)
	p = browse(http.MethodGet, "/ui/schedules/no-such-schedule", nil)
	require.Equal(t, http.StatusNotFound, p.status)
	require.Contains(t, p.body, "no schedule &#34;no-such-schedule&#34;")

	// Delete: back to the list, which no longer has it.
	p = browse(http.MethodPost, "/ui/schedules/console-every-second/delete", url.Values{})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/schedules?deleted=console-every-second", p.location)
	require.Equal(t, http.StatusNotFound, stacktest.Call(t, http.MethodGet, schedURL, ops, "").Status)
	p = browse(http.MethodGet, p.location, nil)
	require.Contains(t, p.body, "Schedule console-every-second was deleted")
	require.NotContains(t, p.body, `id="schedule-console-every-second"`)
}
