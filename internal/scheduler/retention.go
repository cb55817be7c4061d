package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/internal/store"
)

// Retention defaults.
const (
	// DefaultRetention is how long a closed execution stays: 7 days.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultPruneBatchSize is how many executions one prune
	// transaction deletes, with their rows.
	DefaultPruneBatchSize = 100
	// DefaultPrunePause is the pause between two prune transactions
	// while a backlog lasts: it bounds what pruning takes from the
	// applies (one transaction at a time, then the pause).
	DefaultPrunePause = 20 * time.Millisecond
	// DefaultPruneRest is how many times as long as its last round the
	// pruner rests while a backlog lasts: at 3 it works at most a quarter
	// of the time. A round takes longer when PostgreSQL is busy, so the
	// pruner yields more to the applies the busier they keep it
	// (docs/benchmarks.md#retention-soak-issue-20).
	DefaultPruneRest = 3.0
	// DefaultPruneInterval is how often the pruner looks again once it has
	// caught up.
	DefaultPruneInterval = 10 * time.Second
)

// checkRetention refuses a retention shorter than the start window: a
// start key would then outlive the execution it resolves to.
func checkRetention(retention time.Duration, byWorkflow map[string]time.Duration, window time.Duration) error {
	if retention < window {
		return fmt.Errorf("retention %s is shorter than start_idempotency_window %s: a start key would outlive its execution; make retention at least %s",
			retention, window, window)
	}
	names := make([]string, 0, len(byWorkflow))
	for name := range byWorkflow {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if d := byWorkflow[name]; d > 0 && d < window {
			return fmt.Errorf("workflows.%s.retention %s is shorter than start_idempotency_window %s: a start key would outlive its execution; make it at least %s",
				name, d, window, window)
		}
	}
	return nil
}

// pruneLoop prunes the held shards' executions past their retention in
// rounds: one transaction of up to PruneBatchSize executions per held
// shard, then a rest (pruneWait) while any shard has a backlog, and
// PruneInterval between looks once none has. Executions that closed
// before retention existed get their prune_after first. Wake (see
// PruneNow) skips the wait.
func (s *Scheduler) pruneLoop(ctx context.Context) {
	retention := store.Retention{Default: s.cfg.Retention, ByWorkflow: s.cfg.RetentionByWorkflow}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var due dueCount
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.pruneWake:
		}
		busy := false
		began := time.Now()
		held := s.heldLeases()
		if began.Sub(due.at) >= dueWindow {
			due = s.dueRate(ctx, held, began)
		}
		var pruned int64
		for _, l := range held {
			if ctx.Err() != nil {
				return
			}
			if n, err := store.SetPruneAfter(ctx, s.cfg.DB, l.Shard, retention, s.cfg.PruneBatchSize); err != nil {
				s.warnPrune(ctx, l, err)
				continue
			} else if n == int64(s.cfg.PruneBatchSize) {
				busy = true
			}
			res, err := store.PruneShard(ctx, s.cfg.DB, s.cfg.Owner, l, s.cfg.Now(), s.cfg.PruneBatchSize)
			if err != nil {
				s.warnPrune(ctx, l, err)
				continue
			}
			s.retention.pruned(res)
			pruned += res.Executions
			if res.Executions > 0 {
				s.log.Debug("pruned executions past their retention", "shard", l.Shard, "executions", res.Executions)
			}
			if res.Executions == int64(s.cfg.PruneBatchSize) {
				busy = true
			}
			// A finished batch operation goes after the default
			// retention, as an execution does after its workflow's.
			batches, err := store.PruneBatches(ctx, s.cfg.DB, s.cfg.Owner, l, s.cfg.Now().Add(-retention.Default), s.cfg.PruneBatchSize)
			if err != nil {
				s.warnPrune(ctx, l, err)
				continue
			}
			if batches > 0 {
				s.log.Debug("pruned batch operations past their retention", "shard", l.Shard, "batches", batches)
			}
			if batches == int64(s.cfg.PruneBatchSize) {
				busy = true
			}
		}
		timer.Reset(s.pruneWait(busy, time.Since(began), pruned, due.perSecond))
	}
}

// dueWindow is how far ahead the pruner counts the executions coming due,
// and how often it counts them again.
const dueWindow = 10 * time.Second

// keepUpMargin is how much faster than executions come due the pruner
// prunes at the least, so that a backlog shrinks even under full load.
const keepUpMargin = 1.25

type dueCount struct {
	at        time.Time
	perSecond float64
}

