package scheduler

import (
	"time"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// execCache holds the running executions a shard's runner has committed in
// its session, as it committed them, so the next batch that touches them
// (a workflow task's result, most often) need not read them back.
//
// It is right because the runner is the only writer of its shard's
// executions while it holds the lease, and a read-free batch checks, in
// the transaction that writes it, that the shard's applied sequence is
// still the one the runner last committed (store.Preconditions): had
// anything else applied a command of the shard since, the batch would be
// fenced out and the session, and its cache, started anew.
type execCache map[string]store.Execution

// maxCachedExecutions bounds the cache; past it, it starts empty again.
const maxCachedExecutions = 1 << 14

// get returns a copy of the execution to change.
func (c execCache) get(id string) (*store.Execution, bool) {
	e, ok := c[id]
	if !ok {
		return nil, false
	}
	return &e, true
}

// remember records the executions a committed batch wrote: running ones
// as written (with PostgreSQL's microsecond times), closed ones dropped.
// The input is not kept: an apply never reads it back, and it may be
// large.
func (c execCache) remember(w *store.Writes) {
	for _, es := range [][]*store.Execution{w.NewExecutions, w.UpdatedExecutions} {
		for _, e := range es {
			if e.Status != wire.StatusRunning && e.Status != wire.StatusPending {
				delete(c, e.ExecutionID)
				continue
			}
			if _, ok := c[e.ExecutionID]; !ok && len(c) >= maxCachedExecutions {
				clear(c)
			}
			kept := *e
			kept.Input = nil
			kept.CreatedAt, kept.UpdatedAt = kept.CreatedAt.Truncate(time.Microsecond), kept.UpdatedAt.Truncate(time.Microsecond)
			if kept.ClosedAt != nil {
				at := kept.ClosedAt.Truncate(time.Microsecond)
				kept.ClosedAt = &at
			}
			c[e.ExecutionID] = kept
		}
	}
}
