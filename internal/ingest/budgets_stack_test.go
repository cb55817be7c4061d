package ingest_test

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// TestTrickledWebhooksDoNotStarveTheAPI: anyone who can reach /hooks/,
// with no token, keeps twice max_in_flight connections trickling webhook
// bodies a byte at a time (each cut off is dialled again). Authenticated
// starts and reads are answered as quickly as before; /readyz says the
// source's budget is full (degraded, the API's is not); a real delivery
// to that source is answered 503 with Retry-After at once, not queued,
// while another source's are accepted; a trickled body is cut with 408
// body_timeout; and once the trickling stops, deliveries are accepted
// again.
func TestTrickledWebhooksDoNotStarveTheAPI(t *testing.T) {
	const maxInFlight = 4
	a, err := auth.New([]auth.Token{
		{Name: "billing-service", SHA256: auth.Hash("t-billing"), Scopes: []auth.Scope{auth.ScopeStart, auth.ScopeRead}},
	})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{
		Auth: a, Metrics: reg, MaxInFlight: maxInFlight, WebhookMaxInFlight: 2 * maxInFlight,
		Webhooks: []webhook.Endpoint{{
			Source: webhook.Source{Name: "stripe", Kind: webhook.KindStripe, Secrets: []string{stacktest.StripeSecret}},
			Rules:  []webhook.Rule{{Event: "payment_intent.succeeded", Workflow: "charge", InputPointer: "/data/object"}},
		}, {
			Source: webhook.Source{Name: "github", Kind: webhook.KindGitHub, Secrets: []string{"gh-secret"}},
			Rules:  []webhook.Rule{{Event: "push", Workflow: "collect", InputPointer: "/start"}},
		}},
	}})
	token := map[string]string{"Authorization": "Bearer t-billing"}
	// startAndRead starts a charge and reads it back, as billing-service,
	// and says how long each took.
	startAndRead := func(key string) (time.Duration, time.Duration) {
		t.Helper()
		began := time.Now()
		st := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{
			"Authorization": "Bearer t-billing", "Idempotency-Key": key}, `{`+stacktest.ChargeInput+`}`)
		started := time.Since(began)
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, st.Status, "start %s: %v", key, st.Body)
		began = time.Now()
		rd := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+st.Body["execution_id"].(string), token, "")
		read := time.Since(began)
		require.Equal(t, http.StatusOK, rd.Status, "read %s: %v", key, rd.Body)
		require.Equal(t, http.StatusOK, stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?workflow=charge", token, "").Status)
		return started, read
	}
	var usual time.Duration
	for i := range 3 {
		started, read := startAndRead(fmt.Sprintf("before-%d", i))
		usual = max(usual, started, read)
	}

	// The attack: twice max_in_flight connections, each sending a body a
	// byte every 100 ms.
	addr := strings.TrimPrefix(s.URL(), "http://")
	stop := make(chan struct{})
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		status = map[string]int{} // the answers the trickled requests got
	)
	trickle := func() {
		for {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			answered := make(chan struct{})
			go func() {
				defer close(answered)
				line, err := bufio.NewReader(conn).ReadString('\n')
				if err == nil {
					mu.Lock()
					status[strings.Fields(line)[1]]++
					mu.Unlock()
				}
			}()
			_, err = fmt.Fprintf(conn, "POST /hooks/stripe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{")
			tick := time.NewTicker(100 * time.Millisecond)
			for err == nil {
				select {
				case <-stop:
					err = net.ErrClosed
				case <-answered:
					err = net.ErrClosed
				case <-tick.C:
					_, err = conn.Write([]byte(" "))
				}
			}
			tick.Stop()
			_ = conn.Close()
			<-answered
			select {
			case <-stop:
				return
			default:
			}
		}
	}
	for range 2 * maxInFlight {
		wg.Go(trickle)
	}
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})
	inFlight := func() float64 {
		v, _ := probe.Read(t, reg, "harvest_ingest_http_requests_in_flight")
		return v
	}
	// As many as would have taken every slot of max_in_flight.
	probe.Until(t, 30*time.Second, "the trickled deliveries to be in flight", func() bool {
		return inFlight() >= maxInFlight
	})

	// Authenticated starts and reads are answered, as quickly as before.
	for i := range 2 * maxInFlight {
		started, read := startAndRead(fmt.Sprintf("during-%d", i))
		bound := 3*usual + time.Second
		require.Less(t, started, bound, "a start took %s while the usual is %s", started, usual)
		require.Less(t, read, bound, "a read took %s while the usual is %s", read, usual)
	}

	// /readyz: the source's budget is full, the API's is not.
	// (A trickled request cut at its deadline is dialled again at once;
	// these are looked at while none is between the two.)
	var rz stacktest.Answer
	probe.Until(t, 30*time.Second, "/readyz to say the source's budget is full", func() bool {
		rz = stacktest.Call(t, "GET", s.URL()+"/readyz", nil, "")
		return rz.Body["saturated"] != nil
	})
	require.Equal(t, http.StatusOK, rz.Status, rz.Body)
	require.Equal(t, "degraded", rz.Body["status"], rz.Body)
	require.Equal(t, []any{"webhook:stripe"}, rz.Body["saturated"], rz.Body)
	require.Contains(t, rz.Body["message"], "webhook_max_in_flight")

	// A real delivery meanwhile: refused at once, to be sent again.
	event := stacktest.PaymentEvent("evt_during_trickle", 100)
	var r stacktest.Answer
	probe.Until(t, 30*time.Second, "a delivery to be refused while the source's budget is full", func() bool {
		r = stacktest.Deliver(t, s, "stripe", event, stacktest.StripeSign(event, time.Now()), "application/json")
		return r.Status == http.StatusServiceUnavailable
	})
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	require.Contains(t, r.Body["message"], "webhook source stripe")
	// Another source has a budget of its own.
	push := []byte(`{"start": {"count": 0}}`)
	gh := post(t, s.URL()+"/hooks/github", map[string]string{"X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "X-GitHub-Event": "push",
		"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(mac("gh-secret", string(push)))}, push)
	require.Equal(t, http.StatusAccepted, gh.Status, gh.Body)

	// A trickled body is cut at its deadline (2 s, and 1 s for each
	// 256 KiB it announces).
	probe.Until(t, 30*time.Second, "a trickled body to be cut with 408", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return status["408"] > 0
	})

	close(stop)
	wg.Wait()
	probe.Until(t, 30*time.Second, "the delivery to be accepted once the trickling stops", func() bool {
		r = stacktest.Deliver(t, s, "stripe", event, stacktest.StripeSign(event, time.Now()), "application/json")
		return r.Status == http.StatusAccepted || r.Status == http.StatusOK
	})
	probe.Until(t, 30*time.Second, "/readyz to say ready again", func() bool {
		return stacktest.Call(t, "GET", s.URL()+"/readyz", nil, "").Body["status"] == "ready"
	})
	mu.Lock()
	defer mu.Unlock()
	seen := make([]string, 0, len(status))
	for code := range status {
		seen = append(seen, code)
	}
	slices.Sort(seen)
	t.Logf("usual latency %s; the trickled requests were answered %v", usual, status)
	for _, code := range seen {
		require.Contains(t, []string{"408", "503"}, code, "a trickled request answered %s", code)
	}
}
