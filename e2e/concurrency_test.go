package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/natstest"
	"github.com/harvest-engine/harvest/internal/pgtest"
)

// TestSameKeyStartsThroughTwoIngestsAndTwoSchedulers fires 64 simultaneous
// starts with one key at two ingest processes, applied by two scheduler
// processes: one execution, one WorkflowStarted, one first task. The
// starts name different workflow ids, so they reach different shards,
// owned by either scheduler.
func TestSameKeyStartsThroughTwoIngestsAndTwoSchedulers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real processes")
	}
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/harvest-engine/harvest/cmd/scheduler", "github.com/harvest-engine/harvest/cmd/worker",
		"github.com/harvest-engine/harvest/cmd/ingest").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	ns := natstest.RunServer(t, natstest.Options{})
	dbURL := pgtest.NewDatabase(t)
	ctx := natstest.Context(t)
	env := []string{"HARVEST_NATS_URL=" + ns.ClientURL(), "HARVEST_DATABASE_URL=" + dbURL, "HARVEST_LEASE_TTL=2s"}
	logs := t.TempDir()
	var ingests []string
	for i := range 2 {
		addr := freeAddr(t)
		ingests = append(ingests, "http://"+addr)
		p := &proc{t: t, name: "ingest", bin: filepath.Join(dir, "ingest"), log: filepath.Join(logs, fmt.Sprintf("ingest%d", i)),
			env: append(env, "HARVEST_HTTP_ADDR="+addr)}
		p.start()
	}
	for i := range 2 {
		p := &proc{t: t, name: "scheduler", bin: filepath.Join(dir, "scheduler"), env: env, log: filepath.Join(logs, fmt.Sprintf("scheduler%d", i))}
		p.start()
	}
	w := &proc{t: t, name: "worker", bin: filepath.Join(dir, "worker"), env: env, log: filepath.Join(logs, "worker")}
	w.start()

	db, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	// Both schedulers hold shards before the burst.
	waitUntil(t, 60*time.Second, "two schedulers to share the shards", func() bool {
		var owners, held int
		_ = db.QueryRow(ctx, `SELECT count(DISTINCT owner), count(*) FROM shard_leases WHERE owner IS NOT NULL AND expires_at > now()`).Scan(&owners, &held)
		return owners == 2 && held == 16
	})
	for _, base := range ingests {
		waitUntil(t, 60*time.Second, "ingest to be ready", func() bool {
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
	}

	const n = 64
	type result struct {
		status int
		id     string
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			body := fmt.Sprintf(`{"input": {"amount_cents": 700, "customer_id": "cus_x"}, "workflow_id": "order-%d"}`, i%8)
			req, _ := http.NewRequestWithContext(ctx, "POST", ingests[i%2]+"/api/harvest/workflows/charge/start", bytes.NewBufferString(body))
			req.Header.Set("Idempotency-Key", "evt-burst-1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			var b struct {
				ExecutionID string `json:"execution_id"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&b)
			results[i] = result{resp.StatusCode, b.ExecutionID}
		})
	}
	close(gate)
	wg.Wait()

	fresh := 0
	var id string
	for i, r := range results {
		require.Contains(t, []int{200, 201}, r.status, "start %d", i)
		if id == "" {
			id = r.id
		}
		require.Equal(t, id, r.id, "start %d", i)
		if r.status == 201 {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "exactly one fresh start")
	waitUntil(t, 60*time.Second, "the execution to complete", func() bool {
		var status string
		_ = db.QueryRow(ctx, `SELECT status FROM executions WHERE execution_id = $1`, id).Scan(&status)
		return status == "Completed"
	})
	var executions, started, wftID int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM executions`).Scan(&executions))
	require.Equal(t, 1, executions)
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM history_events WHERE type = 'WorkflowStarted'`).Scan(&started))
	require.Equal(t, 1, started)
	// Two workflow tasks in all (the first, and the one after the charge):
	// a second first task would show as a higher task id.
	require.NoError(t, db.QueryRow(ctx, `SELECT wft_id FROM executions`).Scan(&wftID))
	require.Equal(t, 2, wftID)
}
