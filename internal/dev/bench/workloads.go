package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/harvest-engine/harvest/examples"
)

// startRec is one start request.
type startRec struct {
	key int
	// at is when it was sent, zero if never; in an open-loop run, when
	// it was due, and latency runs from then, lag saying how late it
	// left.
	at      time.Time
	latency time.Duration
	lag     time.Duration
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
		r.track = newTracker(dbProbe{dbs: l.dbs()}, 50*time.Millisecond)
	} else {
		r.track = newTracker(httpProbe{api: r.api, workflow: workflow}, 250*time.Millisecond)
	}
	var plan []int
	switch r.cfg.Workload {
	case W1, W2:
		plan = r.planStarts()
		r.submissions = len(plan)
	case W3:
		r.submissions = r.cfg.N * (1 + r.cfg.Signals + duplicatesPerCollect(r.cfg.Signals))
	}

	var before snapshot
	if r.cfg.Local != nil {
		var err error
		if before, err = r.snapshot(ctx); err != nil {
			return nil, err
		}
	}

	var samples <-chan []TableSample
	stopSampling := make(chan struct{})
	var stopOnce sync.Once
	defer stopOnce.Do(func() { close(stopSampling) })
	if l := r.cfg.Local; l != nil && r.cfg.SampleEvery > 0 {
		samples = l.sampler(ctx, r.cfg.SampleEvery, time.Now(), stopSampling)
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
		if r.cfg.Rate > 0 {
			starts = r.submitOpenLoop(runCtx, workflow, plan)
		} else {
			starts = r.submitStarts(runCtx, workflow, plan)
		}
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
	if samples != nil {
		// The tables go on changing after the last completion (the
		// pruner catching up): keep sampling a while.
		select {
		case <-time.After(r.cfg.SampleAfter):
		case <-ctx.Done():
		}
		stopOnce.Do(func() { close(stopSampling) })
		res.TableSizes = <-samples
	}
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

// duplicatesPerCollect is how many of a W3 execution's signals signals
// are sent twice.
func duplicatesPerCollect(signals int) int {
	return int(math.Round(DuplicateShare * float64(signals)))
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
		rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x5eed)) //nolint:gosec // G404: a seeded, repeatable workload, not a secret
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
			rec.start = r.startOne(ctx, examples.WorkflowCollect, i, examples.CollectInput{Count: r.cfg.Signals})
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
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)+1)) //nolint:gosec // G404: a seeded, repeatable workload, not a secret
	dup := map[int]bool{}
	for _, j := range rng.Perm(r.cfg.Signals)[:duplicatesPerCollect(r.cfg.Signals)] {
		dup[j] = true
	}
	var order []int
	retry := -1
	for j := range r.cfg.Signals {
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
