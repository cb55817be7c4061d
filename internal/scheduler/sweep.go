package scheduler

import (
	"context"
	"time"

	"github.com/harvest-engine/harvest/internal/store"
)

// sweepLoop deletes expired start claims and command outcomes, and start
// policy keys that hold nothing any more, in bounded batches, every
// SweepInterval.
func (s *Scheduler) sweepLoop(ctx context.Context) {
	every(ctx, s.cfg.SweepInterval, func() {
		s.sweep(ctx, "expired start claims", store.SweepExpiredClaims)
		s.sweep(ctx, "expired command outcomes", store.SweepExpiredOutcomes)
		s.sweep(ctx, "stale start policy keys", store.SweepStalePolicyKeys)
		if err := store.ForgetDeadSchedulers(ctx, s.cfg.DB); err != nil && ctx.Err() == nil {
			s.log.Warn("forget dead schedulers", "err", err)
		}
	})
}

// every calls fn each interval, first one interval from now, until ctx
// ends: the shape of the scheduler's periodic loops (sweeps, callback
// deliveries, failure marks).
func every(ctx context.Context, interval time.Duration, fn func()) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			fn()
		}
	}
}

// sweep runs del, which deletes up to a batch of rows, until a batch
// finds fewer: all that has expired goes, so that the rows expiring
// between two rounds never outnumber those a round deletes (a cap per
// round would let a rate above it grow the table without bound). Each
// batch is its own statement, PrunePause apart, so the hot path's
// transactions are never held up for long.
func (s *Scheduler) sweep(ctx context.Context, what string, del func(context.Context, store.DBTX, int) (int64, error)) int64 {
	var total int64
	defer func() {
		if total > 0 {
			s.log.Debug("swept "+what, "deleted", total)
		}
	}()
	for {
		n, err := del(ctx, s.cfg.DB, s.cfg.SweepBatchSize)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweep "+what, "err", err)
			}
			return total
		}
		total += n
		if n < int64(s.cfg.SweepBatchSize) {
			return total
		}
		select {
		case <-ctx.Done():
			return total
		case <-time.After(s.cfg.PrunePause):
		}
	}
}
