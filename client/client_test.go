package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fake serves canned answers and records the requests it got.
type fake struct {
	t    *testing.T
	srv  *httptest.Server
	mux  *http.ServeMux
	reqs chan recorded
}

type recorded struct {
	method, path, query, key string
	body                     string
}

func newFake(t *testing.T) (*fake, *Client) {
	t.Helper()
	f := &fake{t: t, mux: http.NewServeMux(), reqs: make(chan recorded, 100)}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.reqs <- recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Idempotency-Key"), string(body)}
		f.mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	c, err := New(Config{BaseURL: f.srv.URL + "/"})
	require.NoError(t, err)
	return f, c
}

func (f *fake) handle(pattern string, answers ...func(w http.ResponseWriter)) {
	var n atomic.Int32
	f.mux.HandleFunc(pattern, func(w http.ResponseWriter, _ *http.Request) {
		i := int(n.Add(1)) - 1
		answers[min(i, len(answers)-1)](w)
	})
}

func reply(status int, body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func (f *fake) last() recorded {
	f.t.Helper()
	select {
	case r := <-f.reqs:
		return r
	default:
		f.t.Fatal("no request recorded")
		return recorded{}
	}
}

func TestNew(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":     "http://127.0.0.1:8080",
		"http://127.0.0.1:8080/":    "http://127.0.0.1:8080",
		"127.0.0.1:8080":            "http://127.0.0.1:8080",
		"https://harvest.example/x": "https://harvest.example/x",
	} {
		c, err := New(Config{BaseURL: in})
		require.NoError(t, err, in)
		require.Equal(t, want, c.BaseURL())
		require.Equal(t, DefaultTimeout, c.hc.Timeout)
	}
	for _, bad := range []string{"", "ftp://x", "http://", "http://x/?a=1"} {
		_, err := New(Config{BaseURL: bad})
		require.Error(t, err, bad)
	}
	hc := &http.Client{}
	c, err := New(Config{BaseURL: "http://x", HTTPClient: hc})
	require.NoError(t, err)
	require.Same(t, hc, c.hc)
}

func TestStartEncodesTheRequest(t *testing.T) {
	f, c := newFake(t)
	f.handle("POST /api/harvest/workflows/charge/start",
		reply(201, `{"execution_id":"e1","workflow_name":"charge","workflow_id":"w1","status":"Running","started_fresh":true,"deduplicated":false}`),
		reply(200, `{"execution_id":"e1","workflow_name":"charge","workflow_id":"w1","status":"Completed","started_fresh":false,"deduplicated":true,"first_seen_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-03T03:04:05Z"}`),
		reply(200, `{"execution_id":"e1","workflow_name":"charge","workflow_id":"w1","status":"Running"}`))
	at := time.Date(2026, 12, 24, 18, 0, 0, 0, time.FixedZone("x", 3600))
	r, err := c.Start(context.Background(), "charge", map[string]int{"amount_cents": 1},
		StartOptions{IdempotencyKey: "k1", WorkflowID: "w1", ReusePolicy: ReuseRejectDuplicate, StartAt: &at, CompletionCallback: "https://cb.example/x"})
	require.NoError(t, err)
	require.Equal(t, &StartResult{ExecutionID: "e1", WorkflowName: "charge", WorkflowID: "w1", Status: "Running",
		StartedFresh: true, Keyed: true, Raw: r.Raw}, r)
	req := f.last()
	require.Equal(t, "k1", req.key)
	require.JSONEq(t, `{"input":{"amount_cents":1},"workflow_id":"w1","reuse_policy":"reject_duplicate","start_at":"2026-12-24T17:00:00Z","completion_callback":"https://cb.example/x"}`, req.body)

	r, err = c.Start(context.Background(), "charge", json.RawMessage(`{"a": 1}`), StartOptions{IdempotencyKey: "k1", Delay: 90 * time.Second})
	require.NoError(t, err)
	require.True(t, r.Keyed)
	require.True(t, r.Deduplicated)
	require.False(t, r.StartedFresh)
	require.Equal(t, "Completed", r.Status)
	require.NotNil(t, r.FirstSeenAt)
	require.NotNil(t, r.ExpiresAt)
	require.JSONEq(t, `{"input":{"a":1},"delay":"1m30s"}`, f.last().body)

	// Unkeyed, existing: neither fresh nor deduplicated.
	r, err = c.Start(context.Background(), "charge", nil, StartOptions{})
	require.NoError(t, err)
	require.False(t, r.Keyed || r.StartedFresh || r.Deduplicated)
	req = f.last()
	require.Equal(t, "", req.key)
	require.JSONEq(t, `{}`, req.body)

	_, err = c.Start(context.Background(), "charge", json.RawMessage(`{`), StartOptions{})
	require.Error(t, err)
	_, err = c.Start(context.Background(), "charge", nil, StartOptions{Delay: -time.Second})
	require.Error(t, err)
}

