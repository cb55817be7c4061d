package scheduler

import (
	"cmp"
	"context"
	"math"
	"time"

	"github.com/sourcegraph/conc"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
)

func (s *Scheduler) leaseLoop(ctx context.Context, first chan struct{}) {
	var wg conc.WaitGroup
	defer func() {
		s.mu.Lock()
		for _, r := range s.runners {
			r.cancel()
		}
		s.mu.Unlock()
		wg.Wait()
	}()
	wg.Go(func() { s.sweepLoop(ctx) })
	wg.Go(func() { s.callbackLoop(ctx) })
	wg.Go(func() { s.pruneLoop(ctx) })
	if s.cfg.Store == 0 && s.cfg.KeepInterval >= 0 {
		wg.Go(func() { s.cfg.Topology.Keep(ctx, cmp.Or(s.cfg.KeepInterval, broker.KeepInterval), s.log) })
	}
	ticker := time.NewTicker(s.cfg.LeaseTTL / 4)
	defer ticker.Stop()
	for {
		if err := s.leaseRound(ctx, &wg); err != nil && ctx.Err() == nil {
			s.log.Warn("lease round failed", "err", err)
		}
		if first != nil {
			close(first)
			first = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// leaseRound renews held leases, stops runners whose lease is gone, and
// takes or gives up shards to hold a fair share.
func (s *Scheduler) leaseRound(ctx context.Context, wg *conc.WaitGroup) error {
	alive, err := store.Heartbeat(ctx, s.cfg.DB, s.cfg.Owner, s.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	held, err := store.RenewLeases(ctx, s.cfg.DB, s.cfg.Owner, s.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	heldBy := map[int]store.Lease{}
	for _, l := range held {
		heldBy[l.Shard] = l
	}
	s.mu.Lock()
	for sh, r := range s.runners {
		if l, ok := heldBy[sh]; !ok || l.Epoch != r.lease.Epoch || r.finished() {
			if !ok || l.Epoch != r.lease.Epoch {
				s.metrics.leaseLost.Inc()
			}
			r.cancel()
			delete(s.runners, sh)
			delete(heldBy, sh)
			if ok {
				// Our runner stopped on its own (an error); release so a
				// fresh runner, ours or another's, starts cleanly.
				_ = store.ReleaseLease(ctx, s.cfg.DB, s.cfg.Owner, l)
			}
		}
	}
	s.mu.Unlock()
	target := int(math.Ceil(float64(s.cfg.Topology.Shards()) / float64(alive)))
	var start []store.Lease
	for _, l := range heldBy {
		s.mu.Lock()
		_, running := s.runners[l.Shard]
		s.mu.Unlock()
		if !running {
			start = append(start, l)
		}
	}
	if n := len(heldBy); n < target {
		got, err := store.AcquireLeases(ctx, s.cfg.DB, s.cfg.Owner, s.cfg.LeaseTTL, target-n)
		if err != nil {
			return err
		}
		s.metrics.leaseAcquired.Add(float64(len(got)))
		start = append(start, got...)
	} else if n > target {
		// Give up the surplus so newcomers get their share.
		extra := n - target
		s.mu.Lock()
		var stop []*runner
		for sh, r := range s.runners {
			if extra == 0 {
				break
			}
			stop = append(stop, r)
			delete(s.runners, sh)
			extra--
		}
		s.mu.Unlock()
		for _, r := range stop {
			r.cancel()
			<-r.done
			if err := store.ReleaseLease(ctx, s.cfg.DB, s.cfg.Owner, r.lease); err != nil {
				return err
			}
			s.log.Info("released shard", "shard", r.lease.Shard)
		}
	}
	for _, l := range start {
		r := s.newRunner(ctx, l)
		s.mu.Lock()
		s.runners[l.Shard] = r
		s.mu.Unlock()
		wg.Go(func() { r.run() })
	}
	return nil
}
