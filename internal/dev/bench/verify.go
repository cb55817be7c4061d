package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/harvest-engine/harvest/client"
)

// result computes the figures of a run from its records.
func (r *runner) result(starts []startRec, collects []collectRec) *Result {
	res := &Result{Workload: r.cfg.Workload, N: r.cfg.N, Concurrency: r.cfg.Concurrency, Submissions: r.submissions}
	closed := r.track.closedSnapshot()

	var first time.Time
	keyFirst := map[int]time.Time{}
	keyExec := map[int]string{}
	distinct := map[string]bool{}
	var startLat, lags []time.Duration
	for _, s := range starts {
		if s.at.IsZero() {
			continue
		}
		lags = append(lags, s.lag)
		if first.IsZero() || s.at.Before(first) {
			first = s.at
		}
		if f, ok := keyFirst[s.key]; !ok || s.at.Before(f) {
			keyFirst[s.key] = s.at
		}
		if !s.ok {
			continue
		}
		startLat = append(startLat, s.latency)
		keyExec[s.key] = s.execID
		distinct[s.execID] = true
		if s.dedup {
			res.DuplicatesDetected++
		}
	}
	var signalLat []time.Duration
	for _, c := range collects {
		for _, s := range c.signals {
			if !s.ok {
				continue
			}
			signalLat = append(signalLat, s.latency)
			if !s.delivered {
				res.DuplicatesDetected++
			}
		}
	}
	res.DistinctExecutions = len(distinct)
	res.StartP50Ms, res.StartP99Ms = ms(percentile(startLat, 50)), ms(percentile(startLat, 99))
	if r.cfg.Rate > 0 {
		rate, lag := r.cfg.Rate, ms(percentile(lags, 99))
		res.Rate, res.SendLagP99Ms, res.MaxInFlightSeen = &rate, &lag, r.inFlightTop
	}
	if r.cfg.Workload == W3 {
		p50, p99 := ms(percentile(signalLat, 50)), ms(percentile(signalLat, 99))
		res.SignalP50Ms, res.SignalP99Ms = &p50, &p99
	}

	var e2e []time.Duration
	var last time.Time
	for k, id := range keyExec {
		c, ok := closed[id]
		if !ok {
			continue
		}
		e2e = append(e2e, c.closedAt.Sub(keyFirst[k]))
	}
	for id := range distinct {
		c, ok := closed[id]
		if !ok {
			continue
		}
		if c.status == client.StatusCompleted {
			res.Completed++
		}
		if c.closedAt.After(last) {
			last = c.closedAt
		}
	}
	res.E2EP50Ms, res.E2EP99Ms = ms(percentile(e2e, 50)), ms(percentile(e2e, 99))
	if !first.IsZero() {
		if d := time.Unix(0, r.lastAnswer.Load()).Sub(first); d > 0 {
			res.SubmitsPerS = round(float64(r.submitted.Load()) / d.Seconds())
		}
		if d := last.Sub(first); d > 0 {
			res.CompletionsPerS = round(float64(len(closed)) / d.Seconds())
			res.DurationS = round(d.Seconds())
		}
	}
	return res
}

// costs fills in what a Local stack measured, per execution.
func (r *runner) costs(res *Result, before, after snapshot) {
	cpu := round((after.cpu - before.cpu).Seconds())
	rss := round(float64(after.rss) / (1 << 20))
	res.CPUS, res.PeakRSSMB = &cpu, &rss
	if before.pgOK && after.pgOK {
		pg := round((after.pgCPU - before.pgCPU).Seconds())
		res.PostgresCPUS = &pg
	}
	n := float64(res.DistinctExecutions)
	if n == 0 {
		return
	}
	sql := after.sql.Sub(before.sql)
	stmts, txs := round(float64(sql.Statements)/n), round(float64(sql.Transactions)/n)
	res.SQLStatementsPerWorkflow, res.TransactionsPerWorkflow = &stmts, &txs
	var total uint64
	res.JetStreamMessagesPerStream = map[string]float64{}
	for name, seq := range after.seqs {
		d := seq - before.seqs[name]
		if d == 0 {
			continue
		}
		total += d
		res.JetStreamMessagesPerStream[name] = round(float64(d) / n)
	}
	msgs := round(float64(total) / n)
	res.JetStreamMessagesPerWorkflow = &msgs
}