func TestStartPollsALateOutcome(t *testing.T) {
	f, c := newFake(t)
	f.handle("POST /api/harvest/workflows/charge/start", reply(202, `{"command_id":"c1","status":"accepted"}`))
	f.handle("GET /api/harvest/commands/c1",
		reply(404, `{"error":"command_not_found","message":"not yet"}`),
		reply(503, `{"error":"unavailable","message":"retry"}`),
		reply(200, `{"command_id":"c1","status":"accepted"}`),
		reply(200, `{"command_id":"c1","status":"applied","http_status":201,"outcome":{"execution_id":"e1","workflow_name":"charge","workflow_id":"w1","status":"Running"}}`))
	r, err := c.Start(context.Background(), "charge", nil, StartOptions{})
	require.NoError(t, err)
	require.Equal(t, "e1", r.ExecutionID)
	require.True(t, r.StartedFresh, "201 in the command's answer")
	require.False(t, r.Keyed)
	require.JSONEq(t, `{"execution_id":"e1","workflow_name":"charge","workflow_id":"w1","status":"Running"}`, string(r.Raw))

	// An applied refusal is the refusal.
	f.handle("POST /api/harvest/workflows/other/start", reply(202, `{"command_id":"c2","status":"accepted"}`))
	f.handle("GET /api/harvest/commands/c2",
		reply(200, `{"command_id":"c2","status":"applied","http_status":409,"outcome":{"error":"workflow_id_conflict","message":"taken"}}`))
	_, err = c.Start(context.Background(), "other", nil, StartOptions{})
	require.ErrorIs(t, err, ErrConflict)
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "workflow_id_conflict", apiErr.Code)

	// A command that stays pending ends with ctx, as a PendingError: the
	// context ends once the command is being polled.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	polled := reply(200, `{"command_id":"c3","status":"accepted"}`)
	f.handle("POST /api/harvest/workflows/slow/start", reply(202, `{"command_id":"c3","status":"accepted"}`))
	f.handle("GET /api/harvest/commands/c3", func(w http.ResponseWriter) {
		polled(w)
		cancel(context.DeadlineExceeded)
	})
	_, err = c.Start(ctx, "slow", nil, StartOptions{})
	var pending *PendingError
	require.ErrorAs(t, err, &pending)
	require.Equal(t, "c3", pending.CommandID)
	require.ErrorIs(t, err, context.Canceled)
}

func TestSignals(t *testing.T) {
	f, c := newFake(t)
	f.handle("POST /api/harvest/executions/e1/signals/item",
		reply(202, `{"ok":true,"signal_delivered":true}`),
		reply(202, `{"ok":true,"signal_delivered":false}`),
		reply(202, `{"ok":true,"command_id":"c1","status":"accepted"}`),
		reply(409, `{"error":"execution_terminal","message":"closed"}`))
	f.handle("GET /api/harvest/commands/c1",
		reply(200, `{"command_id":"c1","status":"applied","http_status":202,"outcome":{"ok":true,"signal_delivered":true}}`))
	ctx := context.Background()
	d, err := c.SendSignalIdempotent(ctx, "e1", "item", map[string]int{"n": 1}, "k")
	require.NoError(t, err)
	require.True(t, d)
	req := f.last()
	require.Equal(t, "k", req.key)
	require.JSONEq(t, `{"n":1}`, req.body)
	d, err = c.SendSignalIdempotent(ctx, "e1", "item", nil, "k")
	require.NoError(t, err)
	require.False(t, d)
	require.Empty(t, f.last().body, "a nil payload sends no body")
	d, err = c.SendSignalIdempotent(ctx, "e1", "item", 1, "k")
	require.NoError(t, err)
	require.True(t, d, "from the polled command")
	err = c.SendSignal(ctx, "e1", "item", "x")
	require.ErrorIs(t, err, ErrConflict)
	require.NotErrorIs(t, err, ErrNotFound)
	require.EqualError(t, err, "execution_terminal: closed")

	_, err = c.SendSignalIdempotent(ctx, "e1", "item", 1, "")
	require.Error(t, err, "a key is required")
	require.Error(t, c.SendSignal(ctx, "", "item", 1))
}

