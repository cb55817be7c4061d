package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

func hookStack(t *testing.T) *devstack.Stack {
	t.Helper()
	return stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Webhooks: []webhook.Endpoint{{
		Source:       webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{"whsec_old", stacktest.StripeSecret}},
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

func TestStripeWebhooks(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	now := time.Now()
	ev := stacktest.PaymentEvent("evt_1", 500)

	first := stacktest.Deliver(t, s, "stripe", ev, stacktest.StripeSign(ev, now), "application/json")
	require.Equal(t, 202, first.Status, first.Body)
	require.Equal(t, true, first.Body["accepted"])
	require.NotEmpty(t, first.Body["command_id"])
	again := stacktest.Deliver(t, s, "stripe", ev, stacktest.StripeSign(ev, now.Add(time.Second)), "application/json; charset=utf-8")
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, true, again.Body["duplicate"])
	probe.Until(t, 30*time.Second, "the charge to complete", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed' AND idempotency_key = 'hook:stripe:evt_1'`) == 1
	})
	require.Equal(t, 1, s.Services.Payments.Charges())

	// Refusals change nothing.
	require.Equal(t, 404, stacktest.Deliver(t, s, "nope", ev, stacktest.StripeSign(ev, now), "application/json").Status)
	bad := stacktest.Deliver(t, s, "stripe", stacktest.PaymentEvent("evt_2", 1), "t=1,v1=00", "application/json")
	require.Equal(t, 401, bad.Status)
	require.Equal(t, "invalid_signature", bad.Body["error"])
	require.Equal(t, 401, stacktest.Deliver(t, s, "stripe", stacktest.PaymentEvent("evt_2", 1), "", "application/json").Status)
	stale := stacktest.PaymentEvent("evt_3", 1)
	require.Equal(t, 401, stacktest.Deliver(t, s, "stripe", stale, stacktest.StripeSign(stale, now.Add(-10*time.Minute)), "application/json").Status)
	require.Equal(t, 415, stacktest.Deliver(t, s, "stripe", ev, stacktest.StripeSign(ev, now), "text/plain").Status)
	big := []byte(`{"id": "evt_big", "type": "x", "pad": "` + string(bytes.Repeat([]byte("x"), 9000)) + `"}`)
	require.Equal(t, 413, stacktest.Deliver(t, s, "stripe", big, stacktest.StripeSign(big, now), "application/json").Status)
	notJSON := []byte(`{"id":`)
	require.Equal(t, 400, stacktest.Deliver(t, s, "stripe", notJSON, stacktest.StripeSign(notJSON, now), "application/json").Status)
	other := []byte(`{"id": "evt_9", "type": "customer.created", "data": {}}`)
	ignored := stacktest.Deliver(t, s, "stripe", other, stacktest.StripeSign(other, now), "application/json")
	require.Equal(t, 202, ignored.Status)
	require.Equal(t, true, ignored.Body["ignored"])
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))

	// The source's payload schema: checked before routing.
	noData := []byte(`{"id": "evt_nodata", "type": "payment_intent.succeeded"}`)
	r1 := stacktest.Deliver(t, s, "stripe", noData, stacktest.StripeSign(noData, now), "application/json")
	require.Equal(t, 422, r1.Status, r1.Body)
	require.Equal(t, "payload_invalid", r1.Body["error"])
	require.Contains(t, r1.Body["message"], "source stripe")
	require.NotEmpty(t, r1.Body["violations"])
	wrongType := []byte(`{"id": 7, "type": "payment_intent.succeeded", "data": {}}`)
	r1 = stacktest.Deliver(t, s, "stripe", wrongType, stacktest.StripeSign(wrongType, now), "application/json")
	require.Equal(t, 422, r1.Status, r1.Body)
	require.Equal(t, "/id", r1.Body["field"])
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))

	// The start checks apply: the input schema, then the admission gate.
	invalid := stacktest.PaymentEvent("evt_bad", 0) // amount_cents 0 fails charge's schema
	r0 := stacktest.Deliver(t, s, "stripe", invalid, stacktest.StripeSign(invalid, now), "application/json")
	require.Equal(t, 422, r0.Status, r0.Body)
	require.Equal(t, "input_invalid", r0.Body["error"])

	// API callers cannot write into the webhook key namespace.
	r := stacktest.StartWorkflow(t, s, "charge", "hook:stripe:evt_1", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 400, r.Status)
}

func TestWebhookSignalWithStart(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	item := func(id, sku string) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "type": "order.item_added", "data": map[string]any{"object": map[string]any{"order_id": "42", "sku": sku}}})
		return b
	}
	for _, e := range [][]byte{item("evt_a", "a"), item("evt_a", "a"), item("evt_b", "b")} {
		r := stacktest.Deliver(t, s, "stripe", e, stacktest.StripeSign(e, time.Now()), "application/json")
		require.Contains(t, []int{200, 202}, r.Status, r.Body)
	}
	probe.Until(t, 30*time.Second, "the order's two items", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM history_events h JOIN executions e USING (execution_id)
			WHERE e.workflow_id = 'order-42' AND h.type = 'SignalReceived'`) == 2
	})
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE workflow_id = 'order-42'`))
	var id string
	require.NoError(t, s.DB.QueryRow(context.Background(), `SELECT execution_id::text FROM executions WHERE workflow_id = 'order-42'`).Scan(&id))
	require.Equal(t, map[string]any{"items": []any{"a", "b"}}, stacktest.WaitCompleted(t, s, id)["result"], "started with start_input, completed by the two items")
}

func TestWebhookBurstMakesOneExecutionPerEvent(t *testing.T) {
	t.Parallel()
	s := hookStack(t)
	const events, copies = 100, 10
	var wg sync.WaitGroup
	statuses := make(chan int, events*copies)
	for i := range events * copies {
		wg.Go(func() {
			ev := stacktest.PaymentEvent(fmt.Sprintf("evt_burst_%d", i%events), 100+i%events)
			// A sender retries a 503 after its Retry-After (the source's
			// webhook_max_in_flight was reached, or the publish outlasted
			// its bound on this loaded machine), as Stripe does.
			r := stacktest.Answer{Status: 503}
			for try := 0; r.Status == 503 && try < 30; try++ {
				if try > 0 {
					after, _ := strconv.Atoi(r.Header.Get("Retry-After"))
					<-time.After(time.Duration(max(after, 1)) * time.Second) // the sender's back-off
				}
				r = stacktest.Deliver(t, s, "stripe", ev, stacktest.StripeSign(ev, time.Now()), "application/json")
			}
			statuses <- r.Status
		})
	}
	wg.Wait()
	close(statuses)
	for st := range statuses {
		require.Contains(t, []int{200, 202}, st)
	}
	probe.Until(t, 2*time.Minute, "every charge to complete", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == events
	})
	require.Equal(t, events, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, events, s.Services.Payments.Charges())
}
