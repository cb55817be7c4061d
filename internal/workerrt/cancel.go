package workerrt

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// cancellations follows the bucket of cancelled executions: it knows which
// executions were stopped (terminated, or cancelled before their code
// ran) and which activities their workflows gave up (keys
// <execution_id>.<activity_id>, request_cancel_activity), and cancels the
// contexts of the attempts this worker runs for them.
type cancellations struct {
	mu sync.Mutex
	// cancelled holds when each key was announced: an execution id, or
	// an execution id and an activity id.
	cancelled map[string]time.Time
	// ttl is the bucket's: an announcement older than it has expired from
	// the bucket, and is forgotten here too (sweep), so that a long-lived
	// worker does not keep one for every execution ever cancelled.
	ttl time.Duration
	// swept is how many announcements the last sweep kept.
	swept int
	// running are the cancel functions of the attempts running, by
	// execution, each with its activity.
	running map[string]map[*context.CancelFunc]runningAttempt
	stop    func()
}

// runningAttempt is an attempt a worker runs: of activity activityID,
// eagerly or not.
type runningAttempt struct {
	activityID int
	eager      bool
}

// cancelRequestedSuffix ends the key (<execution_id>.cancel_requested)
// that says an execution was asked to cancel: its eager attempts, which
// hold the workflow task in which its code would learn of it, are
// cancelled, and none starts after it, so that the code learns of it
// promptly. Its other attempts go on until the code gives them up.
const cancelRequestedSuffix = "cancel_requested"

func newCancellations() *cancellations {
	return &cancellations{cancelled: map[string]time.Time{}, running: map[string]map[*context.CancelFunc]runningAttempt{}}
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

// activityKey is the key that says the workflow of executionID gave up
// its activity activityID.
func activityKey(executionID string, activityID int) string {
	return executionID + "." + strconv.Itoa(activityID)
}

// cancel records key, announced at at, and cancels the running attempts
// it names: all of an execution's, its eager ones, or one activity's.
func (c *cancellations) cancel(key string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	executionID, rest, sub := strings.Cut(key, ".")
	c.cancelled[key] = at
	for f, a := range c.running[executionID] {
		switch {
		case !sub, rest == strconv.Itoa(a.activityID), rest == cancelRequestedSuffix && a.eager:
			(*f)()
		}
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

// givenUp says whether the workflow of executionID gave up its activity
// activityID (request_cancel_activity).
func (c *cancellations) givenUp(executionID string, activityID int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.cancelled[activityKey(executionID, activityID)]
	return ok
}

// track registers the cancel function of an attempt of activity
// activityID of executionID, run eagerly or not; it returns false, and registers nothing, if
// the execution was stopped or the activity given up already. Call the
// returned release when the attempt ends.
func (c *cancellations) track(executionID string, activityID int, eager bool, cancel context.CancelFunc) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.cancelled[executionID]; ok {
		return func() {}, false
	}
	if _, ok := c.cancelled[activityKey(executionID, activityID)]; ok {
		return func() {}, false
	}
	if _, ok := c.cancelled[executionID+"."+cancelRequestedSuffix]; ok && eager {
		// Asked to cancel: an eager attempt would hold the task that
		// tells the code. The attempt is left out of the task's result,
		// and the scheduler dispatches it as any other (the code gives
		// it up, or runs it, in a disconnected context).
		return func() {}, false
	}
	set := c.running[executionID]
	if set == nil {
		set = map[*context.CancelFunc]runningAttempt{}
		c.running[executionID] = set
	}
	f := &cancel
	set[f] = runningAttempt{activityID: activityID, eager: eager}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(set, f)
		if len(set) == 0 {
			delete(c.running, executionID)
		}
	}, true
}
