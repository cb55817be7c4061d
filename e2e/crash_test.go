package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// buildServices compiles cmd/scheduler and cmd/worker.
func buildServices(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/harvest-engine/harvest/cmd/scheduler", "github.com/harvest-engine/harvest/cmd/worker", "github.com/harvest-engine/harvest/cmd/ingest")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return dir
}

// proc is a service running as a real process.
type proc struct {
	t    *testing.T
	name string
	bin  string
	env  []string
	log  string
	cmd  *exec.Cmd
	n    int
}

func (p *proc) start() {
	p.t.Helper()
	p.n++
	logFile, err := os.Create(fmt.Sprintf("%s.%d.log", p.log, p.n))
	require.NoError(p.t, err)
	p.cmd = exec.Command(p.bin)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	require.NoError(p.t, p.cmd.Start())
	p.t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		_ = logFile.Close()
		if p.t.Failed() {
			p.t.Logf("%s, the end of its log:\n%s", filepath.Base(logFile.Name()), logTail(logFile.Name(), 30))
		}
	})
}

// logTail is the last n lines of the file at path.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

func (p *proc) kill() {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()
	p.t.Logf("killed %s (run %d)", p.name, p.n)
}

// cluster is a scheduler and a worker running as processes, with ingest
// in the test process: it is not killed, and its 2xx answers are the
// acknowledgements that must not be lost.
type cluster struct {
	ctx         context.Context
	db          *pgxpool.Pool
	srv         *httptest.Server
	sched, work *proc
}

func startCluster(t *testing.T, extraEnv ...string) *cluster {
	t.Helper()
	bins := buildServices(t)
	ns := natstest.RunServer(t, natstest.Options{})
	dbURL := pgtest.NewDatabase(t)
	ctx := natstest.Context(t)
	env := []string{
		"HARVEST_NATS_URL=" + ns.ClientURL(),
		"HARVEST_DATABASE_URL=" + dbURL,
		"HARVEST_LEASE_TTL=1s",
		"HARVEST_TASK_ACK_WAIT=2s",
		"HARVEST_LOG_LEVEL=debug",
	}
	env = append(env, extraEnv...)
	logs := t.TempDir()
	c := &cluster{ctx: ctx,
		sched: &proc{t: t, name: "scheduler", bin: filepath.Join(bins, "scheduler"), env: env, log: filepath.Join(logs, "scheduler")},
		work:  &proc{t: t, name: "worker", bin: filepath.Join(bins, "worker"), env: env, log: filepath.Join(logs, "worker")},
	}
	c.sched.start()
	c.work.start()
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	top, err := broker.Declare(ctx, js, broker.Config{})
	require.NoError(t, err)
	c.db, err = pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(c.db.Close)
	// The example workflows are declared, as a deployment's configuration
	// does: their starts are accepted while the worker restarts.
	api, err := ingest.New(ingest.Config{Topology: top, NC: nc, DB: c.db, OutcomeWait: 2 * time.Second, DeclaredWorkflows: examples.Workflows()})
	require.NoError(t, err)
	require.NoError(t, api.Start(ctx))
	t.Cleanup(func() { _ = api.Stop(context.Background()) })
	c.srv = httptest.NewServer(api.Handler())
	t.Cleanup(c.srv.Close)
	return c
}

