package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
)

// startRec is one start request.
type startRec struct {
	key     int
	at      time.Time // zero if it was never sent
	latency time.Duration
	execID  string
	dedup   bool
	ok      bool
}

// signalRec is one signal request of W3.
type signalRec struct {
	latency   time.Duration
	delivered bool
	ok        bool
}

// collectRec is one W3 execution: its start and its signals.
type collectRec struct {
	start   startRec
	signals []signalRec
}

// snapshot is what a Local stack shows at one moment.
type snapshot struct {
	at       time.Time
	sql      SQLCounts
	seqs     map[string]uint64
	cpu      time.Duration
	rss      int64
	pgCPU    time.Duration
	pgOK     bool
	activity int64
}

func (r *runner) snapshot(ctx context.Context) (snapshot, error) {
	l := r.cfg.Local
	s := snapshot{at: time.Now(), sql: l.sql.Counts(), activity: l.Stack.Services.Bench.Runs()}
	var err error
	if s.seqs, err = streamSeqs(ctx, l.js); err != nil {
		return s, err
	}
	if s.cpu, s.rss, err = processUsage(); err != nil {
		return s, err
	}
	if l.pgPID != 0 {
		if c, err := treeCPU(l.pgPID); err == nil {
			s.pgCPU, s.pgOK = c, true
		}
	}
	return s, nil
}

func (r *runner) key(parts ...any) string {
	k := "bench-" + r.runID
	for _, p := range parts {
		k += fmt.Sprint("-", p)
	}
	return k
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	workflow := examples.WorkflowBenchEcho
	if r.cfg.Workload == W3 {
		workflow = examples.WorkflowCollect
	}
	if l := r.cfg.Local; l != nil {
		r.track = newTracker(dbProbe{db: l.db}, 50*time.Millisecond)
	} else {
		r.track = newTracker(httpProbe{api: r.api, workflow: workflow}, 250*time.Millisecond)
	}
	var plan []int
	switch r.cfg.Workload {
	case W1, W2:
		plan = r.planStarts()
		r.submissions = len(plan)
	case W3:
		r.submissions = r.cfg.N * (1 + SignalsPerCollect + duplicatesPerCollect())
	}

	var before snapshot
	if r.cfg.Local != nil {
		var err error
		if before, err = r.snapshot(ctx); err != nil {
			return nil, err
		}
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	submitting := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		err := r.track.watch(runCtx, submitting, r.cfg.StallTimeout)
		if err != nil {
			cancel() // no use submitting more
		}
		watched <- err
	}()
	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	progressDone.Go(func() { r.reportProgress(stopProgress) })

	var starts []startRec
	var collects []collectRec
	switch r.cfg.Workload {
	case W1, W2:
		starts = r.submitStarts(runCtx, workflow, plan)
	case W3:
		collects = r.submitCollects(runCtx)
		for _, c := range collects {
			starts = append(starts, c.start)
		}
	}
	close(submitting)
	err := <-watched
	close(stopProgress)
	progressDone.Wait()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	var after snapshot
	if r.cfg.Local != nil {
		if after, err = r.snapshot(ctx); err != nil {
			return nil, err
		}
	}
	res := r.result(starts, collects)
	if r.cfg.Local != nil {
		res.Target = "in-process"
		res.ActivityRuns, res.ActivityRunsSource = after.activity-before.activity, "worker"
		r.costs(res, before, after)
	} else {
		res.Target = r.cfg.BaseURL
		if res.ActivityRuns, err = r.historyActivityRuns(ctx, starts); err != nil {
			return nil, err
		}
		res.ActivityRunsSource = "history"
	}
	r.errMu.Lock()
	res.Errors, res.ErrorSamples = r.errCount, slices.Clone(r.errSamples)
	r.errMu.Unlock()
	r.verify(res, starts, collects, len(plan)-r.cfg.N)
	return res, nil
}

// extraStarts is W2's number of extra submissions.
func extraStarts(n int) int { return int(math.Round(DuplicateShare * float64(n))) }

// duplicatesPerCollect is how many of a W3 execution's signals are sent
// twice.
func duplicatesPerCollect() int {
	return int(math.Round(DuplicateShare * SignalsPerCollect))
}

