package registry

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/broker"
)

// Index mirrors the workers bucket's registrations of names in memory, by
// kind, name and task queue, and follows their changes; it passes the
// workers' records by. Start it, then ask Serves.
type Index struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu sync.RWMutex
	// m maps a served prefix (kind.name.queue) to its workers' expiries.
	m    map[string]map[string]time.Time
	stop func()
}

// NewIndex returns an Index of kv.
func NewIndex(kv jetstream.KeyValue, log *slog.Logger) *Index {
	return &Index{kv: kv, log: log, m: map[string]map[string]time.Time{}}
}

// Start loads the bucket, then follows it until Close.
func (x *Index) Start(ctx context.Context) error {
	if x.kv == nil {
		x.log.Warn("no HARVEST_WORKERS bucket (declared by a scheduler of this version): every workflow counts as served until this process restarts")
		return nil
	}
	stop, err := broker.Follow(ctx, x.kv, x.apply)
	if err != nil {
		return err
	}
	x.stop = stop
	return nil
}

// Close stops following the bucket. Safe to call twice.
func (x *Index) Close() {
	if x.stop != nil {
		x.stop()
		x.stop = nil
	}
}

func (x *Index) apply(e jetstream.KeyValueEntry) {
	if _, _, _, _, ok := nameKey(e.Key()); !ok {
		return // a worker's record, or a key of a later version
	}
	prefix, worker, ok := splitKey(e.Key())
	if !ok {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		x.set(prefix, worker, time.Time{})
		return
	}
	ent, err := decodeEntry(e.Value())
	if err != nil {
		x.log.Warn("ignoring undecodable worker registration", "bucket", x.kv.Bucket(), "key", e.Key(), "err", err)
	}
	x.set(prefix, worker, ent.ExpiresAt)
}

// set records worker's expiry under prefix; a zero expiry removes it.
func (x *Index) set(prefix, worker string, expires time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if expires.IsZero() {
		delete(x.m[prefix], worker)
		if len(x.m[prefix]) == 0 {
			delete(x.m, prefix)
		}
		return
	}
	if x.m[prefix] == nil {
		x.m[prefix] = map[string]time.Time{}
	}
	x.m[prefix][worker] = expires
}

// cached says whether the mirror holds a live registration.
func (x *Index) cached(kind, name, taskQueue string, now time.Time) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, exp := range x.m[served(kind, name, taskQueue)] {
		if now.Before(exp) {
			return true
		}
	}
	return false
}

// Serves says whether a live worker has registered name of kind on
// taskQueue at now: from the mirror, and on a miss from the bucket
// itself (Lookup).
//
// Without the bucket (a topology bound before any scheduler of this
// version declared it) everything is served: starts go on, as they did
// before workers registered.
func (x *Index) Serves(ctx context.Context, kind, name, taskQueue string, now time.Time) (bool, error) {
	if x.kv == nil {
		return true, nil
	}
	if x.cached(kind, name, taskQueue, now) {
		return true, nil
	}
	return Lookup(ctx, x.kv, kind, name, taskQueue, now)
}

// Names are the names of kind that live workers serve at now, each with
// how many live workers registered it (on any task queue), from the
// mirror.
func (x *Index) Names(kind string, now time.Time) map[string]int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	workers := map[string]map[string]bool{}
	for prefix, ws := range x.m {
		k, rest, ok := strings.Cut(prefix, ".")
		if !ok || k != kind {
			continue
		}
		name, _, ok := strings.Cut(rest, ".")
		if !ok {
			continue
		}
		for w, exp := range ws {
			if now.Before(exp) {
				if workers[name] == nil {
					workers[name] = map[string]bool{}
				}
				workers[name][w] = true
			}
		}
	}
	out := make(map[string]int, len(workers))
	for name, ws := range workers {
		out[name] = len(ws)
	}
	return out
}
