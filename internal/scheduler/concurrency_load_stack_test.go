package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/pool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// concurrencyLoadStarts is how many starts the concurrency load test
// sends: 200 keeps the normal suite fast; the external check is
// 1,000, asked for with -concurrency.starts=1000 or, where a flag cannot
// be passed to this package alone (go test ./...), with
// HARVEST_CONCURRENCY_LOAD=1000.
var concurrencyLoadStarts = flag.Int("concurrency.starts", defaultConcurrencyLoadStarts(),
	"how many starts TestAConcurrencyPolicyHoldsItsLimitPerKeyUnderLoad sends (HARVEST_CONCURRENCY_LOAD sets the default)")

func defaultConcurrencyLoadStarts() int {
	if n, err := strconv.Atoi(os.Getenv("HARVEST_CONCURRENCY_LOAD")); err == nil && n > 0 {
		return n
	}
	return 200
}

const (
	loadKeys    = 10
	loadLimit   = 2
	loadSenders = 16
)

// loadRun is one execution of the load as PostgreSQL holds it.
type loadRun struct {
	id, key, status string
	began, closed   *time.Time
}

// startLoadCharge starts a charge for customer key under the load's
// policy. It runs on a sender goroutine, so it returns its failure
// rather than failing the test (t.FailNow belongs to the test's own
// goroutine).
func startLoadCharge(ctx context.Context, url, key string) error {
	body := fmt.Sprintf(`{"input": {"amount_cents": 100, "customer_id": %q}, "start_policy": {"concurrency": {"limit": %d, "key": "/customer_id"}}}`, key, loadLimit)
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/api/harvest/workflows/charge/start", bytes.NewBufferString(body))
	if err != nil {
		return fmt.Errorf("start for %s: %w", key, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("start for %s: %w", key, err)
	}
	defer resp.Body.Close()
	var a map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return fmt.Errorf("start for %s: answer %d: %w", key, resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusCreated || (a["status"] != "Running" && a["status"] != "Pending") {
		return fmt.Errorf("start for %s: answered %d %v", key, resp.StatusCode, a)
	}
	return nil
}

// loadRuns reads every charge of the stack from each of its stores.
func loadRuns(t *testing.T, s *devstack.Stack) []loadRun {
	t.Helper()
	pools := s.Pools
	if len(pools) == 0 {
		pools = []*pgxpool.Pool{s.DB}
	}
	var runs []loadRun
	for _, db := range pools {
		rows, err := db.Query(t.Context(), `
			SELECT execution_id, COALESCE(concurrency->>'key', ''), status,
				(concurrency->>'began_at')::timestamptz, closed_at
			FROM executions WHERE workflow_name = 'charge'`)
		require.NoError(t, err)
		for rows.Next() {
			var r loadRun
			require.NoError(t, rows.Scan(&r.id, &r.key, &r.status, &r.began, &r.closed))
			runs = append(runs, r)
		}
		require.NoError(t, rows.Err())
	}
	return runs
}

// maxOverlap is the most of runs whose [began, closed) overlap at one
// instant. A close at the same instant as a begin frees its slot first:
// the begin may be the one the close let through.
func maxOverlap(runs []loadRun) int {
	type event struct {
		at    time.Time
		delta int
	}
	var events []event
	for _, r := range runs {
		events = append(events, event{*r.began, +1}, event{*r.closed, -1})
	}
	sort.Slice(events, func(i, j int) bool {
		if !events[i].at.Equal(events[j].at) {
			return events[i].at.Before(events[j].at)
		}
		return events[i].delta < events[j].delta
	})
	cur, most := 0, 0
	for _, e := range events {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}

// The external check: many starts over 10 keys with limit 2
// never run more than 2 at once per key (from the executions' own begin
// and close times), all complete, and the keys take their turns rather
// than one key's backlog running before the next's.
func TestAConcurrencyPolicyHoldsItsLimitPerKeyUnderLoad(t *testing.T) {
	t.Parallel()
	n := *concurrencyLoadStarts
	s := stacktest.Start(t, devstack.Config{})

	began := time.Now()
	sent := make(map[string]int, loadKeys)
	senders := pool.New().WithErrors().WithMaxGoroutines(loadSenders).WithContext(t.Context())
	for i := range n {
		// Go waits for a free sender, so the starts leave in this order,
		// the keys interleaved.
		key := fmt.Sprintf("k%d", i%loadKeys)
		sent[key]++
		senders.Go(func(ctx context.Context) error { return startLoadCharge(ctx, s.URL(), key) })
	}
	require.NoError(t, senders.Wait())
	startsTook := time.Since(began)

	// Generous: the charges run at most two at a time per key, on two
	// cores shared with the rest of the suite, under -race.
	probe.Until(t, time.Minute+time.Duration(n)*300*time.Millisecond, fmt.Sprintf("%d charges to complete", n), func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE workflow_name = 'charge' AND status = 'Completed'`) == n
	})
	took := time.Since(began)

	runs := loadRuns(t, s)
	require.Len(t, runs, n)
	byKey := make(map[string][]loadRun, loadKeys)
	for _, r := range runs {
		require.Equal(t, "Completed", r.status, "execution %s", r.id)
		require.NotNil(t, r.began, "execution %s never took a slot", r.id)
		require.NotNil(t, r.closed, "execution %s has no closed_at", r.id)
		require.False(t, r.closed.Before(*r.began), "execution %s closed before it began", r.id)
		byKey[r.key] = append(byKey[r.key], r)
	}
	counts := make(map[string]int, len(byKey))
	most := 0
	for key, rs := range byKey {
		counts[key] = len(rs)
		over := maxOverlap(rs)
		require.LessOrEqual(t, over, loadLimit, "key %s ran %d at once", key, over)
		most = max(most, over)
	}
	require.Equal(t, sent, counts, "executions per key")

	// The keys take turns: the first tenth of the begins is not one or
	// two keys' backlog.
	sort.Slice(runs, func(i, j int) bool { return runs[i].began.Before(*runs[j].began) })
	first := make(map[string]bool)
	for _, r := range runs[:max(n/10, 1)] {
		first[r.key] = true
	}
	require.GreaterOrEqual(t, len(first), min(5, loadKeys), "distinct keys among the first %d begins", max(n/10, 1))

	// Not a vacuous pass: some starts found their key's slots taken and
	// waited Pending. One admitted at once began at its created_at; the
	// millisecond allows for began_at being rounded to the microsecond
	// where created_at is truncated.
	waited := stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE workflow_name = 'charge'
		AND (concurrency->>'began_at')::timestamptz > created_at + interval '1 millisecond'`)
	require.Positive(t, waited, "no start waited for a slot")
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Pending'`), "Pending executions left")
	c := stacktest.Call(t, "GET", s.URL()+"/api/harvest/workflows/charge/concurrency?key=k0", nil, "")
	require.Equal(t, 200, c.Status, c.Body)
	require.Equal(t, map[string]any{"workflow": "charge", "key": "k0", "running": 0.0, "pending": 0.0, "limit": float64(loadLimit)}, c.Body)

	t.Logf("%d starts over %d keys, limit %d: sent in %s, all completed in %s; %d waited Pending; at most %d at once per key; first %d begins over %d keys",
		n, loadKeys, loadLimit, startsTook.Round(time.Millisecond), took.Round(time.Millisecond), waited, most, max(n/10, 1), len(first))
}

func TestTheLoadSweepFreesASlotBeforeItTakesOneAtTheSameInstant(t *testing.T) {
	t.Parallel()
	at := func(ms int) *time.Time {
		x := time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond)
		return &x
	}
	back := []loadRun{{began: at(0), closed: at(10)}, {began: at(0), closed: at(5)}, {began: at(5), closed: at(20)}}
	require.Equal(t, 2, maxOverlap(back), "a begin at a close's instant takes the freed slot")
	over := append(back, loadRun{began: at(9), closed: at(12)})
	require.Equal(t, 3, maxOverlap(over))
}