// post sends a JSON request to ingest and returns the status and body.
func (c *cluster) post(t *testing.T, path, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(c.ctx, "POST", c.srv.URL+path, bytes.NewBufferString(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func (c *cluster) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, c.db.QueryRow(c.ctx, sql, args...).Scan(&n))
	return n
}

// TestTimersAndSignalsSurviveRestarts kills the scheduler and the worker
// while durable timers are pending and keyed signals are in flight: every
// timer fires once, every signal lands once.
func TestTimersAndSignalsSurviveRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	c := startCluster(t)
	const n = 10
	var collectors []string
	for i := range n {
		status, body := c.post(t, "/api/harvest/workflows/sleep/start", fmt.Sprintf("sleep-%d", i), `{"input": {"duration": "3s"}}`)
		require.Contains(t, []int{201, 202}, status, body)
		status, body = c.post(t, "/api/harvest/workflows/collect/start", fmt.Sprintf("collect-%d", i), `{"input": {"count": 3}}`)
		require.Equal(t, 201, status, body)
		collectors = append(collectors, body["execution_id"].(string))
	}
	// Each round sends every collector its item twice, all at once.
	sendRound := func(round int) {
		var wg sync.WaitGroup
		for _, id := range collectors {
			for range 2 {
				wg.Go(func() {
					status, body := c.post(t, "/api/harvest/workflows/"+id+"/signal/item", fmt.Sprintf("evt-%d", round), fmt.Sprint(round))
					assert.Equal(t, 202, status, body)
				})
			}
		}
		wg.Wait()
	}
	sendRound(1)
	c.sched.kill() // timers pending, signals in flight
	sendRound(2)   // accepted while no scheduler runs
	c.sched.start()
	c.work.kill()
	sendRound(3)
	c.work.start()

	probe.Until(t, 3*time.Minute, "every execution to complete", func() bool {
		return c.count(t, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == 2*n
	})
	for _, id := range collectors {
		require.Equal(t, 3, c.count(t, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'SignalReceived'`, id), id)
		var result string
		require.NoError(t, c.db.QueryRow(c.ctx, `SELECT result::text FROM executions WHERE execution_id = $1`, id).Scan(&result))
		require.JSONEq(t, `{"items": [1, 2, 3]}`, result)
	}
	require.Equal(t, n, c.count(t, `SELECT count(*) FROM history_events WHERE type = 'TimerFired'`), "each timer fired once")
	require.Equal(t, n, c.count(t, `SELECT count(*) FROM executions WHERE workflow_name = 'sleep'`))
	require.Zero(t, c.count(t, `SELECT count(*) FROM timers`))
}

type started struct {
	key          string
	status       int
	executionID  string
	commandID    string
	deduplicated bool
}

// TestKilledSchedulerAndWorkerLoseNothing runs the scheduler and the worker
// as processes, SIGKILLs each while workflows are in flight, restarts them,
// and checks that every accepted start completes exactly once.
func TestKilledSchedulerAndWorkerLoseNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	c := startCluster(t)
	ctx, db, srv, sched, work := c.ctx, c.db, c.srv, c.sched, c.work

	const total = 240
	var (
		mu      sync.Mutex
		results []started
	)
	start := func(i int) (started, bool) {
		key := fmt.Sprintf("crash-%d", i)
		name, input := "onboarding", fmt.Sprintf(`{"input": {"user_id": %d}}`, i)
		if i%2 == 1 {
			name, input = "charge", fmt.Sprintf(`{"input": {"amount_cents": %d, "customer_id": "cus_%d"}}`, 100+i, i)
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/api/harvest/workflows/"+name+"/start", bytes.NewBufferString(input))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("start %s: %v", key, err)
			return started{}, false
		}
		defer resp.Body.Close()
		var body struct {
			ExecutionID  string `json:"execution_id"`
			CommandID    string `json:"command_id"`
			Deduplicated bool   `json:"deduplicated"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return started{key: key, status: resp.StatusCode, executionID: body.ExecutionID, commandID: body.CommandID, deduplicated: body.Deduplicated}, true
	}
	submit := func(i int) {
		if r, ok := start(i); ok {
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}
	}
	submitted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(results)
	}

	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				submit(i)
			}
		})
	}
	go func() {
		defer close(next)
		for i := range total {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()

	probe.Until(t, 60*time.Second, "a third of the starts", func() bool { return submitted() >= total/3 })
	sched.kill()
	sched.start()
	probe.Until(t, 60*time.Second, "two thirds of the starts", func() bool { return submitted() >= 2*total/3 })
	work.kill()
	work.start()
	wg.Wait()

	// Every start was acknowledged (201, 200 or 202): none may be lost.
	require.Len(t, results, total)
	byStatus := map[int]int{}
	for _, r := range results {
		require.Contains(t, []int{200, 201, 202}, r.status, "start %s", r.key)
		byStatus[r.status]++
	}
	t.Logf("start answers by status: %v", byStatus)
	// Kill the scheduler once more while the backlog drains.
	sched.kill()
	sched.start()

	probe.Until(t, 3*time.Minute, "every execution to complete", func() bool {
		var done int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM executions WHERE status = 'Completed'`).Scan(&done))
		return done == total
	})

	// Retries converge on the recorded execution.
	for i := range 20 {
		r, ok := start(i)
		require.True(t, ok)
		require.Equal(t, 200, r.status, r.key)
		require.True(t, r.deduplicated, r.key)
		var key string
		require.NoError(t, db.QueryRow(ctx, `SELECT idempotency_key FROM executions WHERE execution_id = $1`, r.executionID).Scan(&key))
		require.Equal(t, r.key, key)
	}

	var executions, keys, starts int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*), count(DISTINCT idempotency_key) FROM executions`).Scan(&executions, &keys))
	require.Equal(t, total, executions, "one execution per key")
	require.Equal(t, total, keys)
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM history_events WHERE type = 'WorkflowStarted'`).Scan(&starts))
	require.Equal(t, total, starts, "one WorkflowStarted per execution")

	// No activity completed twice; every execution closed exactly once.
	var dupActivities, dupClosed int
	require.NoError(t, db.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT execution_id, attrs->>'activity_id' FROM history_events
			WHERE type IN ('ActivityCompleted', 'ActivityFailed', 'ActivityScheduled')
			GROUP BY execution_id, type, attrs->>'activity_id' HAVING count(*) > 1) d`).Scan(&dupActivities))
	require.Zero(t, dupActivities)
	require.NoError(t, db.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT execution_id FROM history_events WHERE type = 'WorkflowCompleted'
			GROUP BY execution_id HAVING count(*) > 1) d`).Scan(&dupClosed))
	require.Zero(t, dupClosed)
	var activitiesDone int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM history_events WHERE type = 'ActivityCompleted'`).Scan(&activitiesDone))
	require.Equal(t, total/2*2+total/2, activitiesDone, "two activities per onboarding, one per charge")

	// Keys answered with an execution id point at that execution.
	for _, r := range results {
		if r.executionID == "" {
			continue
		}
		var key string
		require.NoError(t, db.QueryRow(ctx, `SELECT idempotency_key FROM executions WHERE execution_id = $1`, r.executionID).Scan(&key))
		require.Equal(t, r.key, key)
	}
}
