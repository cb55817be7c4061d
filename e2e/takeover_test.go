package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestSchedulersOnAClusterShareShardsAndTakeOver runs two schedulers and a
// worker as processes against a 3-node NATS cluster with 3 replicas.
// Once both are up for a lease period the shards are split evenly; a
// scheduler SIGKILLed mid-load has its shards taken over within lease_ttl
// and a renewal, and the executions it owned complete; a SIGTERMed one
// releases its shards at once.
func TestSchedulersOnAClusterShareShardsAndTakeOver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the services as processes")
	}
	const (
		shards   = 8
		leaseTTL = 2 * time.Second
		keys     = 60
	)
	bins := buildServices(t)
	nats3 := natstest.RunCluster(t, 3)
	dbURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	start := time.Now()
	phase := func(what string) { t.Logf("%s: %s", time.Since(start).Round(10*time.Millisecond), what) }
	env := []string{
		"HARVEST_NATS_URL=" + nats3.URL(),
		"HARVEST_NATS_REPLICAS=3",
		fmt.Sprintf("HARVEST_SHARDS=%d", shards),
		"HARVEST_DATABASE_URL=" + dbURL,
		"HARVEST_LEASE_TTL=" + leaseTTL.String(),
		"HARVEST_LOG_LEVEL=debug",
	}
	logs := t.TempDir()
	scheduler := func(name string) *proc {
		return &proc{t: t, name: name, bin: filepath.Join(bins, "scheduler"), env: env, log: filepath.Join(logs, name)}
	}
	a, b := scheduler("scheduler-a"), scheduler("scheduler-b")
	work := &proc{t: t, name: "worker", bin: filepath.Join(bins, "worker"), env: env, log: filepath.Join(logs, "worker")}
	a.start()
	b.start()
	work.start()

	db, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	nc, err := nats.Connect(nats3.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	// Each attempt is bounded: a JetStream request the cluster leaves
	// unanswered (a server that has not yet heard of the meta leader)
	// would otherwise wait for the test's whole context.
	bind := func() (*broker.Topology, error) {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		return broker.Bind(actx, js)
	}
	var top *broker.Topology
	deadline := time.Now().Add(90 * time.Second)
	for top, err = bind(); err != nil; top, err = bind() {
		if time.Now().After(deadline) {
			for _, p := range []string{"scheduler-a.1.log", "scheduler-b.1.log"} {
				data, _ := os.ReadFile(filepath.Join(logs, p))
				t.Logf("%s:\n%s", p, data)
			}
			t.Fatalf("the schedulers did not declare the streams: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
	phase("the schedulers declared the streams")
	api, err := ingest.New(ingest.Config{Topology: top, NC: nc, DB: db, OutcomeWait: 5 * time.Second, DeclaredWorkflows: examples.Workflows()})
	require.NoError(t, err)
	require.NoError(t, api.Start(ctx))
	t.Cleanup(func() { _ = api.Stop(context.Background()) })
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	c := &cluster{ctx: ctx, db: db, srv: srv}

	// owners counts the live leases of each scheduler process.
	owners := func() map[string]int {
		rows, err := db.Query(ctx, `SELECT owner, count(*) FROM shard_leases WHERE expires_at > now() AND owner IS NOT NULL GROUP BY owner`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var owner string
			var n int
			require.NoError(t, rows.Scan(&owner, &n))
			out[owner] = n
		}
		require.NoError(t, rows.Err())
		return out
	}
	even := func() bool {
		o := owners()
		if len(o) != 2 {
			return false
		}
		for _, n := range o {
			if n != shards/2 {
				return false
			}
		}
		return true
	}
	// alone: one scheduler holds every shard.
	alone := func() bool {
		o := owners()
		for _, n := range o {
			return len(o) == 1 && n == shards
		}
		return false
	}
	probe.Until(t, 60*time.Second, "the shards to be split evenly between the two schedulers", even)
	phase("the shards are split evenly")

	// Keyed starts in flight while scheduler a is killed.
	var wg sync.WaitGroup
	statuses := make([]int, keys)
	for k := range keys {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/harvest/workflows/onboarding/start",
				strings.NewReader(fmt.Sprintf(`{"input": {"user_id": %d}}`, k)))
			if err != nil {
				t.Errorf("start %d: %v", k, err)
				return
			}
			req.Header.Set("Idempotency-Key", fmt.Sprintf("takeover-%d", k))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("start %d: %v", k, err)
				return
			}
			_ = resp.Body.Close()
			statuses[k] = resp.StatusCode
		})
		if k == keys/3 {
			a.kill()
		}
	}
	killed := time.Now()
	probe.Until(t, 30*time.Second, "scheduler b to hold every shard", alone)
	took := time.Since(killed)
	t.Logf("scheduler b held every shard %s after a was killed (lease_ttl %s)", took.Round(10*time.Millisecond), leaseTTL)
	require.Less(t, took, 3*leaseTTL, "a killed scheduler's shards move within lease_ttl and a renewal (with room for a loaded machine)")
	wg.Wait()
	for k, s := range statuses {
		require.Contains(t, []int{http.StatusOK, http.StatusCreated, http.StatusAccepted}, s, "start %d", k)
	}
	probe.Until(t, 90*time.Second, "every execution to complete", func() bool {
		return c.count(t, `SELECT count(*) FROM executions WHERE status <> 'Completed'`) == 0 &&
			c.count(t, `SELECT count(*) FROM executions`) == keys
	})
	phase("every execution completed")
	require.Equal(t, keys, c.count(t, `SELECT count(*) FROM history_events WHERE type = 'WorkflowStarted'`))
	require.Equal(t, keys, c.count(t, `SELECT count(*) FROM history_events WHERE type = 'WorkflowCompleted'`))
	require.Equal(t, c.count(t, `SELECT count(*) FROM history_events WHERE type = 'ActivityScheduled'`),
		c.count(t, `SELECT count(*) FROM history_events WHERE type = 'ActivityCompleted'`))

	// A SIGTERMed scheduler releases its leases as it stops: the other
	// takes them without waiting for them to lapse.
	a.start()
	probe.Until(t, 60*time.Second, "the shards to be split evenly again", even)
	var bOwner string
	for owner := range owners() {
		if strings.Contains(owner, fmt.Sprintf("-%d-", b.cmd.Process.Pid)) {
			bOwner = owner
		}
	}
	require.NotEmpty(t, bOwner, "scheduler b's owner name carries its pid")
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, b.cmd.Wait(), "scheduler b exits cleanly on SIGTERM")
	require.Zero(t, c.count(t, `SELECT count(*) FROM shard_leases WHERE owner = $1 AND expires_at > now()`, bOwner),
		"a SIGTERMed scheduler leaves no lease to lapse")
	stopped := time.Now()
	probe.Until(t, 30*time.Second, "scheduler a to hold every shard", alone)
	t.Logf("scheduler a held every shard %s after b stopped", time.Since(stopped).Round(10*time.Millisecond))
}
