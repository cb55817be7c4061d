//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/scheduler"
)

// batchResetN is how many executions TestABatchResetsAnOutageThroughASchedulerKill
// fails and resets; docs/batches.md gives its figures at 2,000
// (-batch.reset.n 2000).
var batchResetN = flag.Int("batch.reset.n", 150, "executions the batch reset test fails by an outage and resets with one batch")

// TestABatchResetsAnOutageThroughASchedulerKill is issue 38's check from
// outside, on the chaos suite's stack of processes: executions of
// chaos_reset (e2e/testdata/fleetworker/reset.go) each charge step a,
// then charge step b and fail for good, their confirmation lost to a
// provider outage. The outage ends (each order gets its permit) and one
// batch resets every one to its failed b, at a rate that makes it take a
// few seconds; while it runs, both schedulers are SIGKILLed and started
// again. The batch completes with each execution matched and done once;
// each has exactly two runs, the first Failed naming the second, the
// second Completed; and at the provider each order's steps made their
// effects exactly once: a run again of a, a new key for b, or an
// execution the batch reset twice would show.
func TestABatchResetsAnOutageThroughASchedulerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a stack of real processes and kills them")
	}
	n := *batchResetN
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	began := time.Now()
	phase := func(format string, args ...any) {
		t.Logf("%s: %s", time.Since(began).Round(10*time.Millisecond), fmt.Sprintf(format, args...))
	}
	bins := t.TempDir()
	require.NoError(t, buildChaosBinaries(bins))
	st, err := newStack(ctx, stackConfig{bins: bins, leaseTTL: scheduler.DefaultLeaseTTL, ackWait: harvest.DefaultTaskAckWait,
		logLevel: "info", natsNodes: 1, stores: 1})
	require.NoError(t, err)
	t.Cleanup(st.close)
	require.NoError(t, st.waitHealthy(ctx, "canary-batch-reset"))
	phase("the stack serves")

	prefix := fmt.Sprintf("batchreset-%d-", time.Now().UnixNano())
	sem := make(chan struct{}, 32)
	errs := make(chan error, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			key := fmt.Sprintf("%s%05d", prefix, i)
			a := st.startRetrying(ctx, workflowReset, i%2, key, fmt.Sprintf(`{"input": {"order": %q}}`, key), time.Now().Add(2*time.Minute), func(answer) {})
			if !a.ok() {
				errs <- fmt.Errorf("start %s: %s", key, a)
			}
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	phase("%d starts acknowledged", n)
	count := func(sql string, args ...any) int {
		t.Helper()
		c, err := st.dbCount(ctx, 0, sql, args...)
		require.NoError(t, err)
		return c
	}
	failedSQL := `SELECT count(*) FROM executions WHERE workflow_name = 'chaos_reset' AND starts_with(idempotency_key, $1) AND status = 'Failed'`
	waitUntil(t, 5*time.Minute, fmt.Sprintf("%d executions Failed", n), func() bool { return count(failedSQL, prefix) == n })
	phase("%d executions failed by the outage", n)
	for i := range n {
		key := fmt.Sprintf("%s%05d", prefix, i)
		_, err := st.provider.CreateCharge(ctx, "reset-permit:"+key, 1, "permit_"+key)
		require.NoError(t, err)
	}

	rate := max(n/8, 1)
	body := fmt.Sprintf(`{"operation": "reset", "filter": {"workflow": "chaos_reset", "status": "Failed", "key_prefix": %q},
		"reset": {"to": {"activity": "chaos_reset_b", "occurrence": "last_failed"}}, "reason": "outage over", "rate": %d}`, prefix, rate)
	var batchID string
	for batchID == "" {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, st.baseURLs[0]+"/api/harvest/batches", bytes.NewBufferString(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", prefix+"batch")
		resp, err := st.client.Do(req)
		require.NoError(t, err)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusCreated, http.StatusOK:
			var b struct {
				BatchID string `json:"batch_id"`
			}
			require.NoError(t, json.Unmarshal(data, &b))
			batchID = b.BatchID
		case http.StatusServiceUnavailable:
			time.Sleep(200 * time.Millisecond) // a retry with the same key; not synchronisation
		default:
			t.Fatalf("create the batch: %d %s", resp.StatusCode, data)
		}
	}
	phase("batch %s started at %d a second", batchID, rate)
	type progress struct {
		State                 string `json:"state"`
		Matched, Done, Failed int
		Errors                []struct{ ExecutionID, Error, Message string }
	}
	read := func() (progress, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.baseURLs[1]+"/api/harvest/batches/"+batchID, nil)
		require.NoError(t, err)
		resp, err := st.client.Do(req)
		if err != nil {
			return progress{}, false
		}
		defer resp.Body.Close()
		var p progress
		return p, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&p) == nil
	}
	waitUntil(t, time.Minute, "the batch to send to a third", func() bool {
		p, ok := read()
		return ok && p.Matched >= n/3
	})
	p, _ := read()
	phase("the batch has sent to %d, %d done: SIGKILL both schedulers", p.Matched, p.Done)
	for _, s := range st.scheds {
		_, err := s.stop(syscall.SIGKILL, time.Second)
		require.NoError(t, err)
	}
	time.Sleep(time.Second) // downtime, not synchronisation
	for _, s := range st.scheds {
		require.NoError(t, s.start(ctx))
	}
	phase("the schedulers started again")
	waitUntil(t, 5*time.Minute, "the batch to complete", func() bool {
		p, _ = read()
		return p.State == "completed"
	})
	phase("the batch completed: %d matched, %d done, %d failed", p.Matched, p.Done, p.Failed)
	require.Equal(t, n, p.Matched, "%+v", p)
	require.Equal(t, n, p.Done, "%+v", p)
	require.Equal(t, 0, p.Failed, "%+v", p)

	completedSQL := `SELECT count(*) FROM executions WHERE workflow_name = 'chaos_reset' AND starts_with(idempotency_key, $1)
		AND status = 'Completed' AND reset->>'from' IS NOT NULL`
	waitUntil(t, 5*time.Minute, fmt.Sprintf("%d reset runs Completed", n), func() bool { return count(completedSQL, prefix) == n })
	phase("%d reset runs completed", n)
	// Two runs a key, linked both ways.
	type run struct{ id, status, from, to string }
	runs := map[string][]run{}
	require.NoError(t, st.queryAll(ctx, `SELECT idempotency_key, execution_id::text, status, coalesce(reset->>'from', ''), coalesce(reset->>'to', '')
		FROM executions WHERE workflow_name = 'chaos_reset' AND starts_with(idempotency_key, $1)`, []any{prefix}, func(rows pgx.Rows) error {
		var key string
		var r run
		if err := rows.Scan(&key, &r.id, &r.status, &r.from, &r.to); err != nil {
			return err
		}
		runs[key] = append(runs[key], r)
		return nil
	}))
	require.Len(t, runs, n)
	effects := map[string]map[string]int{}
	for customer, charges := range st.charges.byCustomer("reset_" + prefix) {
		order, step, _ := strings.Cut(strings.TrimPrefix(customer, "reset_"), "/")
		if effects[order] == nil {
			effects[order] = map[string]int{}
		}
		effects[order][step] += len(charges)
	}
	var wrong []string
	for key, rs := range runs {
		if len(rs) != 2 {
			wrong = append(wrong, fmt.Sprintf("%s: %d runs", key, len(rs)))
			continue
		}
		first, second := rs[0], rs[1]
		if first.from != "" {
			first, second = second, first
		}
		if first.status != "Failed" || first.to != second.id || second.status != "Completed" || second.from != first.id {
			wrong = append(wrong, fmt.Sprintf("%s: runs %+v and %+v are not a failed run and its reset", key, first, second))
		}
		if e := effects[key]; e["a"] != 1 || e["b"] != 1 || e["c"] != 1 {
			wrong = append(wrong, fmt.Sprintf("%s: effects %v, want each step once", key, e))
		}
	}
	require.Empty(t, wrong)
	phase("each of %d executions reset once, each step's effect once", n)
}

// waitUntil polls cond until it holds, failing t after within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(100 * time.Millisecond) // poll interval, not synchronisation
	}
}
