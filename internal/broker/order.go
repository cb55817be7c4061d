package broker

import (
	"context"
	"sync"
)

// Order orders the pullers of several consumers by level, so that what
// a process takes from a higher level's consumers comes before what it
// takes from a lower one's (a worker's task priorities,
// docs/start-policies.md#priorities). JetStream delivers each consumer's
// messages in stream order and knows no priority of messages, so each
// level is a consumer of its own, and the order is kept where the
// requests are made: a lane asks for messages only while no lane of a
// higher level may have a backlog.
//
// A lane may have a backlog from when it starts until a request of its
// ends short (the consumer had no more for it), and again from when a
// request of its is filled. While it may, it asks with no_wait, which
// the server answers at once, so a lane without a backlog holds the
// lower ones back for one round trip, not for a request's expiry; once
// its request ends short it waits for messages as any puller does, and
// holds back nothing meanwhile.
//
// What it cannot order is what a lower lane already holds when a higher
// one's messages arrive: at most that lane's window. Nor what the server
// stored but its consumer has not counted yet (the server tells a
// consumer of a new message asynchronously, and answers a no_wait
// request 404 while it counts none pending): a probe answered in that gap
// ends the lane's backlog early, and a lower lane asks once before the
// higher one's next request is filled. Safe for concurrent use.
type Order struct {
	mu sync.Mutex
	// busy counts, by level, the lanes that may have a backlog.
	busy map[int]int
	// changed is closed, and replaced, whenever a count falls.
	changed chan struct{}
}

// NewOrder returns an Order without lanes.
func NewOrder() *Order {
	return &Order{busy: map[int]int{}, changed: make(chan struct{})}
}

// Lane returns a new lane at level (higher goes first). It may have a
// backlog from now until the first request of its puller ends short, so
// that the lanes made together hold back the lower ones from the start,
// whichever puller runs first; one that does not pull yet says so
// (Park). Each time a puller starts on it again, it may have a backlog
// until a request ends short; when the puller returns, it holds back
// nothing.
func (o *Order) Lane(level int) *OrderLane {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.busy[level]++
	return &OrderLane{o: o, level: level, busy: true}
}

// OrderLane is one puller's place in an Order. Its methods are no-ops on
// a nil lane, which nothing holds back.
type OrderLane struct {
	o     *Order
	level int
	// busy says that the lane may have a backlog; guarded by o.mu.
	busy bool
}

// Park says that no puller pulls the lane for now: it holds back no
// lower lane until one does.
func (l *OrderLane) Park() { l.set(false) }

// set records whether the lane may have a backlog.
func (l *OrderLane) set(busy bool) {
	if l == nil {
		return
	}
	o := l.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if l.busy == busy {
		return
	}
	l.busy = busy
	if busy {
		o.busy[l.level]++
		return
	}
	o.busy[l.level]--
	close(o.changed)
	o.changed = make(chan struct{})
}

// probes says whether the lane's next request should be answered at once
// (no_wait): while it may have a backlog.
func (l *OrderLane) probes() bool {
	if l == nil {
		return false
	}
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	return l.busy
}

// heldBack says whether a lane of a higher level may have a backlog.
func (l *OrderLane) heldBack() bool {
	if l == nil {
		return false
	}
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	_, held := l.higherBusy()
	return held
}

// higherBusy says whether a lane of a higher level may have a backlog,
// with the channel that is closed when that may have changed; o.mu held.
func (l *OrderLane) higherBusy() (<-chan struct{}, bool) {
	for level, n := range l.o.busy {
		if level > l.level && n > 0 {
			return l.o.changed, true
		}
	}
	return nil, false
}

// wait waits until no lane of a higher level may have a backlog; false
// when ctx ends first.
func (l *OrderLane) wait(ctx context.Context) bool {
	if l == nil {
		return ctx.Err() == nil
	}
	for {
		l.o.mu.Lock()
		changed, held := l.higherBusy()
		l.o.mu.Unlock()
		if !held {
			return ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}
