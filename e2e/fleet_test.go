package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// buildFleet compiles cmd/scheduler and the fleet worker
// (testdata/fleetworker).
func buildFleet(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/harvest-engine/harvest/cmd/scheduler", "./testdata/fleetworker")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return dir
}

// TestAFleetOfDifferentWorkersSharesOneQueue: three worker processes on
// the default task queue register {fleet_a}, {fleet_b} and {fleet_a, the
// activity fleet_c}. Mixed starts of fleet_a and fleet_b all complete,
// each task run by a worker that registers its name, none handed back
// for lack of code, and none waits for a hand-back's delay.
func TestAFleetOfDifferentWorkersShareOneQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scheduler and three workers as processes")
	}
	bins := buildFleet(t)
	ns := natstest.RunServer(t, natstest.Options{})
	dbURL := pgtest.NewDatabase(t)
	ctx := natstest.Context(t)
	env := []string{"HARVEST_NATS_URL=" + ns.ClientURL(), "HARVEST_DATABASE_URL=" + dbURL}
	logs := t.TempDir()
	sched := &proc{t: t, name: "scheduler", bin: filepath.Join(bins, "scheduler"), env: env, log: filepath.Join(logs, "scheduler")}
	sched.start()
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	top, err := broker.Declare(ctx, js, broker.Config{})
	require.NoError(t, err)
	db, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	// Nothing declared: ingest accepts a start only once a live worker
	// registers its workflow.
	api, err := ingest.New(ingest.Config{Topology: top, NC: nc, DB: db, OutcomeWait: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, api.Start(ctx))
	t.Cleanup(func() { _ = api.Stop(context.Background()) })
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)

	fleet := []struct{ id, names string }{{"1", "fleet_a"}, {"2", "fleet_b"}, {"3", "fleet_a,fleet_c"}}
	admins := make([]string, len(fleet))
	for i, w := range fleet {
		admins[i] = freeAddr(t)
		(&proc{t: t, name: "worker " + w.id, bin: filepath.Join(bins, "fleetworker"), log: filepath.Join(logs, "worker"+w.id),
			env: append(slices.Clone(env), "FLEET_ID="+w.id, "FLEET_NAMES="+w.names, "HARVEST_ADMIN_ADDR="+admins[i])}).start()
	}
	for _, addr := range admins {
		probe.Until(t, 60*time.Second, "worker "+addr+" ready", func() bool {
			res, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		})
	}
	start := func(name, input string) (int, string) {
		res, err := http.Post(srv.URL+"/api/harvest/workflows/"+name+"/start", "application/json",
			strings.NewReader(fmt.Sprintf(`{"input": %q}`, input)))
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		var body struct {
			ExecutionID string `json:"execution_id"`
		}
		_ = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body.ExecutionID
	}
	// The workers' registrations reach ingest.
	for _, name := range []string{"fleet_a", "fleet_b"} {
		probe.Until(t, 30*time.Second, name+" served", func() bool {
			status, _ := start(name, "warm-up")
			return status == http.StatusCreated || status == http.StatusAccepted
		})
	}

	const starts = 300
	type sent struct {
		name string
		at   time.Time
	}
	var (
		mu   sync.Mutex
		byID = map[string]sent{}
		jobs = make(chan int)
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				name := []string{"fleet_a", "fleet_b"}[i%2]
				at := time.Now()
				status, id := start(name, fmt.Sprint(i))
				if status != http.StatusCreated && status != http.StatusAccepted {
					t.Errorf("start %d of %s: %d", i, name, status)
					continue
				}
				mu.Lock()
				byID[id] = sent{name: name, at: at}
				mu.Unlock()
			}
		})
	}
	for i := range starts {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	require.Len(t, byID, starts)

	ids := make([]string, 0, starts)
	for id := range byID {
		ids = append(ids, id)
	}
	type done struct {
		status string
		result json.RawMessage
		at     time.Time
	}
	var closed map[string]done
	probe.Until(t, 120*time.Second, "every execution to complete", func() bool {
		rows, err := db.Query(ctx, `SELECT execution_id::text, status, coalesce(result, 'null'), closed_at FROM executions
			WHERE execution_id = ANY($1::uuid[]) AND closed_at IS NOT NULL`, ids)
		if err != nil {
			return false
		}
		defer rows.Close()
		closed = map[string]done{}
		for rows.Next() {
			var id string
			var d done
			if rows.Scan(&id, &d.status, &d.result, &d.at) == nil {
				closed[id] = d
			}
		}
		return len(closed) == starts
	})
	ranOn := map[string][]string{"fleet_a": {"1", "3"}, "fleet_b": {"2"}}
	latencies := make([]time.Duration, 0, starts)
	for id, s := range byID {
		d := closed[id]
		require.Equal(t, "Completed", d.status, id)
		var ran struct{ Workflow, Activity string }
		require.NoError(t, json.Unmarshal(d.result, &ran), string(d.result))
		require.Contains(t, ranOn[s.name], ran.Workflow, "%s ran on a worker that registers it", s.name)
		require.Equal(t, "3", ran.Activity, "fleet_c ran on the only worker that registers it")
		latencies = append(latencies, d.at.Sub(s.at))
	}
	slices.Sort(latencies)
	p50, p99, most := latencies[starts/2], latencies[starts*99/100], latencies[starts-1]
	t.Logf("%d starts, start to completion: p50 %s, p99 %s, max %s", starts, p50, p99, most)
	require.Less(t, most, workerrt.UnknownTaskDelay, "no task waited for a hand-back's delay")
	// The bound, on this machine: as one worker registering
	// everything does (p99 about 0.4 s here under -race).
	require.Less(t, p99, time.Second, "p99 start to completion")

	// No worker handed a task back for want of its code.
	for i, addr := range admins {
		handedBack := scrapeCounters(t, "http://"+addr+"/metrics", "harvest_worker_tasks_handed_back_total")
		for series, v := range handedBack {
			if strings.Contains(series, `reason="unknown"`) {
				require.Zero(t, v, "worker %s: %s", fleet[i].id, series)
			}
		}
		require.NotEmpty(t, handedBack, "worker %s exports its hand-backs", fleet[i].id)
	}
}

// scrapeCounters reads the series of the metric name from a Prometheus
// text endpoint: each series' labels (as written) and value.
func scrapeCounters(t *testing.T, url, name string) map[string]float64 {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		_, err := fmt.Sscan(line[i+1:], &v)
		require.NoError(t, err, line)
		out[line[len(name):i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}
