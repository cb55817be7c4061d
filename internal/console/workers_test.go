package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// pgtest.Main also fails the run when goroutines leaked (goleak); the
// stack tests (package console_test) need its PostgreSQL.
func TestMain(m *testing.M) { pgtest.Main(m) }

// fakeAPI answers each path with its body as JSON (status 200; 400 or
// 403 for an api.ErrorResponse of those codes), any other with 404.
func fakeAPI(answers map[string]any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := answers[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.CodeNotFound, Message: "no route"})
			return
		}
		status := http.StatusOK
		if e, ok := body.(api.ErrorResponse); ok {
			switch e.Error {
			case api.CodeInvalidTaskQueue:
				status = http.StatusBadRequest
			case api.CodeForbidden:
				status = http.StatusForbidden
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	})
}

func get(t *testing.T, c *Console, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// TestTheWorkersPageShowsTheLiveWorkers: the workers page shows each
// worker as the API lists it (its slots, its names, its queue linked to
// the queue's page, "–" for what an older worker does not say, its text
// escaped, the workflows its replay check refused with where their
// histories diverged), and says so when there is none; the task queue page shows
// each name's backlog and workers, a backlog without a worker as a
// problem, and the unrouted backlog; a refusal of the API is shown with
// its status.
func TestTheWorkersPageShowsTheLiveWorkers(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	answers := map[string]any{
		"/api/harvest/workers": api.ListWorkersResponse{Workers: []api.Worker{
			{ID: "w1", Host: "box<1>", PID: 4242, Build: "v1.4.0+75549c2a1b3c", StartedAt: at, TaskQueue: "billing",
				Workflows: []string{"charge", "refund"}, Activities: []string{"charge_card"},
				Slots:           &api.WorkerSlots{Workflow: api.SlotUsage{Used: 1, Size: 4}, Activity: api.SlotUsage{Used: 3, Size: 16}},
				LastHeartbeatAt: at.Add(time.Minute), BuildID: "v2~rc",
				ReplayRefused: []api.ReplayRefusal{{Workflow: "payroll", Reason: "nondeterminism", ExecutionID: "01a2370e-fdd2-7c4b-9c2e-5b6f7a8b9c0d",
					Message: "workflow is not deterministic: at history event 3 (workflow task 1) the history has <ActivityScheduled>", EventSeq: 3}}},
			{ID: "w0", Host: "old", TaskQueue: "billing", Workflows: []string{"charge"}, Activities: []string{}, LastHeartbeatAt: at},
		}},
		"/api/harvest/task-queues/billing": api.TaskQueueResponse{TaskQueue: "billing",
			Workflows: []api.NameBacklog{
				{Name: "charge", Backlog: 1, Workers: []string{"w0", "w1"}},
				{Name: "payroll", Backlog: 2, Workers: []string{}},
			},
			Activities:      []api.NameBacklog{{Name: "charge_card", Workers: []string{"w1"}}},
			UnroutedBacklog: api.UnroutedBacklog{Activity: 3}},
		"/api/harvest/task-queues/no.queue": api.ErrorResponse{Error: api.CodeInvalidTaskQueue, Message: `task queue "no.queue": want a task queue name`},
	}
	c, err := New(Config{API: fakeAPI(answers)})
	require.NoError(t, err)

	status, body := get(t, c, "/ui/workers")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<a href="/ui/workers" aria-current="page">Workers</a>`)
	require.Contains(t, body, `<tr id="worker-w1">`)
	require.Contains(t, body, "box&lt;1&gt;", "escaped")
	require.Contains(t, body, "4242")
	require.Contains(t, body, "v1.4.0&#43;75549c2a1b3c", "+ escaped")
	require.Contains(t, body, "2026-03-04 05:06:07.000")
	require.Contains(t, body, "1 of 4")
	require.Contains(t, body, "3 of 16")
	require.Contains(t, body, "2026-03-04 05:07:07.000")
	require.Contains(t, body, `<a href="/ui/task-queues/billing">billing</a>`)
	require.Contains(t, body, `<a href="/ui/executions?workflow=charge">charge</a>, <a href="/ui/executions?workflow=refund">refund</a>`)
	w1 := body[strings.Index(body, `<tr id="worker-w1">`):]
	w1 = w1[:strings.Index(w1, "</tr>")]
	require.Contains(t, w1, `refused by its replay check: <a href="#refused-w1-payroll">payroll</a>`)
	refused := body[strings.Index(body, `<tr id="refused-w1-payroll">`):]
	refused = refused[:strings.Index(refused, "</tr>")]
	require.Contains(t, refused, "v2~rc")
	require.Contains(t, refused, "nondeterminism")
	require.Contains(t, refused, `<a href="/ui/executions/01a2370e-fdd2-7c4b-9c2e-5b6f7a8b9c0d">`)
	require.Contains(t, refused, "has &lt;ActivityScheduled&gt;", "escaped")
	old := body[strings.Index(body, `<tr id="worker-w0">`):]
	old = old[:strings.Index(old, "</tr>")]
	require.Equal(t, 5, strings.Count(old, "–"), "pid, build, start and both slots unknown: %s", old)
	require.Contains(t, old, `<span class="hint">none</span>`, "no activities")

	answers["/api/harvest/workers"] = api.ListWorkersResponse{Workers: []api.Worker{}}
	_, body = get(t, c, "/ui/workers")
	require.Contains(t, body, "No live worker")
	require.NotContains(t, body, "Refused by a replay check", "shown only when a worker refused a workflow")

	status, body = get(t, c, "/ui/task-queues/billing")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<a href="/ui/workers" aria-current="page">Workers</a>`)
	charge := body[strings.Index(body, `<tr id="workflows-charge">`):]
	charge = charge[:strings.Index(charge, "</tr>")]
	require.Contains(t, charge, `<td class="num">1</td>`)
	require.Contains(t, charge, `<a class="mono" href="/ui/workers#worker-w0">w0</a>, <a class="mono" href="/ui/workers#worker-w1">w1</a>`)
	payroll := body[strings.Index(body, `<tr id="workflows-payroll">`):]
	payroll = payroll[:strings.Index(payroll, "</tr>")]
	require.Contains(t, payroll, `<td class="num">2</td>`)
	require.Contains(t, payroll, "no live worker: its tasks wait for one")
	card := body[strings.Index(body, `<tr id="activities-charge_card">`):]
	card = card[:strings.Index(card, "</tr>")]
	require.NotContains(t, card, "problem")
	require.Contains(t, body, `<p id="unrouted" class="hint">`)
	require.Contains(t, body, "0 workflow task(s), 3 activity task(s)")

	status, body = get(t, c, "/ui/task-queues/no.queue")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, "want a task queue name")
}
