package workerrt

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// cancellations follows the bucket of cancelled executions: it knows which
// executions were cancelled, and cancels the contexts of the activities
// this worker runs for them.
type cancellations struct {
	mu        sync.Mutex
	cancelled map[string]bool
	running   map[string]map[*context.CancelFunc]struct{}
	stop      func()
}

func newCancellations() *cancellations {
	return &cancellations{cancelled: map[string]bool{}, running: map[string]map[*context.CancelFunc]struct{}{}}
}

// watch loads the bucket and follows it until stop.
func (c *cancellations) watch(ctx context.Context, kv jetstream.KeyValue) error {
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
				c.cancel(e.Key())
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

func (c *cancellations) cancel(executionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelled[executionID] = true
	for f := range c.running[executionID] {
		(*f)()
	}
}

// track registers an activity's cancel function under its execution; it
// returns false, and registers nothing, if the execution is cancelled
// already. Call the returned release when the activity ends.
func (c *cancellations) track(executionID string, cancel context.CancelFunc) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelled[executionID] {
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