// dueRate counts the held shards' executions whose retention ends within
// the next dueWindow (the closes of a retention ago, still there): the
// rate the pruner must keep up with.
func (s *Scheduler) dueRate(ctx context.Context, held []store.Lease, at time.Time) dueCount {
	shards := make([]int, len(held))
	for i, l := range held {
		shards[i] = l.Shard
	}
	now := s.cfg.Now()
	n, err := store.ComingDue(ctx, s.cfg.DB, shards, now, now.Add(dueWindow))
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("count the executions coming due for pruning", "err", err)
		}
		return dueCount{at: at}
	}
	return dueCount{at: at, perSecond: float64(n) / dueWindow.Seconds()}
}

// pruneWait is how long the pruner waits after a round that took elapsed
// and pruned executions: PruneInterval once it has caught up. While a
// backlog lasts it rests PruneRest times the round, so that pruning a
// backlog takes a bounded share from the applies; but never so long that
// it would prune slower than keepUpMargin times the rate at which
// executions come due (duePerSecond), so that under any load storage stays
// bounded and a backlog shrinks. Never less than PrunePause.
func (s *Scheduler) pruneWait(busy bool, elapsed time.Duration, pruned int64, duePerSecond float64) time.Duration {
	if !busy {
		return s.cfg.PruneInterval
	}
	rest := time.Duration(float64(elapsed) * s.cfg.PruneRest)
	if duePerSecond > 0 {
		// The round plus this wait must not last longer than pruning
		// keepUpMargin times the due rate allows.
		keepUp := time.Duration(float64(pruned)/(duePerSecond*keepUpMargin)*float64(time.Second)) - elapsed
		rest = min(rest, max(keepUp, 0))
	}
	return max(s.cfg.PrunePause, rest)
}

func (s *Scheduler) warnPrune(ctx context.Context, l store.Lease, err error) {
	if ctx.Err() == nil {
		s.log.Warn("prune executions past their retention", "shard", l.Shard, "err", err)
	}
}

// PruneNow wakes the pruner, which then prunes without waiting for its
// interval until it has caught up.
func (s *Scheduler) PruneNow() {
	select {
	case s.pruneWake <- struct{}{}:
	default:
	}
}

// handlePruneRequest answers a request to prune now, from POST
// /api/harvest/retention/prune: it wakes the pruner, then replies (empty)
// so that the requester knows a scheduler heard it. Every scheduler gets
// the request and prunes the shards it holds.
func (s *Scheduler) handlePruneRequest(m *nats.Msg) {
	s.PruneNow()
	s.log.Info("asked to prune executions past their retention now", "shards", len(s.heldLeases()))
	if m.Reply != "" {
		if err := m.Respond(nil); err != nil {
			s.log.Debug("answer a request to prune", "err", err)
		}
	}
}

// heldLeases returns the leases this scheduler holds now.
func (s *Scheduler) heldLeases() []store.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.Lease, 0, len(s.runners))
	for _, r := range s.runners {
		out = append(out, r.lease)
	}
	slices.SortFunc(out, func(a, b store.Lease) int { return a.Shard - b.Shard })
	return out
}

// retentionMetrics are the pruner's.
type retentionMetrics struct {
	executions prometheus.Counter
	rows       *prometheus.CounterVec
	backlog    prometheus.Collector
}

func newRetentionMetrics(s *Scheduler) *retentionMetrics {
	m := &retentionMetrics{
		executions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_retention_pruned_executions_total",
			Help: "Closed executions deleted past their retention, with their rows, by this scheduler.",
		}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_retention_pruned_rows_total",
			Help: "Rows the pruner deleted, by table (the executions' own included).",
		}, []string{"table"}),
	}
	for _, t := range store.PrunedTables {
		m.rows.WithLabelValues(t)
	}
	b := &backlogGauge{s: s, desc: prometheus.NewDesc("harvest_retention_backlog_executions",
		"Closed executions of the shards this scheduler holds that are past their retention and not pruned yet (read when scraped, at most every 5 s).", nil, nil)}
	m.backlog = b
	return m
}

func (m *retentionMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.executions, m.rows, m.backlog} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *retentionMetrics) pruned(res store.PruneResult) {
	m.executions.Add(float64(res.Executions))
	for table, n := range res.Rows {
		m.rows.WithLabelValues(table).Add(float64(n))
	}
}

// backlogGauge counts the held shards' executions past retention when
// scraped, at most every backlogCacheFor.
type backlogGauge struct {
	s    *Scheduler
	desc *prometheus.Desc

	mu    sync.Mutex
	at    time.Time
	value float64
}

const backlogCacheFor = 5 * time.Second

func (g *backlogGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *backlogGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.at) >= backlogCacheFor {
		shards := g.s.OwnedShards()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n, err := store.PruneBacklog(ctx, g.s.cfg.DB, shards, g.s.cfg.Now())
		cancel()
		if err != nil {
			g.s.log.Debug("read the retention backlog for metrics", "err", err)
		} else {
			g.value, g.at = float64(n), time.Now()
		}
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value)
}
