package devstack_test

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
	s := startStack(t, devstack.Config{
		Ingest: ingest.Config{CallbackPolicy: policy},
		Scheduler: scheduler.Config{
			CallbackPolicy: policy, CallbackPollInterval: 20 * time.Millisecond,
			CallbackRetryDelay: func(int) time.Duration { return 50 * time.Millisecond },
		},
	})
	a := start(t, s, "charge", "k-cb", `{`+chargeInput+`, "completion_callback": "`+receiver.URL+`/done"}`)
	require.Equal(t, 201, a.status, a.body)
	id := a.body["execution_id"].(string)
	waitCompleted(t, s, id)
	eventually(t, 30*time.Second, "the callback to be delivered", func() bool {
		return dbCount(t, s, `SELECT count(*) FROM callback_deliveries WHERE delivered_at IS NOT NULL`) == 1
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
	require.Equal(t, 3, dbCount(t, s, `SELECT attempts FROM callback_deliveries`))
}

func TestCallbackTargetsAreVetted(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{}) // no allow-list: public targets only
	committed := start(t, s, "charge", "k-cbv", `{`+chargeInput+`}`)
	require.Equal(t, 201, committed.status)
	for _, target := range []string{
		"http://127.0.0.1:9/x", "http://localhost/x", "http://10.0.0.8/x", "http://169.254.169.254/latest/meta-data",
		"http://[::1]/x", "ftp://example.com/x", "not a url",
	} {
		r := start(t, s, "charge", "", `{`+chargeInput+`, "completion_callback": "`+target+`"}`)
		require.Equal(t, 422, r.status, "%s: %v", target, r.body)
		require.Equal(t, "callback_rejected", r.body["error"], target)
		// A committed keyed start's retry is a replay, whatever its callback.
		replay := start(t, s, "charge", "k-cbv", `{`+chargeInput+`, "completion_callback": "`+target+`"}`)
		require.Equal(t, 200, replay.status, target)
	}
	// A name is refused by the category of what it resolves to, not the
	// address (TestCallbackRefusalsNameNoResolvedAddress).
	r := start(t, s, "charge", "", `{`+chargeInput+`, "completion_callback": "http://localhost/x"}`)
	require.Equal(t, `callback target rejected: host "localhost" resolves to a private address`, r.body["message"])
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions`))
}