// planStarts orders the keys to submit: 0..N-1, and for W2 a duplicate of
// a random 30% of them, each placed 1 to Concurrency submissions after its
// original, so it is sent while the original is likely still in flight.
func (r *runner) planStarts() []int {
	n := r.cfg.N
	type slot struct {
		key int
		pos float64
	}
	slots := make([]slot, 0, n+extraStarts(n))
	for i := range n {
		slots = append(slots, slot{key: i, pos: float64(i)})
	}
	if r.cfg.Workload == W2 {
		rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x5eed))
		for _, k := range rng.Perm(n)[:extraStarts(n)] {
			off := 1 + rng.IntN(r.cfg.Concurrency)
			slots = append(slots, slot{key: k, pos: float64(k+off) - 0.5})
		}
	}
	sort.SliceStable(slots, func(i, j int) bool { return slots[i].pos < slots[j].pos })
	plan := make([]int, len(slots))
	for i, s := range slots {
		plan[i] = s.key
	}
	return plan
}

// submitStarts sends the planned starts from Concurrency submitters.
func (r *runner) submitStarts(ctx context.Context, workflow string, plan []int) []startRec {
	recs := make([]startRec, len(plan))
	p := pool.New().WithMaxGoroutines(r.cfg.Concurrency)
	for j, k := range plan {
		if ctx.Err() != nil {
			break
		}
		p.Go(func() {
			recs[j] = r.startOne(ctx, workflow, k, map[string]any{"i": k, "run": r.runID})
		})
	}
	p.Wait()
	return recs
}

// startOne sends one keyed start and follows the execution it names.
func (r *runner) startOne(ctx context.Context, workflow string, k int, input any) startRec {
	a, s, err := r.start(ctx, workflow, r.key(k), input)
	rec := startRec{key: k, at: a.at, latency: a.latency}
	if err != nil {
		r.fail(err)
		r.track.touch()
		return rec
	}
	rec.execID, rec.dedup, rec.ok = s.ExecutionID, s.Deduplicated, true
	r.track.add(s.ExecutionID)
	return rec
}

// itemPayload is the payload of W3's item signals.
type itemPayload struct {
	I    int `json:"i"`
	Item int `json:"item"`
}

// submitCollects runs W3's submissions: Concurrency submitters, each
// taking one execution at a time: its start, then its signals, each
// duplicate sent again right after the next signal, as a retry would.
func (r *runner) submitCollects(ctx context.Context) []collectRec {
	recs := make([]collectRec, r.cfg.N)
	p := pool.New().WithMaxGoroutines(r.cfg.Concurrency)
	for i := range r.cfg.N {
		if ctx.Err() != nil {
			break
		}
		p.Go(func() {
			rec := &recs[i]
			rec.start = r.startOne(ctx, examples.WorkflowCollect, i, examples.CollectInput{Count: SignalsPerCollect})
			if !rec.start.ok {
				return
			}
			for _, j := range r.signalOrder(i) {
				a, delivered, err := r.signal(ctx, rec.start.execID, "item", r.key(i, "s", j), itemPayload{I: i, Item: j})
				r.track.touch()
				if err != nil {
					r.fail(err)
					rec.signals = append(rec.signals, signalRec{latency: a.latency})
					continue
				}
				rec.signals = append(rec.signals, signalRec{latency: a.latency, delivered: delivered, ok: true})
			}
		})
	}
	p.Wait()
	return recs
}

// signalOrder is the order in which execution i's signals are sent:
// 0..9, with three of them sent a second time after the next one.
func (r *runner) signalOrder(i int) []int {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)+1))
	dup := map[int]bool{}
	for _, j := range rng.Perm(SignalsPerCollect)[:duplicatesPerCollect()] {
		dup[j] = true
	}
	var order []int
	retry := -1
	for j := range SignalsPerCollect {
		order = append(order, j)
		if retry >= 0 {
			order = append(order, retry)
			retry = -1
		}
		if dup[j] {
			retry = j
		}
	}
	if retry >= 0 {
		order = append(order, retry)
	}
	return order
}

// result computes the figures of a run from its records.
func (r *runner) result(starts []startRec, collects []collectRec) *Result {
	res := &Result{Workload: r.cfg.Workload, N: r.cfg.N, Concurrency: r.cfg.Concurrency, Submissions: r.submissions}
	closed := r.track.closedSnapshot()

	var first time.Time
	keyFirst := map[int]time.Time{}
	keyExec := map[int]string{}
	distinct := map[string]bool{}
	var startLat []time.Duration
	for _, s := range starts {
		if s.at.IsZero() {
			continue
		}
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
		check("executions_with_exactly_their_10_items", n, int64(exact))
		check("signals_delivered", n*SignalsPerCollect, int64(delivered))
		check("duplicates_detected", n*int64(duplicatesPerCollect()), int64(res.DuplicatesDetected))
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
		if json.Unmarshal(e.result, &out) != nil || len(out.Items) != SignalsPerCollect {
			continue
		}
		seen := map[int]bool{}
		good := true
		for _, it := range out.Items {
			if it.I != i || it.Item < 0 || it.Item >= SignalsPerCollect || seen[it.Item] {
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
