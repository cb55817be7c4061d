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

	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
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
	declared, err := writeDeclaredConfig(t.TempDir())
	require.NoError(t, err)
	env := []string{"HARVEST_CONFIG=" + declared, "HARVEST_NATS_URL=" + ns.ClientURL(), "HARVEST_DATABASE_URL=" + dbURL, "HARVEST_LEASE_TTL=2s"}
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
	probe.Until(t, 60*time.Second, "two schedulers to share the shards", func() bool {
		var owners, held int
		_ = db.QueryRow(ctx, `SELECT count(DISTINCT owner), count(*) FROM shard_leases WHERE owner IS NOT NULL AND expires_at > now()`).Scan(&owners, &held)
		return owners == 2 && held == 16
	})
	for _, base := range ingests {
		probe.Until(t, 60*time.Second, "ingest to be ready", func() bool {
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
	probe.Until(t, 60*time.Second, "the execution to complete", func() bool {
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

	// ArcFlow's routes through both ingests: concurrent creates with one
	// key make one run, and concurrent redeliveries of one external
	// callback deliver one signal.
	post := func(url, header, key, body string) (int, map[string]any) {
		req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(header, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("POST %s: %v", url, err)
			return 0, nil
		}
		defer resp.Body.Close()
		var b map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&b)
		return resp.StatusCode, b
	}
	runs := make([]map[string]any, 16)
	codes := make([]int, len(runs))
	gate = make(chan struct{})
	for i := range runs {
		wg.Go(func() {
			<-gate
			codes[i], runs[i] = post(ingests[i%2]+"/v1/runs", "Idempotency-Key", "arc-burst-1", `{"workflow": "collect", "input": {"count": 1}}`)
		})
	}
	close(gate)
	wg.Wait()
	fresh = 0
	runID, _ := runs[0]["run_id"].(string)
	require.NotEmpty(t, runID, "%v", runs[0])
	for i := range runs {
		require.Contains(t, []int{200, 201}, codes[i], "create %d: %v", i, runs[i])
		require.Equal(t, runID, runs[i]["run_id"], "create %d", i)
		if codes[i] == 201 {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "exactly one create starts the run")
	answers := make([]map[string]any, 16)
	codes = make([]int, len(answers))
	gate = make(chan struct{})
	for i := range answers {
		wg.Go(func() {
			<-gate
			codes[i], answers[i] = post(ingests[i%2]+"/v1/runs/"+runID+"/external/item", "X-Idempotency-Key", "callback-1", `{"n": 1}`)
		})
	}
	close(gate)
	wg.Wait()
	delivered := 0
	for i, a := range answers {
		require.Equal(t, 202, codes[i], "callback %d: %v", i, a)
		if a["status"] == "accepted" && a["command_id"] == nil {
			delivered++
		}
	}
	require.LessOrEqual(t, delivered, 1, "at most one redelivery is told it was delivered")
	probe.Until(t, 60*time.Second, "the run to complete", func() bool {
		var status string
		_ = db.QueryRow(ctx, `SELECT status FROM executions WHERE execution_id = $1`, runID).Scan(&status)
		return status == "Completed"
	})
	var signals int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'SignalReceived'`, runID).Scan(&signals))
	require.Equal(t, 1, signals)
}