// historyActivityRuns counts the ActivityCompleted events of the run's
// executions, for a stack whose worker the bench cannot see.
func (r *runner) historyActivityRuns(ctx context.Context, starts []startRec) (int64, error) {
	ids := map[string]bool{}
	for _, s := range starts {
		if s.ok {
			ids[s.execID] = true
		}
	}
	var mu sync.Mutex
	var runs int64
	p := pool.New().WithErrors().WithContext(ctx).WithMaxGoroutines(r.cfg.Concurrency)
	for id := range ids {
		p.Go(func(ctx context.Context) error {
			events, err := r.api.History(ctx, id)
			if err != nil {
				return fmt.Errorf("read the history of %s: %w", id, err)
			}
			n := 0
			for _, e := range events {
				if e.Type == "ActivityCompleted" {
					n++
				}
			}
			mu.Lock()
			runs += int64(n)
			mu.Unlock()
			return nil
		})
	}
	err := p.Wait()
	return runs, err
}

// verify adds the workload's checks to res.
func (r *runner) verify(res *Result, starts []startRec, collects []collectRec, extras int) {
	n := int64(r.cfg.N)
	check := func(name string, want, got int64) {
		res.Checks = append(res.Checks, Check{Name: name, Want: want, Got: got, OK: want == got})
	}
	check("distinct_executions", n, int64(res.DistinctExecutions))
	check("completed", n, int64(res.Completed))
	switch r.cfg.Workload {
	case W1:
		check("activity_runs", n, res.ActivityRuns)
		check("duplicates_detected", 0, int64(res.DuplicatesDetected))
	case W2:
		check("activity_runs", n, res.ActivityRuns)
		check("duplicates_detected", int64(extras), int64(res.DuplicatesDetected))
		check("keys_answered_with_two_executions", 0, int64(keyConflicts(starts)))
	case W3:
		exact, delivered := r.exactCollects(collects)
		check(fmt.Sprintf("executions_with_exactly_their_%d_items", r.cfg.Signals), n, int64(exact))
		check("signals_delivered", n*int64(r.cfg.Signals), int64(delivered))
		check("duplicates_detected", n*int64(duplicatesPerCollect(r.cfg.Signals)), int64(res.DuplicatesDetected))
		check("activity_runs", 0, res.ActivityRuns)
	}
	check("errors", 0, int64(res.Errors))
	res.OK = true
	for _, c := range res.Checks {
		res.OK = res.OK && c.OK
	}
}

// keyConflicts counts the keys whose answers named more than one
// execution.
func keyConflicts(starts []startRec) int {
	seen := map[int]string{}
	bad := map[int]bool{}
	for _, s := range starts {
		if !s.ok {
			continue
		}
		if id, ok := seen[s.key]; ok && id != s.execID {
			bad[s.key] = true
		}
		seen[s.key] = s.execID
	}
	return len(bad)
}

// exactCollects counts the W3 executions that completed with exactly
// their own 10 distinct items, and the signals answered as delivered.
func (r *runner) exactCollects(collects []collectRec) (exact, delivered int) {
	closed := r.track.closedSnapshot()
	for i, c := range collects {
		for _, s := range c.signals {
			if s.ok && s.delivered {
				delivered++
			}
		}
		if !c.start.ok {
			continue
		}
		e, ok := closed[c.start.execID]
		if !ok || e.status != client.StatusCompleted {
			continue
		}
		var out struct {
			Items []itemPayload `json:"items"`
		}
		if json.Unmarshal(e.result, &out) != nil || len(out.Items) != r.cfg.Signals {
			continue
		}
		seen := map[int]bool{}
		good := true
		for _, it := range out.Items {
			if it.I != i || it.Item < 0 || it.Item >= r.cfg.Signals || seen[it.Item] {
				good = false
				break
			}
			seen[it.Item] = true
		}
		if good {
			exact++
		}
	}
	return exact, delivered
}

// percentile is the p-th percentile of samples by the nearest-rank
// method, exact over every sample.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

func ms(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

// round keeps two decimals.
func round(f float64) float64 { return math.Round(f*100) / 100 }
