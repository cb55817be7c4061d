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

	// keys, when set, are the only keys followed (NewWorkflowIndex).
	keys []string

	mu sync.RWMutex
	// m maps a served prefix (kind.name.queue) to its workers' entries.
	m    map[string]map[string]Entry
	stop func()
}

// NewIndex returns an Index of kv.
func NewIndex(kv jetstream.KeyValue, log *slog.Logger) *Index {
	return &Index{kv: kv, log: log, m: map[string]map[string]Entry{}}
}

// NewWorkflowIndex returns an Index of kv that follows only the
// registrations of workflows on taskQueue: what a worker needs to know
// which build is the newest of each workflow it registers
// (NewestBuild), without following every worker's every key.
func NewWorkflowIndex(kv jetstream.KeyValue, log *slog.Logger, workflows []string, taskQueue string) *Index {
	x := NewIndex(kv, log)
	for _, name := range workflows {
		x.keys = append(x.keys, served(KindWorkflow, name, taskQueue)+".*")
	}
	return x
}

// Start loads the bucket, then follows it until Close.
func (x *Index) Start(ctx context.Context) error {
	if x.kv == nil {
		x.log.Warn("no HARVEST_WORKERS bucket (declared by a scheduler of this version): every workflow counts as served until this process restarts")
		return nil
	}
	stop, err := broker.Follow(ctx, x.kv, x.apply, x.keys...)
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
		x.set(prefix, worker, Entry{})
		return
	}
	ent, err := decodeEntry(e.Value())
	if err != nil {
		x.log.Warn("ignoring undecodable worker registration", "bucket", x.kv.Bucket(), "key", e.Key(), "err", err)
	}
	x.set(prefix, worker, ent)
}

// set records worker's entry under prefix; one with no expiry removes it.
func (x *Index) set(prefix, worker string, ent Entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ent.ExpiresAt.IsZero() {
		delete(x.m[prefix], worker)
		if len(x.m[prefix]) == 0 {
			delete(x.m, prefix)
		}
		return
	}
	if x.m[prefix] == nil {
		x.m[prefix] = map[string]Entry{}
	}
	x.m[prefix][worker] = ent
}

// cached says whether the mirror holds a live registration, of build when
// it is not "".
func (x *Index) cached(kind, name, taskQueue, build string, now time.Time) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, ent := range x.m[served(kind, name, taskQueue)] {
		if ent.Live(now) && (build == "" || ent.BuildID == build) {
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
	if x.cached(kind, name, taskQueue, "", now) {
		return true, nil
	}
	return Lookup(ctx, x.kv, kind, name, taskQueue, now)
}

// ServesBuild is Serves for the workers of one build: whether a live
// worker of build has registered the workflow name on taskQueue at now,
// from the mirror, and on a miss from the bucket itself. Without the
// bucket no build is known.
func (x *Index) ServesBuild(ctx context.Context, name, taskQueue, build string, now time.Time) (bool, error) {
	if x.kv == nil {
		return false, nil
	}
	if x.cached(KindWorkflow, name, taskQueue, build, now) {
		return true, nil
	}
	return LookupBuild(ctx, x.kv, name, taskQueue, build, now)
}

// NewestBuild is the build whose workers an auto-upgrading execution of
// the workflow name on taskQueue goes to at now: of the builds live
// workers register it under, the one that arrived last (Entry.Arrived:
// a build arrives when its first worker starts while none of it runs,
// and a build restarted worker by worker keeps its arrival; ties go to
// the greater build id, so that every reader agrees). "" when no live worker says its build (none,
// or only workers of a version before builds routed tasks).
func (x *Index) NewestBuild(name, taskQueue string, now time.Time) string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return newestBuild(x.m[served(KindWorkflow, name, taskQueue)], now)
}

// newestBuild is NewestBuild over one name's entries.
func newestBuild(entries map[string]Entry, now time.Time) string {
	arrived := map[string]time.Time{}
	for _, ent := range entries {
		if !ent.Live(now) || ent.BuildID == "" {
			continue
		}
		if at, ok := arrived[ent.BuildID]; !ok || ent.arrival().Before(at) {
			arrived[ent.BuildID] = ent.arrival()
		}
	}
	var newest string
	var at time.Time
	for build, t := range arrived {
		if newest == "" || t.After(at) || (t.Equal(at) && build > newest) {
			newest, at = build, t
		}
	}
	return newest
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
		for w, ent := range ws {
			if ent.Live(now) {
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
