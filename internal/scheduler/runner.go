package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/harvest-engine/harvest/internal/store"
)

// runner applies the commands of one shard while its lease holds.
type runner struct {
	s      *Scheduler
	lease  store.Lease
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	log    *slog.Logger
	// published are outbox rows JetStream has acknowledged and that are
	// not deleted yet: the next batch's transaction deletes them, or
	// flushPublished does when the shard is idle. Only the shard loop
	// touches it.
	published []int64
	// inflight are outbox rows published and not yet acknowledged.
	inflight []pending
	// tasks are the stream sequences of the shard's outstanding workflow
	// tasks, by execution (see taskQueued); taskStr the task stream.
	tasks   map[string]taskSeq
	taskStr jetstream.Stream
	// failure is set while the shard's last session failed and it has
	// not applied since (see failing). While it is, tendMark keeps the
	// shard's failure mark in PostgreSQL fresh; markMu orders those
	// writes with markHealthy's clear.
	failure atomic.Pointer[shardFailure]
	markMu  sync.Mutex
	// consuming says the session's consumer is in place and pulled. Ready
	// reads it and failure (ready.go).
	consuming atomic.Bool
	// delivered is the consumer delivery sequence of the last command the
	// session's shard loop took (see inOrder).
	delivered uint64
	// applied is the shard's applied stream sequence as this session last
	// committed it, or -1 when the session has not read it yet.
	applied int64
	// known are the running executions this session committed, for
	// batches applied without reads; emptied whenever applied is unknown.
	known execCache
}

func (s *Scheduler) newRunner(parent context.Context, l store.Lease) *runner {
	ctx, cancel := context.WithCancel(parent)
	return &runner{s: s, lease: l, ctx: ctx, cancel: cancel, done: make(chan struct{}), tasks: map[string]taskSeq{},
		log: s.log.With("shard", l.Shard, "epoch", l.Epoch)}
}

func (r *runner) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *runner) env() applyEnv {
	return applyEnv{shard: r.lease.Shard, shards: r.s.cfg.Topology.Shards(), layout: r.s.cfg.Topology.Layout(), window: r.s.cfg.StartIdempotencyWindow,
		outcomeTTL: r.s.cfg.Topology.OutcomeTTL(), wftTimeout: r.s.cfg.WorkflowTaskTimeout, taskQueued: r.taskQueued, stickyState: r.stickyState,
		maxTask: maxTask(r.s.cfg.Topology.JS.Conn()), log: r.log,
		retention: store.Retention{Default: r.s.cfg.Retention, ByWorkflow: r.s.cfg.RetentionByWorkflow}, pinned: r.s.cfg.PinnedWorkflows,
		historyLimits: r.s.cfg.HistoryLimits, cancelGrace: r.s.cfg.CancelGraceByWorkflow,
		timeouts: r.s.cfg.TimeoutsByWorkflow, knownWorkflow: r.s.knownWorkflow(r.ctx), searchAttrs: r.s.cfg.SearchAttributes}
}

func (r *runner) run() {
	defer close(r.done)
	var marks conc.WaitGroup
	markCtx, stopMarks := context.WithCancel(r.ctx)
	marks.Go(func() { r.tendMark(markCtx) })
	defer func() {
		stopMarks()
		marks.Wait()
		if r.failing() {
			r.s.metrics.failing.Add(-1)
		}
	}()
	r.log.Info("applying shard")
	const firstBackoff = 100 * time.Millisecond
	backoff := firstBackoff
	for r.ctx.Err() == nil {
		began := time.Now()
		err := r.session()
		if err == nil || r.ctx.Err() != nil {
			return
		}
		if errors.Is(err, store.ErrLeaseLost) {
			r.log.Warn("lease lost, stopping shard", "err", err)
			return
		}
		if time.Since(began) > 30*time.Second {
			backoff = firstBackoff // a failure after a long healthy session
		}
		wait := backoff
		if errors.Is(err, errDeliveryGap) {
			// Logged by inOrder; not a failure: the new session applies
			// the lost command almost at once.
			r.s.metrics.gaps.Inc()
			wait = firstBackoff
		} else {
			r.log.Warn("shard session failed, restarting", "err", err, "retry_in", wait)
			r.markFailing(err)
			backoff = min(backoff*2, 5*time.Second)
		}
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// markRefresh is how often a failing shard's runner refreshes its mark
// in PostgreSQL: well within store.MarkStaleAfter, whatever its sessions
// do meanwhile (a session may take seconds to fail, and backs off up to
// 5 s before the next).
const markRefresh = 2 * time.Second

// markWriteTimeout bounds a write of the shard's failure mark.
const markWriteTimeout = 2 * time.Second

// markFailing records that the shard's session failed: in the gauge, and
// in PostgreSQL for the readiness checks of other processes (best effort:
// PostgreSQL down is a common cause; tendMark writes it again).
func (r *runner) markFailing(err error) {
	r.s.metrics.failures.Inc()
	since := time.Now()
	if f := r.failure.Load(); f != nil {
		since = f.since
	} else {
		r.s.metrics.failing.Add(1)
	}
	r.failure.Store(&shardFailure{since: since, msg: err.Error()})
	r.refreshMark(r.ctx)
}

// tendMark refreshes the shard's failure mark every markRefresh while the
// shard is failing, until ctx ends. A mark its runner stops refreshing
// (the runner died, lost its lease, or no longer fails but could not
// clear it) stops counting after store.MarkStaleAfter.
func (r *runner) tendMark(ctx context.Context) {
	every(ctx, markRefresh, func() { r.refreshMark(ctx) })
}

// refreshMark writes the shard's failure mark if it is failing. A write
// whose answer is lost may have been made: that is no harm, as the mark
// is cleared by the next apply whoever wrote it, and stops counting when
// no longer refreshed.
func (r *runner) refreshMark(ctx context.Context) {
	r.markMu.Lock()
	defer r.markMu.Unlock()
	f := r.failure.Load()
	if f == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, markWriteTimeout)
	defer cancel()
	if err := store.RecordShardFailure(wctx, r.s.cfg.DB, r.s.cfg.Owner, r.lease, f.msg); err != nil && ctx.Err() == nil {
		r.log.Debug("could not record the shard's failure", "err", err)
	}
}

// failing says the shard's last session failed and it has not applied
// since.
func (r *runner) failing() bool { return r.failure.Load() != nil }

// markHealthy records that the shard applies again: the gauge, and its
// mark in PostgreSQL, which an apply's transaction has cleared already
// but a refresh in flight may have written again. A clear that fails
// leaves a mark no longer refreshed, which stops counting on its own.
func (r *runner) markHealthy(ctx context.Context) {
	r.markMu.Lock()
	defer r.markMu.Unlock()
	if r.failure.Load() == nil {
		return
	}
	r.failure.Store(nil)
	r.s.metrics.failing.Add(-1)
	wctx, cancel := context.WithTimeout(ctx, markWriteTimeout)
	defer cancel()
	if err := store.ClearShardFailure(wctx, r.s.cfg.DB, r.s.cfg.Owner, r.lease); err != nil && ctx.Err() == nil {
		r.log.Debug("could not clear the shard's failure mark", "err", err)
	}
}
