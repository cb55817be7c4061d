package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// get answers GET url: its status and body, or status 0 when nothing
// answers.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

// notReady is /readyz's answer, which must be 503.
func notReady(t *testing.T, admin string) api.ReadinessResponse {
	t.Helper()
	status, body := get(t, admin+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	var r api.ReadinessResponse
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Equal(t, api.CodeNotReady, r.Error)
	return r
}

func waitReady(t *testing.T, admin string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		status, _ := get(t, admin+"/readyz")
		return status == http.StatusOK
	}, within, 50*time.Millisecond, "%s/readyz to answer 200", admin)
}

// runService runs run with cfg until the test ends, and returns the end
// of it: cancel, then the error run returned.
func runService(t *testing.T, cfg config.Config, run service.RunFunc) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			err = <-errc
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// outage shuts the NATS server down, requires /readyz to say so, starts
// it again on its port and store, and requires /readyz to answer 200
// again.
func outage(t *testing.T, ns *server.Server, port int, dir, admin string) {
	t.Helper()
	ns.Shutdown()
	ns.WaitForShutdown()
	require.Eventually(t, func() bool {
		status, body := get(t, admin+"/readyz")
		return status == http.StatusServiceUnavailable && strings.Contains(body, `"NATS: connection `)
	}, 20*time.Second, 50*time.Millisecond, "/readyz to report NATS down")
	natstest.RunServer(t, natstest.Options{Port: port, StoreDir: dir})
	waitReady(t, admin, 30*time.Second)
}

// TestSchedulerServesAdmin: a scheduler with admin_addr answers /healthz
// while it waits for NATS, /readyz 503 until it applies its shards, then
// 200; 503 while NATS is down and 200 once it is back; its metrics on
// /metrics; and nothing once it has stopped.
func TestSchedulerServesAdmin(t *testing.T) {
	t.Parallel()
	natsPort, dir := freePort(t), t.TempDir()
	admin := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	stop := runService(t, config.Config{
		NATSURL: fmt.Sprintf("nats://127.0.0.1:%d", natsPort), DatabaseURL: pgtest.NewDatabase(t),
		AdminAddr: strings.TrimPrefix(admin, "http://"), Shards: 2,
	}, service.RunScheduler)

	// NATS is not up yet: alive, not ready.
	require.Eventually(t, func() bool {
		status, _ := get(t, admin+"/healthz")
		return status == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"starting"}, notReady(t, admin).Reasons)

	ns := natstest.RunServer(t, natstest.Options{Port: natsPort, StoreDir: dir})
	waitReady(t, admin, 60*time.Second)
	status, body := get(t, admin+"/metrics")
	require.Equal(t, http.StatusOK, status)
	for _, m := range []string{"harvest_scheduler_shards_owned 2", "harvest_scheduler_commands_total", "harvest_scheduler_shards_failing 0", "go_goroutines"} {
		require.Contains(t, body, m)
	}

	outage(t, ns, natsPort, dir, admin)

	require.NoError(t, stop())
	status, _ = get(t, admin+"/healthz")
	require.Zero(t, status, "nothing listens once the scheduler has stopped")
}

// TestWorkerServesAdmin: a worker with admin_addr waits for the
// deployment to declare the streams (it binds, never declares), answers
// /readyz 200 once its consumers are bound, 503 while NATS is down and 200
// once it is back, and its metrics on /metrics.
func TestWorkerServesAdmin(t *testing.T) {
	t.Parallel()
	natsPort, dir := freePort(t), t.TempDir()
	ns := natstest.RunServer(t, natstest.Options{Port: natsPort, StoreDir: dir})
	admin := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	stop := runService(t, config.Config{NATSURL: ns.ClientURL(), AdminAddr: strings.TrimPrefix(admin, "http://"), Shards: 1},
		func(ctx context.Context, cfg config.Config, log *slog.Logger) error {
			return service.RunWorker(ctx, cfg, log, func(w *harvest.Worker) {
				harvest.RegisterActivity(w, "noop", func(*harvest.ActivityContext, int) (int, error) { return 0, nil })
			})
		})

	require.Eventually(t, func() bool {
		status, _ := get(t, admin+"/healthz")
		return status == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "the worker's admin server to listen")
	require.Contains(t, notReady(t, admin).Reasons, "starting", "no streams declared yet: the worker waits")
	_, js := natstest.Connect(t, ns)
	_, err := broker.Declare(natstest.Context(t), js, broker.Config{Shards: 1})
	require.NoError(t, err)
	waitReady(t, admin, 60*time.Second)
	n, err := broker.DeployedShards(natstest.Context(t), js)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	status, body := get(t, admin+"/metrics")
	require.Equal(t, http.StatusOK, status)
	for _, m := range []string{`harvest_worker_tasks_received_total{kind="activity",task_queue="default"} 0`,
		"harvest_worker_tasks_completed_total", "harvest_worker_tasks_failed_total", "harvest_worker_activity_attempts_running",
		"harvest_worker_task_duration_seconds", "process_start_time_seconds"} {
		require.Contains(t, body, m)
	}

	outage(t, ns, natsPort, dir, admin)
	require.NoError(t, stop())
}
