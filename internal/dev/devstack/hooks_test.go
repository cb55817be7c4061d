package devstack_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

const stripeSecret = "whsec_test_secret"

// stripeSign signs a payload the way Stripe documents: HMAC-SHA256 over
// "<timestamp>.<payload>", sent as "t=<timestamp>,v1=<hex>".
func stripeSign(payload []byte, at time.Time) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(stripeSecret))
	mac.Write([]byte(ts + "." + string(payload)))
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

func hookStack(t *testing.T) *devstack.Stack {
	t.Helper()
	return startStack(t, devstack.Config{Ingest: ingest.Config{Webhooks: []webhook.Endpoint{{
		Source:       webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{"whsec_old", stripeSecret}},
		MaxBodyBytes: 8192,
		// The source's payload schema, as YAML decodes it.
		Schema: map[string]any{"type": "object", "required": []any{"id", "type", "data"}, "properties": map[string]any{
			"id": map[string]any{"type": "string"}, "type": map[string]any{"type": "string"}, "data": map[string]any{"type": "object"},
		}},
		Rules: []webhook.Rule{
			{Event: "payment_intent.succeeded", Workflow: "charge", InputPointer: "/data/object"},
			{Event: "order.item_added", Workflow: "collect", Signal: "item", WorkflowID: "order-{/data/object/order_id}", InputPointer: "/data/object/sku",
				StartInput: map[string]any{"count": 2}},
		},
	}}}})
}

func deliver(t *testing.T, s *devstack.Stack, source string, payload []byte, signature, contentType string) answer {
	t.Helper()
	req, err := http.NewRequest("POST", s.URL()+"/hooks/"+source, bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	if signature != "" {
		req.Header.Set("Stripe-Signature", signature)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header}
	require.NoError(t, json.Unmarshal(raw, &a.body), "%s", raw)
	return a
}

func paymentEvent(id string, amount int) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "type": "payment_intent.succeeded",
		"data": map[string]any{"object": map[string]any{"amount_cents": amount, "customer_id": "cus_" + id}}})
	return b
}

func TestStripeWebhooks(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	now := time.Now()
	ev := paymentEvent("evt_1", 500)

	first := deliver(t, s, "stripe", ev, stripeSign(ev, now), "application/json")
	require.Equal(t, 202, first.status, first.body)
	require.Equal(t, true, first.body["accepted"])
	require.NotEmpty(t, first.body["command_id"])
	again := deliver(t, s, "stripe", ev, stripeSign(ev, now.Add(time.Second)), "application/json; charset=utf-8")
	require.Equal(t, 200, again.status, again.body)
	require.Equal(t, true, again.body["duplicate"])
	eventually(t, 30*time.Second, "the charge to complete", func() bool {
		return dbCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed' AND idempotency_key = 'hook:stripe:evt_1'`) == 1
	})
	require.Equal(t, 1, s.Services.Payments.Charges())

	// Refusals change nothing.
	require.Equal(t, 404, deliver(t, s, "nope", ev, stripeSign(ev, now), "application/json").status)
	bad := deliver(t, s, "stripe", paymentEvent("evt_2", 1), "t=1,v1=00", "application/json")
	require.Equal(t, 401, bad.status)
	require.Equal(t, "invalid_signature", bad.body["error"])
	require.Equal(t, 401, deliver(t, s, "stripe", paymentEvent("evt_2", 1), "", "application/json").status)
	stale := paymentEvent("evt_3", 1)
	require.Equal(t, 401, deliver(t, s, "stripe", stale, stripeSign(stale, now.Add(-10*time.Minute)), "application/json").status)
	require.Equal(t, 415, deliver(t, s, "stripe", ev, stripeSign(ev, now), "text/plain").status)
	big := []byte(`{"id": "evt_big", "type": "x", "pad": "` + string(bytes.Repeat([]byte("x"), 9000)) + `"}`)
	require.Equal(t, 413, deliver(t, s, "stripe", big, stripeSign(big, now), "application/json").status)
	notJSON := []byte(`{"id":`)
	require.Equal(t, 400, deliver(t, s, "stripe", notJSON, stripeSign(notJSON, now), "application/json").status)
	other := []byte(`{"id": "evt_9", "type": "customer.created", "data": {}}`)
	ignored := deliver(t, s, "stripe", other, stripeSign(other, now), "application/json")
	require.Equal(t, 202, ignored.status)
	require.Equal(t, true, ignored.body["ignored"])
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions`))

	// The source's payload schema: checked before routing.
	noData := []byte(`{"id": "evt_nodata", "type": "payment_intent.succeeded"}`)
	r1 := deliver(t, s, "stripe", noData, stripeSign(noData, now), "application/json")
	require.Equal(t, 422, r1.status, r1.body)
	require.Equal(t, "payload_invalid", r1.body["error"])
	require.Contains(t, r1.body["message"], "source stripe")
	require.NotEmpty(t, r1.body["violations"])
	wrongType := []byte(`{"id": 7, "type": "payment_intent.succeeded", "data": {}}`)
	r1 = deliver(t, s, "stripe", wrongType, stripeSign(wrongType, now), "application/json")
	require.Equal(t, 422, r1.status, r1.body)
	require.Equal(t, "/id", r1.body["field"])
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions`))

	// The start checks apply: the input schema, then the admission gate.
	invalid := paymentEvent("evt_bad", 0) // amount_cents 0 fails charge's schema
	r0 := deliver(t, s, "stripe", invalid, stripeSign(invalid, now), "application/json")
	require.Equal(t, 422, r0.status, r0.body)
	require.Equal(t, "input_invalid", r0.body["error"])

	// API callers cannot write into the webhook key namespace.
	r := start(t, s, "charge", "hook:stripe:evt_1", `{`+chargeInput+`}`)
	require.Equal(t, 400, r.status)
}

