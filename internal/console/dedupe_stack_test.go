package console_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
	"github.com/harvest-engine/harvest/internal/wire"
)

// consoleStack is a stack with a webhook source, a declared workflow
// that never runs, and completion callbacks to loopback receivers,
// retried quickly and given up after two attempts.
func consoleStack(t *testing.T) *devstack.Stack {
	t.Helper()
	policy := callback.Policy{AllowHosts: []string{"127.0.0.0/8"}}
	return stacktest.Start(t, devstack.Config{
		Ingest: ingest.Config{CallbackPolicy: policy, DeclaredWorkflows: []string{"declared_only"}, Webhooks: []webhook.Endpoint{{
			Source:       webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{stacktest.StripeSecret}},
			MaxBodyBytes: 8192,
			Schema: map[string]any{"type": "object", "required": []any{"id", "type", "data"}, "properties": map[string]any{
				"id": map[string]any{"type": "string"}, "data": map[string]any{"type": "object"},
			}},
			Rules: []webhook.Rule{{Event: "payment_intent.succeeded", Workflow: examples.WorkflowCharge, InputPointer: "/data/object"}},
		}}},
		Scheduler: scheduler.Config{CallbackPolicy: policy, CallbackPollInterval: 20 * time.Millisecond, CallbackMaxAttempts: 2,
			CallbackRetryDelay: func(int) time.Duration { return 50 * time.Millisecond }},
	})
}

// callbackReceiver answers /flaky with 503 once, then 204; /down always
// with 500.
func callbackReceiver(t *testing.T) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	flaky := 1
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path == "/flaky" && flaky > 0:
			flaky--
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.URL.Path == "/flaky":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(receiver.Close)
	return receiver
}

