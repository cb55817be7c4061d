package callback_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

type delivery struct {
	id   string
	body map[string]any
}

func TestCompletionCallbacks(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		got      []delivery
		failures = 2 // the receiver is down for the first two attempts
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		got = append(got, delivery{id: r.Header.Get("Harvest-Delivery-Id"), body: body})
		if failures > 0 {
			failures--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	// The receiver is on loopback: allow-list it, as a deployment would
	// for an internal service.
	policy := callback.Policy{AllowHosts: []string{"127.0.0.0/8"}}
	s := stacktest.Start(t, devstack.Config{
		Ingest: ingest.Config{CallbackPolicy: policy},
		Scheduler: scheduler.Config{
			CallbackPolicy: policy, CallbackPollInterval: 20 * time.Millisecond,
			CallbackRetryDelay: func(int) time.Duration { return 50 * time.Millisecond },
		},
	})
	a := stacktest.StartWorkflow(t, s, "charge", "k-cb", `{`+stacktest.ChargeInput+`, "completion_callback": "`+receiver.URL+`/done"}`)
	require.Equal(t, 201, a.Status, a.Body)
	id := a.Body["execution_id"].(string)
	stacktest.WaitCompleted(t, s, id)
	probe.Until(t, 30*time.Second, "the callback to be delivered", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM callback_deliveries WHERE delivered_at IS NOT NULL`) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 3, "two failed attempts, then the delivery")
	for _, d := range got {
		require.Equal(t, id, d.id, "a stable Harvest-Delivery-Id")
		require.Equal(t, "Completed", d.body["status"])
		require.Equal(t, id, d.body["execution_id"])
		require.NotEmpty(t, d.body["result"].(map[string]any)["charge_id"])
	}
	require.Equal(t, 3, stacktest.DBCount(t, s, `SELECT attempts FROM callback_deliveries`))
}

func TestCallbackTargetsAreVetted(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{}) // no allow-list: public targets only
	committed := stacktest.StartWorkflow(t, s, "charge", "k-cbv", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, committed.Status)
	for _, target := range []string{
		"http://127.0.0.1:9/x", "http://localhost/x", "http://10.0.0.8/x", "http://169.254.169.254/latest/meta-data",
		"http://[::1]/x", "ftp://example.com/x", "not a url",
	} {
		r := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "completion_callback": "`+target+`"}`)
		require.Equal(t, 422, r.Status, "%s: %v", target, r.Body)
		require.Equal(t, "callback_rejected", r.Body["error"], target)
		// A committed keyed start's retry is a replay, whatever its callback.
		replay := stacktest.StartWorkflow(t, s, "charge", "k-cbv", `{`+stacktest.ChargeInput+`, "completion_callback": "`+target+`"}`)
		require.Equal(t, 200, replay.Status, target)
	}
	// A name is refused by the category of what it resolves to, not the
	// address (TestCallbackRefusalsNameNoResolvedAddress).
	r := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "completion_callback": "http://localhost/x"}`)
	require.Equal(t, `callback target rejected: host "localhost" resolves to a private address`, r.Body["message"])
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
}