// TestSignalsReachAServerOlderThanTheirRoute: a server that answers the
// signal route's path with 404 not_found (no route: it predates the
// route) is sent the signal on the path it serves, with its key; a 404
// of the route itself is the answer.
func TestSignalsReachAServerOlderThanTheirRoute(t *testing.T) {
	f, c := newFake(t)
	ctx := context.Background()
	f.handle("POST /api/harvest/executions/e1/signals/item",
		reply(404, `{"error":"not_found","message":"no route for POST /api/harvest/executions/e1/signals/item"}`))
	f.handle("POST /api/harvest/workflows/e1/signal/item",
		reply(202, `{"ok":true,"signal_delivered":true}`),
		reply(202, `{"ok":true,"signal_delivered":false}`))
	d, err := c.SendSignalIdempotent(ctx, "e1", "item", 1, "k")
	require.NoError(t, err)
	require.True(t, d)
	first, second := f.last(), f.last()
	require.Equal(t, "/api/harvest/executions/e1/signals/item", first.path)
	require.Equal(t, "/api/harvest/workflows/e1/signal/item", second.path)
	require.Equal(t, "k", second.key)
	require.Equal(t, "1", second.body)
	d, err = c.SendSignalIdempotent(ctx, "e1", "item", 1, "k")
	require.NoError(t, err)
	require.False(t, d)

	f.handle("POST /api/harvest/executions/e2/signals/item",
		reply(404, `{"error":"execution_not_found","message":"no execution e2"}`))
	err = c.SendSignal(ctx, "e2", "item", 1)
	require.ErrorIs(t, err, ErrExecutionNotFound)
}

