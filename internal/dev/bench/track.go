package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/pool"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/store"
)

// closedExec is an execution that has closed.
type closedExec struct {
	status   string
	closedAt time.Time
	result   json.RawMessage
}

// probe finds which of the given executions have closed. It is called
// from one goroutine.
type probe interface {
	closed(ctx context.Context, ids []string) (map[string]closedExec, error)
}

// tracker follows the run's executions until each has closed. Safe for
// concurrent use.
type tracker struct {
	probe    probe
	interval time.Duration

	mu       sync.Mutex
	pending  map[string]struct{}
	done     map[string]closedExec
	progress time.Time // the last submission or completion
}

func newTracker(p probe, interval time.Duration) *tracker {
	return &tracker{probe: p, interval: interval, pending: map[string]struct{}{}, done: map[string]closedExec{}, progress: time.Now()}
}

// add follows an execution; adding one twice is harmless.
func (t *tracker) add(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.progress = time.Now()
	if _, ok := t.done[id]; ok {
		return
	}
	t.pending[id] = struct{}{}
}

// touch records progress other than a new execution (a signal answer).
func (t *tracker) touch() {
	t.mu.Lock()
	t.progress = time.Now()
	t.mu.Unlock()
}

func (t *tracker) closedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.done)
}

// closedSnapshot returns a copy of the closed executions.
func (t *tracker) closedSnapshot() map[string]closedExec {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]closedExec, len(t.done))
	for id, c := range t.done {
		out[id] = c
	}
	return out
}

// watch polls the probe until submitting is closed and every execution
// added has closed. It fails when nothing happens for stall.
func (t *tracker) watch(ctx context.Context, submitting <-chan struct{}, stall time.Duration) error {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	submitted := false
	for {
		t.mu.Lock()
		ids := make([]string, 0, len(t.pending))
		for id := range t.pending {
			ids = append(ids, id)
		}
		last := t.progress
		t.mu.Unlock()
		if submitted && len(ids) == 0 {
			return nil
		}
		if len(ids) > 0 {
			// A failed poll keeps what it found and is retried at the next
			// tick; only a stall ends the watch.
			got, _ := t.probe.closed(ctx, ids)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if len(got) > 0 {
				t.mu.Lock()
				for id, c := range got {
					delete(t.pending, id)
					t.done[id] = c
				}
				t.progress = time.Now()
				t.mu.Unlock()
			}
		}
		if time.Since(last) > stall {
			return fmt.Errorf("%w for %s: %d executions still running", ErrStalled, stall, len(ids))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-submitting:
			submitted = true
			submitting = nil
		case <-tick.C:
		}
	}
}

// dbProbe reads closed executions from the stack's databases (its
// stores), by primary key, in one query per store and poll.
type dbProbe struct{ dbs []*pgxpool.Pool }

func (p dbProbe) closed(ctx context.Context, ids []string) (map[string]closedExec, error) {
	out := map[string]closedExec{}
	const chunk = 5000
	for len(ids) > 0 {
		part := ids[:min(chunk, len(ids))]
		ids = ids[len(part):]
		var execs []*store.Execution
		for _, db := range p.dbs {
			found, err := store.ClosedExecutions(ctx, db, part)
			if err != nil {
				return nil, err
			}
			execs = append(execs, found...)
		}
		for _, e := range execs {
			c := closedExec{status: e.Status, result: e.Result}
			if e.ClosedAt != nil {
				c.closedAt = *e.ClosedAt
			} else {
				c.closedAt = e.UpdatedAt
			}
			out[e.ExecutionID] = c
		}
	}
	return out, nil
}

// apiListLimit is the list endpoint's largest page.
const apiListLimit = 500

// httpProbe finds closed executions through the HTTP API without
// reading each pending execution on every poll: it lists the workflow's
// running executions (one request); when they fit in one page, every
// pending execution missing from it has closed, and only those are read,
// once each, for their closed_at and result.
type httpProbe struct {
	api      *client.Client
	workflow string
}

func (p httpProbe) closed(ctx context.Context, ids []string) (map[string]closedExec, error) {
	running, err := p.api.List(ctx, client.ListOptions{Workflow: p.workflow, Status: client.StatusRunning, Limit: apiListLimit})
	if err != nil {
		return nil, err
	}
	if len(running) >= apiListLimit {
		return nil, nil // cannot tell yet
	}
	still := make(map[string]bool, len(running))
	for _, e := range running {
		still[e.ExecutionID] = true
	}
	var mu sync.Mutex
	out := map[string]closedExec{}
	pl := pool.New().WithErrors().WithMaxGoroutines(8)
	for _, id := range ids {
		if still[id] {
			continue
		}
		pl.Go(func() error {
			e, err := p.api.Describe(ctx, id)
			if err != nil {
				return err
			}
			if !e.Terminal() {
				return nil // started after the list was read
			}
			c := closedExec{status: e.Status, result: e.Result, closedAt: e.UpdatedAt}
			if e.ClosedAt != nil {
				c.closedAt = *e.ClosedAt
			}
			mu.Lock()
			out[id] = c
			mu.Unlock()
			return nil
		})
	}
	err = pl.Wait()
	return out, err
}
