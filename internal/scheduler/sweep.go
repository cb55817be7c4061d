package scheduler

import (
	"context"
	"time"

	"github.com/harvest-engine/harvest/internal/store"
)

// sweepLoop deletes expired start claims and command outcomes in bounded
// batches.
func (s *Scheduler) sweepLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.SweepInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		s.sweep(ctx, "expired start claims", store.SweepExpiredClaims)
		s.sweep(ctx, "expired command outcomes", store.SweepExpiredOutcomes)
		if err := store.ForgetDeadSchedulers(ctx, s.cfg.DB); err != nil && ctx.Err() == nil {
			s.log.Warn("forget dead schedulers", "err", err)
		}
	}
}

// sweep runs del, which deletes up to a batch of rows, for at most
// SweepBatches batches, stopping at the first that finds fewer.
func (s *Scheduler) sweep(ctx context.Context, what string, del func(context.Context, store.DBTX, int) (int64, error)) {
	var total int64
	for range s.cfg.SweepBatches {
		n, err := del(ctx, s.cfg.DB, s.cfg.SweepBatchSize)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweep "+what, "err", err)
			}
			return
		}
		total += n
		if n < int64(s.cfg.SweepBatchSize) {
			break
		}
	}
	if total > 0 {
		s.log.Debug("swept "+what, "deleted", total)
	}
}
