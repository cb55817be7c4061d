package workerrt

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// cancellations follows the bucket of cancelled executions: it knows which
// executions were cancelled, and cancels the contexts of the activities
// this worker runs for them.
type cancellations struct {
	mu sync.Mutex
	// cancelled holds when each cancelled execution was announced.
	cancelled map[string]time.Time
	// ttl is the bucket's: an announcement older than it has expired from
	// the bucket, and is forgotten here too (sweep), so that a long-lived
	// worker does not keep one for every execution ever cancelled.
	ttl time.Duration
	// swept is how many announcements the last sweep kept.
	swept   int
	running map[string]map[*context.CancelFunc]struct{}
	stop    func()
}

func newCancellations() *cancellations {
	return &cancellations{cancelled: map[string]time.Time{}, running: map[string]map[*context.CancelFunc]struct{}{}}
}

// sweepEvery is how many announcements may come, beyond twice those the
// last sweep kept, before the next sweep.
const sweepEvery = 1024

// watch loads the bucket and follows it until stop.
func (c *cancellations) watch(ctx context.Context, kv jetstream.KeyValue) error {
	status, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("read the bucket of cancelled executions: %w", err)
	}
	c.mu.Lock()
	c.ttl = status.TTL()
	c.mu.Unlock()
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := kv.WatchAll(wctx, jetstream.IgnoreDeletes())
	if err != nil {
		cancel()
		return fmt.Errorf("watch cancelled executions: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() {
			if e != nil {
				c.cancel(e.Key(), e.Created())
			}
		}
	}()
	c.stop = func() {
		_ = w.Stop()
		cancel()
		<-done
	}
	return nil
}

// cancel records that executionID was cancelled, announced at at, and
// cancels its running activities.
func (c *cancellations) cancel(executionID string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelled[executionID] = at
	for f := range c.running[executionID] {
		(*f)()
	}
	if len(c.cancelled) > 2*c.swept+sweepEvery {
		c.sweep(time.Now())
	}
}

// sweep forgets the announcements the bucket has expired: a worker that
// started now would not know them either.
func (c *cancellations) sweep(now time.Time) {
	if c.ttl > 0 {
		for id, at := range c.cancelled {
			if now.Sub(at) > c.ttl {
				delete(c.cancelled, id)
			}
		}
	}
	c.swept = len(c.cancelled)
}

// track registers an activity's cancel function under its execution; it
// returns false, and registers nothing, if the execution is cancelled
// already. Call the returned release when the activity ends.
func (c *cancellations) track(executionID string, cancel context.CancelFunc) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.cancelled[executionID]; ok {
		return func() {}, false
	}
	set := c.running[executionID]
	if set == nil {
		set = map[*context.CancelFunc]struct{}{}
		c.running[executionID] = set
	}
	f := &cancel
	set[f] = struct{}{}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(set, f)
		if len(set) == 0 {
			delete(c.running, executionID)
		}
	}, true
}
