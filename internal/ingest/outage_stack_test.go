package ingest_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// TestJetStreamOutageAnswers503AndLosesNothing stops the NATS server under
// a running stack: webhooks and starts are refused with 503 and
// Retry-After while it is down; what was acknowledged before is applied
// once it is back, and the refused deliveries, sent again, are too.
func TestJetStreamOutageAnswers503AndLosesNothing(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	store := t.TempDir()
	ns := natstest.RunServer(t, natstest.Options{Port: port, StoreDir: store})
	s := stacktest.Start(t, devstack.Config{NATSURL: ns.ClientURL(), Ingest: ingest.Config{
		PublishTimeout: time.Second,
		Webhooks: []webhook.Endpoint{{
			Source: webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{stacktest.StripeSecret}},
			Rules:  []webhook.Rule{{Event: "payment_intent.succeeded", Workflow: "charge", InputPointer: "/data/object"}},
		}},
	}})

	// Acknowledged just before the outage: the scheduler may not have
	// applied it yet.
	before := stacktest.PaymentEvent("evt_before", 300)
	r := stacktest.Deliver(t, s, "stripe", before, stacktest.StripeSign(before, time.Now()), "application/json")
	require.Equal(t, 202, r.Status, r.Body)

	ns.Shutdown()
	ns.WaitForShutdown()

	during := stacktest.PaymentEvent("evt_during", 400)
	r = stacktest.Deliver(t, s, "stripe", during, stacktest.StripeSign(during, time.Now()), "application/json")
	require.Equal(t, 503, r.Status, r.Body)
	require.Equal(t, "unavailable", r.Body["error"])
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	st := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "during-outage"}, `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 503, st.Status, st.Body)
	require.Equal(t, 503, stacktest.Call(t, "GET", s.URL()+"/readyz", nil, "").Status)

	// JetStream comes back, with its store.
	natstest.RunServer(t, natstest.Options{Port: port, StoreDir: store})
	probe.Until(t, 60*time.Second, "ingest to be ready again", func() bool {
		return stacktest.Call(t, "GET", s.URL()+"/readyz", nil, "").Status == 200
	})
	// The sender retries what was refused.
	probe.Until(t, 60*time.Second, "the refused delivery to be accepted", func() bool {
		r = stacktest.Deliver(t, s, "stripe", during, stacktest.StripeSign(during, time.Now()), "application/json")
		return r.Status == 202 || r.Status == 200
	})
	st = stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "during-outage"}, `{`+stacktest.ChargeInput+`}`)
	require.Contains(t, []int{201, 202}, st.Status, st.Body)

	probe.Until(t, 90*time.Second, "all three charges to complete", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == 3
	})
	require.Equal(t, 3, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE idempotency_key = 'hook:stripe:evt_before'`))
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE idempotency_key = 'hook:stripe:evt_during'`))
	require.Equal(t, 3, s.Services.Payments.Charges())
}
