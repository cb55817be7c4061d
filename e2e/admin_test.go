package e2e

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestServicesServeAdmin runs cmd/scheduler and cmd/worker as processes
// with HARVEST_ADMIN_ADDR: each answers /readyz 200 once it is up, and
// serves its metrics on /metrics; on SIGTERM each stops and exits 0.
func TestServicesServeAdmin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the services as processes")
	}
	bins := buildServices(t)
	ns := natstest.RunServer(t, natstest.Options{})
	ports, err := freePorts(2)
	require.NoError(t, err)
	env := []string{"HARVEST_NATS_URL=" + ns.ClientURL(), "HARVEST_DATABASE_URL=" + pgtest.NewDatabase(t), "HARVEST_SHARDS=2"}
	logs := t.TempDir()
	for i, svc := range []struct{ name, metric string }{
		{"scheduler", "harvest_scheduler_shards_owned 2"},
		{"worker", `harvest_worker_tasks_received_total{kind="workflow",task_queue="default"}`},
	} {
		admin := fmt.Sprintf("127.0.0.1:%d", ports[i])
		p := &proc{t: t, name: svc.name, bin: filepath.Join(bins, svc.name), log: filepath.Join(logs, svc.name),
			env: append([]string{"HARVEST_ADMIN_ADDR=" + admin}, env...)}
		p.start()
		probe.Until(t, 60*time.Second, svc.name+"'s /readyz to answer 200", func() bool {
			res, err := http.Get("http://" + admin + "/readyz")
			if err != nil {
				return false
			}
			_ = res.Body.Close()
			return res.StatusCode == http.StatusOK
		})
		res, err := http.Get("http://" + admin + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Contains(t, string(body), svc.metric)

		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, "%s exits cleanly on SIGTERM", svc.name)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop within 30s of SIGTERM", svc.name)
		}
	}
}