// uiPage reads a console page over HTTP (the API has no tokens).
func uiPage(t *testing.T, s *devstack.Stack, path string) string {
	t.Helper()
	resp, err := http.Get(s.URL() + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return string(body)
}

// againAfterTheWindow publishes cmd as a retry that comes after the
// broker's duplicate window does: under another message id, so the broker
// takes it and the scheduler meets the key's claim.
func againAfterTheWindow(t *testing.T, s *devstack.Stack, shard int, cmd *wire.Command) {
	t.Helper()
	ack, err := s.Topology.PublishCommandAs(t.Context(), shard, cmd, cmd.CommandID+"/after-the-window")
	require.NoError(t, err)
	require.False(t, ack.Duplicate)
}

// TestConsoleShowsWhereDuplicatesWereCaught: a keyed start's duplicates
// caught by each layer (ingest's replay, the broker, the scheduler's
// claim), and a keyed signal's, are counted on their keys and shown by
// describe and the execution page; so are completion callbacks and their
// attempts.
func TestConsoleShowsWhereDuplicatesWereCaught(t *testing.T) {
	t.Parallel()
	s := consoleStack(t)
	receiver := callbackReceiver(t)
	c, ctx := stacktest.Client(t, s)

	// A keyed start of collect (it waits for two items).
	first := stacktest.StartWorkflow(t, s, examples.WorkflowCollect, "dup-key", `{"input": {"count": 2}}`)
	require.Equal(t, 201, first.Status, first.Body)
	id := first.Body["execution_id"].(string)
	// The broker: the same request twice more, within its window.
	for range 2 {
		again := stacktest.StartWorkflow(t, s, examples.WorkflowCollect, "dup-key", `{"input": {"count": 2}}`)
		require.Equal(t, 200, again.Status, again.Body)
		require.Equal(t, id, again.Body["execution_id"])
	}
	// Replay: a retry whose body does not even parse is answered from the
	// key's claim, and not published.
	replayed := stacktest.StartWorkflow(t, s, examples.WorkflowCollect, "dup-key", `{"input":`)
	require.Equal(t, 200, replayed.Status, replayed.Body)
	require.Equal(t, true, replayed.Body["deduplicated"])
	// The claim: the start delivered once more after the broker forgot it.
	againAfterTheWindow(t, s, placement.StartShard(s.Topology.Shards(), examples.WorkflowCollect, "", "dup-key"), &wire.Command{
		CommandID: dedup.StartCommandID(examples.WorkflowCollect, "dup-key"), Kind: wire.KindStart, Start: &wire.StartCommand{
			WorkflowName: examples.WorkflowCollect, WorkflowID: "retried-late", IdempotencyKey: "dup-key", TaskQueue: wire.DefaultTaskQueue,
			Input: json.RawMessage(`{"count": 2}`), AcceptedAt: time.Now().UTC()}})

	// Its signals: one retried (a broker duplicate), then delivered once
	// more after the window (a claim duplicate); one sent once. The key
	// carries HTML, shown as text.
	const hostileKey = "sig-<b>a</b>"
	require.Equal(t, true, stacktest.Signal(t, s, id, "item", hostileKey, "", `"a"`).Body["signal_delivered"])
	require.Equal(t, false, stacktest.Signal(t, s, id, "item", hostileKey, "", `"a"`).Body["signal_delivered"])
	require.Equal(t, true, stacktest.Signal(t, s, id, "item", "sig-b", "", `"b"`).Body["signal_delivered"])
	stacktest.WaitCompleted(t, s, id)
	againAfterTheWindow(t, s, placement.ExecutionShard(s.Topology.Shards(), id), &wire.Command{
		CommandID: dedup.SignalCommandID(id, hostileKey), Kind: wire.KindSignal,
		Signal: &wire.SignalCommand{ExecutionID: id, SignalName: "item", Payload: json.RawMessage(`"a"`), IdempotencyKey: hostileKey}})

	var e *client.Execution
	probe.Until(t, 30*time.Second, "the duplicates to be counted", func() bool {
		var err error
		e, err = c.Describe(ctx, id)
		require.NoError(t, err)
		return e.IdempotencyClaim != nil && e.IdempotencyClaim.Duplicates.Claim == 1 && len(e.SignalKeys) == 2 && e.SignalKeys[0].Duplicates.Claim == 1
	})
	require.Equal(t, client.DuplicateCounts{Replay: 1, Broker: 2, Claim: 1}, e.IdempotencyClaim.Duplicates)
	require.False(t, e.IdempotencyClaim.Expired)
	require.WithinRange(t, e.IdempotencyClaim.FirstSeenAt, e.CreatedAt.Add(-time.Minute), e.CreatedAt.Add(time.Minute))
	require.Equal(t, 24*time.Hour, e.IdempotencyClaim.ExpiresAt.Sub(e.IdempotencyClaim.FirstSeenAt).Round(time.Hour))
	require.Equal(t, hostileKey, e.SignalKeys[0].IdempotencyKey)
	require.True(t, e.SignalKeys[0].Deduplicated)
	require.Equal(t, client.DuplicateCounts{Broker: 1, Claim: 1}, e.SignalKeys[0].Duplicates)
	require.Equal(t, "sig-b", e.SignalKeys[1].IdempotencyKey)
	require.False(t, e.SignalKeys[1].Deduplicated)
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE workflow_name = 'collect'`), "one execution whatever the layer")
	// A listing carries none of it: describe only.
	list, err := c.List(ctx, client.ListOptions{Workflow: examples.WorkflowCollect})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Nil(t, list[0].IdempotencyClaim)

	page := uiPage(t, s, "/ui/executions/"+id)
	require.Contains(t, page, `<dd id="key-duplicates"><strong>4</strong>: <span class="layer">replay 1</span>, <span class="layer">broker 2</span>, <span class="layer">claim 1</span>`)
	require.Contains(t, page, `<dd id="key-claim">first seen `+e.IdempotencyClaim.FirstSeenAt.UTC().Format("2006-01-02 15:04:05.000")+`; expires `)
	require.Contains(t, page, `sig-&lt;b&gt;a&lt;/b&gt;`)
	require.NotContains(t, page, hostileKey)
	require.Contains(t, page, `<span class="status deduplicated">deduplicated</span> 2: <span class="layer">broker 1</span>, <span class="layer">claim 1</span>`)
	require.Equal(t, 1, strings.Count(page, "deduplicated</span>"), "sig-b was not")

	// Completion callbacks: one delivered at the second attempt, one given
	// up after two, one waiting for its execution to close.
	flaky := stacktest.StartWorkflow(t, s, examples.WorkflowCharge, "", `{`+stacktest.ChargeInput+`, "completion_callback": "`+receiver.URL+`/flaky"}`)
	require.Equal(t, 201, flaky.Status, flaky.Body)
	down := stacktest.StartWorkflow(t, s, examples.WorkflowCharge, "", `{`+stacktest.ChargeInput+`, "completion_callback": "`+receiver.URL+`/down?token=x"}`)
	require.Equal(t, 201, down.Status, down.Body)
	waiting := stacktest.StartWorkflow(t, s, examples.WorkflowCollect, "", `{"input": {"count": 1}, "completion_callback": "`+receiver.URL+`/later"}`)
	require.Equal(t, 201, waiting.Status, waiting.Body)
	describe := func(id string) *client.Execution {
		e, err := c.Describe(ctx, id)
		require.NoError(t, err)
		return e
	}
	probe.Until(t, 30*time.Second, "the callbacks to be delivered or given up", func() bool {
		f, d := describe(flaky.Body["execution_id"].(string)).CompletionCallback, describe(down.Body["execution_id"].(string)).CompletionCallback
		return f != nil && f.Status == client.CallbackDelivered && d != nil && d.Status == client.CallbackFailed
	})
	cb := describe(flaky.Body["execution_id"].(string)).CompletionCallback
	require.Equal(t, receiver.URL+"/flaky", cb.URL)
	require.Equal(t, 2, cb.Attempts)
	require.NotNil(t, cb.DeliveredAt)
	require.Nil(t, cb.NextAttemptAt)
	page = uiPage(t, s, "/ui/executions/"+flaky.Body["execution_id"].(string))
	require.Contains(t, page, `<span class="status delivered">delivered</span>`)
	require.Contains(t, page, `<dd id="callback-attempts">2</dd>`)

	cb = describe(down.Body["execution_id"].(string)).CompletionCallback
	require.Equal(t, 2, cb.Attempts)
	require.Contains(t, cb.LastError, "500")
	require.NotNil(t, cb.FailedAt)
	page = uiPage(t, s, "/ui/executions/"+down.Body["execution_id"].(string))
	require.Contains(t, page, `<span class="status failed">failed</span>`)
	require.Contains(t, page, receiver.URL+"/down?token=x")
	require.Contains(t, page, "Last error")

	cb = describe(waiting.Body["execution_id"].(string)).CompletionCallback
	require.Equal(t, client.CallbackDelivery{URL: receiver.URL + "/later", Status: client.CallbackWaiting}, *cb)
	require.Contains(t, uiPage(t, s, "/ui/executions/"+waiting.Body["execution_id"].(string)), "until the execution closes")
}

// TestConsoleShowsWebhookSourcesAndEveryWorkflow: the webhooks page counts
// a source's deliveries by what became of them, refusals by reason, and
// says whose counts they are; the workflows page lists the workflows
// that never ran, declared or served.
func TestConsoleShowsWebhookSourcesAndEveryWorkflow(t *testing.T) {
	t.Parallel()
	s := consoleStack(t)
	c, ctx := stacktest.Client(t, s)
	now := time.Now()
	sign := func(b []byte) string { return stacktest.StripeSign(b, time.Now()) }

	ev := stacktest.PaymentEvent("evt_console", 300)
	require.Equal(t, 202, stacktest.Deliver(t, s, "stripe", ev, sign(ev), "application/json").Status)
	require.Equal(t, 200, stacktest.Deliver(t, s, "stripe", ev, sign(ev), "application/json").Status, "a duplicate")
	other := []byte(`{"id": "evt_other", "type": "customer.created", "data": {}}`)
	require.Equal(t, 202, stacktest.Deliver(t, s, "stripe", other, sign(other), "application/json").Status, "ignored")
	require.Equal(t, 401, stacktest.Deliver(t, s, "stripe", ev, "t=1,v1=00", "application/json").Status)
	require.Equal(t, 401, stacktest.Deliver(t, s, "stripe", ev, "", "application/json").Status)
	noData := []byte(`{"id": "evt_nodata", "type": "payment_intent.succeeded"}`)
	require.Equal(t, 422, stacktest.Deliver(t, s, "stripe", noData, sign(noData), "application/json").Status, "the source's schema")
	big := []byte(`{"id": "evt_big", "type": "x", "pad": "` + strings.Repeat("x", 9000) + `"}`)
	require.Equal(t, 413, stacktest.Deliver(t, s, "stripe", big, sign(big), "application/json").Status)
	notJSON := []byte(`{"id":`)
	require.Equal(t, 400, stacktest.Deliver(t, s, "stripe", notJSON, sign(notJSON), "application/json").Status)
	require.Equal(t, 415, stacktest.Deliver(t, s, "stripe", ev, sign(ev), "text/plain").Status)
	require.Equal(t, 404, stacktest.Deliver(t, s, "nosuch", ev, sign(ev), "application/json").Status)

	var hooks client.ListWebhooksResponse
	a := stacktest.Call(t, "GET", s.URL()+"/api/harvest/webhooks", nil, "")
	require.Equal(t, 200, a.Status)
	raw, err := json.Marshal(a.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &hooks))
	require.WithinRange(t, hooks.CountedSince, now.Add(-10*time.Minute), now)
	require.Len(t, hooks.Sources, 1)
	src := hooks.Sources[0]
	require.Equal(t, "stripe", src.Name)
	require.Equal(t, webhook.KindStripe, src.Kind)
	require.True(t, src.PayloadSchema)
	require.Equal(t, []client.RoutingRule{{Event: "payment_intent.succeeded", Workflow: examples.WorkflowCharge}}, src.Rules)
	require.Equal(t, client.WebhookCounts{Accepted: 1, Duplicate: 1, Ignored: 1, Refused: 6}, src.Counts)
	require.Equal(t, client.WebhookRefusals{BadSignature: 2, Schema: 1, TooLarge: 1, Malformed: 2}, src.Refused)
	require.EqualValues(t, 1, hooks.UnknownSource)
	require.Empty(t, hooks.Bindings)

	page := uiPage(t, s, "/ui/webhooks")
	require.Contains(t, page, `<a href="/ui/webhooks" aria-current="page">Webhooks</a>`)
	require.Contains(t, page, "since it started, "+hooks.CountedSince.Format("2006-01-02 15:04:05.000"))
	require.Contains(t, page, "harvest_ingest_webhooks_total")
	for class, n := range map[string]string{"accepted": "1", "duplicate": "1", "ignored": "1", "bad-signature": "2", "schema": "1",
		"too-large": "1", "malformed": "2", "unavailable": "0"} {
		require.Contains(t, page, `<td class="num `+class+`">`+n+`</td>`, class)
	}
	require.Contains(t, page, `1 delivery went to a source that is not configured`)

	// The webhook's duplicate counts against the start key it made.
	var charge *client.Execution
	probe.Until(t, 30*time.Second, "the webhook's broker duplicate to be counted", func() bool {
		list, err := c.List(ctx, client.ListOptions{Workflow: examples.WorkflowCharge})
		require.NoError(t, err)
		if len(list) != 1 {
			return false
		}
		charge, err = c.Describe(ctx, list[0].ExecutionID)
		require.NoError(t, err)
		return charge.IdempotencyClaim != nil && charge.IdempotencyClaim.Duplicates.Broker == 1
	})
	require.Equal(t, "hook:stripe:evt_console", charge.IdempotencyKey)
	require.Equal(t, client.DuplicateCounts{Broker: 1}, charge.IdempotencyClaim.Duplicates)

	// Workflows that never ran: one declared, one a live worker serves.
	var wfs client.ListWorkflowsResponse
	a = stacktest.Call(t, "GET", s.URL()+"/api/harvest/workflows", nil, "")
	raw, err = json.Marshal(a.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &wfs))
	byName := map[string]client.WorkflowSummary{}
	for _, w := range wfs.Workflows {
		byName[w.Name] = w
	}
	require.Equal(t, client.WorkflowSummary{Name: "declared_only", Counts: map[string]int64{}, InputSchema: json.RawMessage("null"),
		Admission: client.AdmissionGate{Workflow: "declared_only", State: "open"}, Declared: true}, byName["declared_only"])
	require.Empty(t, byName[examples.WorkflowSleep].Counts)
	require.Equal(t, 1, byName[examples.WorkflowSleep].Workers, "the stack's worker serves it")
	require.False(t, byName[examples.WorkflowSleep].Declared)
	require.True(t, byName[examples.WorkflowCharge].Declared, "a webhook rule names it")
	page = uiPage(t, s, "/ui/workflows")
	row := func(name string) string {
		i := strings.Index(page, `<a href="/ui/executions?workflow=`+name+`">`)
		require.GreaterOrEqual(t, i, 0, name)
		j := strings.Index(page[i:], "</tr>")
		return page[i : i+j]
	}
	require.Contains(t, row("declared_only"), "never ran")
	require.Contains(t, row("declared_only"), "no live worker")
	require.Contains(t, row("declared_only"), "declared in the configuration")
	require.Contains(t, row(examples.WorkflowSleep), "never ran")
	require.Contains(t, row(examples.WorkflowSleep), "1 live worker<")
	require.NotContains(t, row(examples.WorkflowCharge), "never ran")
	require.True(t, bytes.Contains([]byte(page), []byte(`<a href="/ui/webhooks">Webhooks</a>`)), "the nav links the webhooks page")
}