func TestSignalWithStart(t *testing.T) {
	f, c := newFake(t)
	f.handle("POST /api/harvest/workflows/collect/signal-with-start",
		reply(201, `{"execution_id":"e1","workflow_name":"collect","workflow_id":"o1","status":"Running","started_fresh":true,"signal_delivered":true}`))
	r, err := c.SignalWithStart(context.Background(), "collect", SignalWithStartOptions{
		WorkflowID: "o1", Input: map[string]int{"count": 1}, SignalName: "item", SignalPayload: "x", IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, r.StartedFresh)
	require.True(t, r.SignalDelivered)
	req := f.last()
	require.Equal(t, "k", req.key)
	require.JSONEq(t, `{"workflow_id":"o1","input":{"count":1},"signal_name":"item","signal_payload":"x"}`, req.body)
	_, err = c.SignalWithStart(context.Background(), "collect", SignalWithStartOptions{SignalName: "item"})
	require.Error(t, err, "workflow_id is required")
}

func TestCancelAndTerminate(t *testing.T) {
	f, c := newFake(t)
	ctx := context.Background()
	f.handle("POST /api/harvest/executions/e1/terminate",
		reply(200, `{"execution_id":"e1","status":"Terminated","workflow_id":"w1","workflow_name":"collect"}`),
		reply(202, `{"command_id":"c1","status":"accepted"}`),
		reply(404, `{"error":"execution_not_found","message":"no execution e1"}`))
	f.handle("GET /api/harvest/commands/c1",
		reply(200, `{"command_id":"c1","status":"applied","http_status":200,"outcome":{"execution_id":"e1","workflow_name":"collect","workflow_id":"w1","status":"Completed"}}`))
	r, err := c.Terminate(ctx, "e1", "stuck")
	require.NoError(t, err)
	require.Equal(t, CloseResult{ExecutionID: "e1", WorkflowName: "collect", WorkflowID: "w1", Status: StatusTerminated,
		Raw: json.RawMessage(`{"execution_id":"e1","status":"Terminated","workflow_id":"w1","workflow_name":"collect"}`)}, *r)
	req := f.last()
	require.Equal(t, "POST", req.method)
	require.JSONEq(t, `{"reason":"stuck"}`, req.body)
	r, err = c.Terminate(ctx, "e1", "")
	require.NoError(t, err)
	require.Equal(t, StatusCompleted, r.Status, "from the polled command: it had closed before")
	require.Empty(t, f.last().body, "no reason sends no body")
	f.last() // the poll
	_, err = c.Terminate(ctx, "e1", "")
	require.ErrorIs(t, err, ErrExecutionNotFound)
	f.last()
	_, err = c.Terminate(ctx, "", "")
	require.Error(t, err, "an execution id is required")

	f.handle("POST /api/harvest/executions/e2/cancel",
		reply(200, `{"execution_id":"e2","status":"Cancelled","workflow_id":"w2","workflow_name":"long"}`))
	r, err = c.Cancel(ctx, "e2", "customer left")
	require.NoError(t, err)
	require.Equal(t, StatusCancelled, r.Status)
	require.Equal(t, "w2", r.WorkflowID)
	require.JSONEq(t, `{"reason":"customer left"}`, f.last().body)
	_, err = c.Cancel(ctx, "", "")
	require.Error(t, err, "an execution id is required")
}

func TestReadsAndWaitResult(t *testing.T) {
	f, c := newFake(t)
	running := `{"execution_id":"e1","workflow_name":"charge","workflow_id":"w","status":"Running","input":{},"result":null,"error":null,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z","closed_at":null}`
	f.handle("GET /api/harvest/executions/e1",
		reply(200, running),
		reply(503, `{"error":"unavailable","message":"retry"}`),
		reply(200, `{"execution_id":"e1","workflow_name":"charge","workflow_id":"w","status":"Completed","input":{},"result":{"charge_id":"ch_1"},"error":null,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:06Z","closed_at":"2026-01-02T03:04:06Z"}`))
	f.handle("GET /api/harvest/executions/e2",
		reply(200, `{"execution_id":"e2","workflow_name":"charge","workflow_id":"w","status":"Failed","result":null,"error":{"message":"customer cus_declined: card declined","type":"*errors.errorString","non_retryable":true},"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:06Z","closed_at":"2026-01-02T03:04:06Z"}`))
	f.handle("GET /api/harvest/executions/e3", reply(404, `{"error":"execution_not_found","message":"no execution \"e3\""}`))
	f.handle("GET /api/harvest/executions/e1/history", reply(200,
		`{"events":[{"seq":1,"type":"WorkflowStarted","at":"2026-01-02T03:04:05Z","workflow_name":"charge"},{"seq":2,"type":"ActivityScheduled","at":"2026-01-02T03:04:05.5Z","activity_name":"charge_card","activity_id":1}]}`))
	f.handle("GET /api/harvest/executions", reply(200, `{"executions":[`+running+`]}`))
	ctx := context.Background()

	var out struct {
		ChargeID string `json:"charge_id"`
	}
	e, err := c.WaitResult(ctx, "e1", &out)
	require.NoError(t, err)
	require.Equal(t, "ch_1", out.ChargeID)
	require.Equal(t, StatusCompleted, e.Status)
	require.True(t, e.Terminal())
	require.NotNil(t, e.ClosedAt)

	e, err = c.WaitResult(ctx, "e2", &out)
	var failed *ExecutionFailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, StatusFailed, failed.Status)
	require.Equal(t, "customer cus_declined: card declined", failed.Message)
	require.Equal(t, "execution e2 (charge) Failed: customer cus_declined: card declined", failed.Error())
	require.Equal(t, StatusFailed, e.Status)

	_, err = c.WaitResult(ctx, "e3", nil)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = c.Describe(ctx, "e3")
	require.ErrorIs(t, err, ErrNotFound)

	events, err := c.History(ctx, "e1")
	require.NoError(t, err)
	require.Len(t, events, 2)
	require.Equal(t, 2, events[1].Seq)
	require.Equal(t, "ActivityScheduled", events[1].Type)
	require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 5e8, time.UTC), events[1].At.UTC())
	require.Equal(t, map[string]any{"activity_name": "charge_card", "activity_id": 1.0}, events[1].Attrs)

	for len(f.reqs) > 0 {
		<-f.reqs
	}
	list, err := c.List(ctx, ListOptions{Workflow: "charge", Status: StatusRunning, Limit: 5})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.JSONEq(t, running, string(list[0].Raw))
	require.Equal(t, "limit=5&status=Running&workflow=charge", f.last().query)
}