func TestWebhookSignalWithStart(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	item := func(id, sku string) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "type": "order.item_added", "data": map[string]any{"object": map[string]any{"order_id": "42", "sku": sku}}})
		return b
	}
	for _, e := range [][]byte{item("evt_a", "a"), item("evt_a", "a"), item("evt_b", "b")} {
		r := deliver(t, s, "stripe", e, stripeSign(e, time.Now()), "application/json")
		require.Contains(t, []int{200, 202}, r.status, r.body)
	}
	eventually(t, 30*time.Second, "the order's two items", func() bool {
		return dbCount(t, s, `SELECT count(*) FROM history_events h JOIN executions e USING (execution_id)
			WHERE e.workflow_id = 'order-42' AND h.type = 'SignalReceived'`) == 2
	})
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions WHERE workflow_id = 'order-42'`))
	var id string
	require.NoError(t, s.DB.QueryRow(context.Background(), `SELECT execution_id::text FROM executions WHERE workflow_id = 'order-42'`).Scan(&id))
	require.Equal(t, map[string]any{"items": []any{"a", "b"}}, waitCompleted(t, s, id)["result"], "started with start_input, completed by the two items")
}

func TestWebhookBurstMakesOneExecutionPerEvent(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	const events, copies = 100, 10
	var wg sync.WaitGroup
	statuses := make(chan int, events*copies)
	for i := range events * copies {
		wg.Go(func() {
			ev := paymentEvent(fmt.Sprintf("evt_burst_%d", i%events), 100+i%events)
			// A sender retries a 503 after its Retry-After (the source's
			// webhook_max_in_flight was reached, or the publish outlasted
			// its bound on this loaded machine), as Stripe does.
			r := answer{status: 503}
			for try := 0; r.status == 503 && try < 30; try++ {
				if try > 0 {
					after, _ := strconv.Atoi(r.header.Get("Retry-After"))
					<-time.After(time.Duration(max(after, 1)) * time.Second) // the sender's back-off
				}
				r = deliver(t, s, "stripe", ev, stripeSign(ev, time.Now()), "application/json")
			}
			statuses <- r.status
		})
	}
	wg.Wait()
	close(statuses)
	for st := range statuses {
		require.Contains(t, []int{200, 202}, st)
	}
	eventually(t, 2*time.Minute, "every charge to complete", func() bool {
		return dbCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == events
	})
	require.Equal(t, events, dbCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, events, s.Services.Payments.Charges())
}
