package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/admin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

// TestServerAnswersHealthReadinessAndMetrics: /healthz is 200 whatever
// Ready says; /readyz is 200, or 503 with Ready's reasons, as they
// change; /metrics serves the registry; anything else is 404.
func TestServerAnswersHealthReadinessAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "harvest_test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	var reasons atomic.Pointer[[]string]
	reasons.Store(&[]string{"NATS: connection reconnecting", "shard 2: consumer harvest_sched_2 not in place"})
	s, err := admin.New(admin.Config{Addr: "127.0.0.1:0", Registry: reg, Ready: func(ctx context.Context) []string {
		_, ok := ctx.Deadline()
		require.True(t, ok, "a readiness check is bounded")
		return *reasons.Load()
	}})
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	base := "http://" + s.Addr()

	status, body := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"status":"ok"}`, body)

	status, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status)
	var ready api.ReadinessResponse
	require.NoError(t, json.Unmarshal([]byte(body), &ready))
	require.Equal(t, api.ReadinessResponse{
		Status: "not_ready", Error: api.CodeNotReady,
		Message: "NATS: connection reconnecting; shard 2: consumer harvest_sched_2 not in place",
		Reasons: []string{"NATS: connection reconnecting", "shard 2: consumer harvest_sched_2 not in place"},
	}, ready)

	reasons.Store(&[]string{})
	status, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"status":"ready"}`, body)

	status, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "harvest_test_things_total 3")

	status, body = get(t, base+"/nope")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, body, `"error":"not_found"`)
}

// TestServerStartsAndStopsOnce: Stop is safe before Start and twice
// after; a second Start fails, as does listening on an address in use;
// after Stop nothing listens.
func TestServerStartsAndStopsOnce(t *testing.T) {
	_, err := admin.New(admin.Config{})
	require.Error(t, err)

	s, err := admin.New(admin.Config{Addr: "127.0.0.1:0"})
	require.NoError(t, err)
	require.NoError(t, s.Stop(context.Background()), "before Start")
	require.NoError(t, s.Start(context.Background()))
	require.Error(t, s.Start(context.Background()), "twice")
	status, _ := get(t, "http://"+s.Addr()+"/readyz")
	require.Equal(t, http.StatusOK, status, "no Ready: always ready")

	busy, err := admin.New(admin.Config{Addr: s.Addr()})
	require.NoError(t, err)
	require.ErrorContains(t, busy.Start(context.Background()), "admin server")

	require.NoError(t, s.Stop(context.Background()))
	require.NoError(t, s.Stop(context.Background()))
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+s.Addr()+"/healthz", nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	if err == nil {
		_ = res.Body.Close()
	}
	require.Error(t, err, "nothing listens after Stop")
}