func TestAPIErrorOfAnythingElse(t *testing.T) {
	e := apiErrorFrom(502, http.Header{"Retry-After": {"3"}}, []byte("<html>bad gateway</html>"))
	require.Equal(t, 502, e.StatusCode)
	require.Empty(t, e.Code)
	require.Equal(t, 3*time.Second, e.RetryAfter)
	require.Equal(t, "HTTP 502: Bad Gateway: <html>bad gateway</html>", e.Error())
	require.False(t, errors.Is(e, ErrNotFound))

	v := apiErrorFrom(422, nil, []byte(`{"error":"input_invalid","message":"m","field":"input","violations":[{"field":"/a","message":"x"}]}`))
	require.Equal(t, []Violation{{Field: "/a", Message: "x"}}, v.Violations)
	require.Equal(t, "input", v.Field)

	u := apiErrorFrom(400, nil, []byte(`{"error":"payload_unstorable","message":"m","field":"input","pointer":"/input/a"}`))
	require.Equal(t, "payload_unstorable", u.Code)
	require.Equal(t, "/input/a", u.Pointer)
}

// TestADeferredStartIsAnAnswer: a start its policy holds back is answered
// as deferred, at once or once a late outcome says so; it is not polled
// until its execution begins.
func TestADeferredStartIsAnAnswer(t *testing.T) {
	f, c := newFake(t)
	f.handle("POST /api/harvest/workflows/digest/start",
		reply(202, `{"command_id":"d1","status":"deferred"}`),
		reply(202, `{"command_id":"d2","status":"accepted"}`))
	f.handle("GET /api/harvest/commands/d2", reply(200, `{"command_id":"d2","status":"deferred"}`))
	policy := &StartPolicy{Batch: &Batch{MaxSize: 10, MaxWait: "5s"}}
	r, err := c.Start(context.Background(), "digest", map[string]int{"n": 1}, StartOptions{StartPolicy: policy})
	require.NoError(t, err)
	require.True(t, r.Deferred)
	require.Equal(t, "d1", r.CommandID)
	require.Empty(t, r.ExecutionID)
	require.JSONEq(t, `{"input":{"n":1},"start_policy":{"batch":{"max_size":10,"max_wait":"5s"}}}`, f.last().body)

	r, err = c.Start(context.Background(), "digest", nil, StartOptions{})
	require.NoError(t, err)
	require.True(t, r.Deferred, "the late outcome says deferred")
	require.Equal(t, "d2", r.CommandID)
	st, err := c.Command(context.Background(), "d2")
	require.NoError(t, err)
	require.True(t, st.Deferred)
	require.False(t, st.Applied)
}

// TestStateAsksForANewerValue: State sends after_seq and wait, holding
// the wait below the HTTP client's timeout so that the answer arrives
// before it; an answer of state_not_found matches ErrStateNotFound.
func TestStateAsksForANewerValue(t *testing.T) {
	f, c := newFake(t)
	f.handle("GET /api/harvest/executions/e1/state/progress",
		reply(200, `{"execution_id":"e1","name":"progress","value":{"n":2},"seq":9,"updated_at":"2026-12-06T12:00:00Z","status":"Running"}`),
		reply(404, `{"error":"state_not_found","message":"never set"}`))
	st, err := c.State(context.Background(), "e1", "progress", StateOptions{AfterSeq: 7, Wait: 20 * time.Second})
	require.NoError(t, err)
	require.Equal(t, 9, st.Seq)
	require.JSONEq(t, `{"n":2}`, string(st.Value))
	require.Equal(t, "after_seq=7&wait=20s", f.last().query)
	_, err = c.State(context.Background(), "e1", "progress", StateOptions{Wait: time.Minute})
	require.ErrorIs(t, err, ErrStateNotFound)
	require.Equal(t, "wait=25s", f.last().query, "below the client's 30 s timeout")
	_, err = c.State(context.Background(), "", "progress", StateOptions{})
	require.Error(t, err)
}
