package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// failingAfter is how long a shard's applies must have kept failing
// before Ready reports it (ingest's /readyz waits as long by default): a
// session that fails once and starts again at once is no reason.
const failingAfter = 10 * time.Second

// pingTimeout bounds Ready's PostgreSQL ping.
const pingTimeout = time.Second

// shardFailure is a failing shard's state: failing since when, and the
// last error (logged, and recorded on the shard's mark).
type shardFailure struct {
	since time.Time
	msg   string // the last error, for the shard's mark
}

// Ready says why the scheduler cannot apply commands now, one reason
// each, or nothing when it can: it must be started and not stopped, its
// NATS connection connected, PostgreSQL must answer a ping, and every
// shard it holds must have its consumer in place and not have kept failing
// for failingAfter. A scheduler that holds no shard (others hold them
// all) is ready. The reasons never quote PostgreSQL's or NATS's error
// text (the log has it): /readyz may be seen by more than operators.
func (s *Scheduler) Ready(ctx context.Context) []string {
	var reasons []string
	s.mu.Lock()
	started, done := s.cancel != nil, s.done
	runners := make([]*runner, 0, len(s.runners))
	for _, r := range s.runners {
		runners = append(runners, r)
	}
	s.mu.Unlock()
	switch {
	case !started:
		return []string{"scheduler: not started"}
	case isClosed(done):
		return []string{"scheduler: stopped"}
	}
	if st := s.cfg.Topology.JS.Conn().Status(); st != nats.CONNECTED {
		reasons = append(reasons, "NATS: connection "+strings.ToLower(st.String()))
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := s.cfg.DB.Ping(pctx); err != nil {
		// The answer names the failure, never PostgreSQL's own text: that
		// goes to the log.
		s.log.Warn("readiness: PostgreSQL does not answer a ping", "err", err)
		reasons = append(reasons, "PostgreSQL: does not answer a ping (the error is in the scheduler's log)")
	}
	slices.SortFunc(runners, func(a, b *runner) int { return a.lease.Shard - b.lease.Shard })
	now := time.Now()
	for _, r := range runners {
		if f := r.failure.Load(); f != nil && now.Sub(f.since) >= failingAfter {
			reasons = append(reasons, fmt.Sprintf("shard %d: applies failing since %s (the error is in the scheduler's log)", r.lease.Shard, f.since.UTC().Format(time.RFC3339)))
		} else if !r.consuming.Load() {
			reasons = append(reasons, fmt.Sprintf("shard %d: consumer %s not in place", r.lease.Shard, r.consumerName()))
		}
	}
	return reasons
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
