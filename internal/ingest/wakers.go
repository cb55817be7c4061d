package ingest

import (
	"encoding/json"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/internal/wire"
)

// wakers hands what the scheduler announces on core NATS (a command's
// outcome, a change of an update or of an execution's query states) to
// the requests waiting for it: one subscription serves every request. A
// request that misses an announcement (core NATS may drop one) reads
// PostgreSQL, where the scheduler stored what it announced first.
type wakers[T any] struct {
	// decode is the key an announcement's subject names and the value it
	// carries; ok is false for one to drop.
	decode func(m *nats.Msg) (key string, v T, ok bool)
	// size is each waiter's channel's buffer: announcements beyond it,
	// not yet read, are dropped.
	size    int
	mu      sync.Mutex
	waiting map[string]map[chan T]struct{}
}

func newWakers[T any](size int, decode func(m *nats.Msg) (string, T, bool)) *wakers[T] {
	return &wakers[T]{decode: decode, size: size, waiting: map[string]map[chan T]struct{}{}}
}

// changeWakers wakes the requests waiting for a change named by key (the
// subject's, by keyOf); the announcement carries nothing they read.
func changeWakers(keyOf func(subject string) string) *wakers[struct{}] {
	return newWakers(1, func(m *nats.Msg) (string, struct{}, bool) {
		key := keyOf(m.Subject)
		return key, struct{}{}, key != ""
	})
}

// outcomeWakers hands commands' outcomes to the requests waiting for them.
func outcomeWakers(keyOf func(subject string) string) *wakers[wire.Outcome] {
	return newWakers(4, func(m *nats.Msg) (string, wire.Outcome, bool) {
		var out wire.Outcome
		key := keyOf(m.Subject)
		return key, out, key != "" && json.Unmarshal(m.Data, &out) == nil
	})
}

// wait registers interest in key; the channel gets what is announced of
// it. Call cancel when done.
func (w *wakers[T]) wait(key string) (ch chan T, cancel func()) {
	c := make(chan T, w.size)
	w.mu.Lock()
	set := w.waiting[key]
	if set == nil {
		set = map[chan T]struct{}{}
		w.waiting[key] = set
	}
	set[c] = struct{}{}
	w.mu.Unlock()
	return c, func() {
		w.mu.Lock()
		delete(set, c)
		if len(set) == 0 {
			delete(w.waiting, key)
		}
		w.mu.Unlock()
	}
}

// deliver is the subscription's handler.
func (w *wakers[T]) deliver(m *nats.Msg) {
	key, v, ok := w.decode(m)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.waiting[key] {
		select {
		case c <- v:
		default: // the buffer is full, not yet read
		}
	}
}
