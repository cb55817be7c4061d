package devstack_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
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
	s := startStack(t, devstack.Config{NATSURL: ns.ClientURL(), Ingest: ingest.Config{
		PublishTimeout: time.Second,
		Webhooks: []webhook.Endpoint{{
			Source: webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{stripeSecret}},
			Rules:  []webhook.Rule{{Event: "payment_intent.succeeded", Workflow: "charge", InputPointer: "/data/object"}},
		}},
	}})

	// Acknowledged just before the outage: the scheduler may not have
	// applied it yet.
	before := paymentEvent("evt_before", 300)
	r := deliver(t, s, "stripe", before, stripeSign(before, time.Now()), "application/json")
	require.Equal(t, 202, r.status, r.body)

	ns.Shutdown()
	ns.WaitForShutdown()

	during := paymentEvent("evt_during", 400)
	r = deliver(t, s, "stripe", during, stripeSign(during, time.Now()), "application/json")
	require.Equal(t, 503, r.status, r.body)
	require.Equal(t, "unavailable", r.body["error"])
	require.NotEmpty(t, r.header.Get("Retry-After"))
	st := call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "during-outage"}, `{`+chargeInput+`}`)
	require.Equal(t, 503, st.status, st.body)
	require.Equal(t, 503, call(t, "GET", s.URL()+"/readyz", nil, "").status)

	// JetStream comes back, with its store.
	natstest.RunServer(t, natstest.Options{Port: port, StoreDir: store})
	eventually(t, 60*time.Second, "ingest to be ready again", func() bool {
		return call(t, "GET", s.URL()+"/readyz", nil, "").status == 200
	})
	// The sender retries what was refused.
	eventually(t, 60*time.Second, "the refused delivery to be accepted", func() bool {
		r = deliver(t, s, "stripe", during, stripeSign(during, time.Now()), "application/json")
		return r.status == 202 || r.status == 200
	})
	st = call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "during-outage"}, `{`+chargeInput+`}`)
	require.Contains(t, []int{201, 202}, st.status, st.body)

	eventually(t, 90*time.Second, "all three charges to complete", func() bool {
		return dbCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == 3
	})
	require.Equal(t, 3, dbCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions WHERE idempotency_key = 'hook:stripe:evt_before'`))
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions WHERE idempotency_key = 'hook:stripe:evt_during'`))
	require.Equal(t, 3, s.Services.Payments.Charges())
}
