// Package registry owns the workers bucket (broker.WorkersBucket): which
// workflows and activities the live workers serve, on which task queue.
//
// A worker's Registrar puts one key per kind, name, task queue and
// worker (Key), whose value says until when it holds, and one record key
// per worker (RecordKey), whose value (Record) says the same and who the
// worker is: its host, pid, build, start, task queue, what it registered
// and its load. It puts them again every third of the bucket's max age,
// the registration TTL, while the worker lives; a worker that stops
// removes its keys. The bucket's max age bounds it, and a worker that
// vanishes leaves keys that age out; an age-based removal produces no
// watch event, so a reader treats a value past its expiry as absent.
//
// The name keys are what routing reads; a record is for people (Workers).
// A record decodes as an Entry, and its first token is neither kind, so a
// reader of the name keys that predates records (Lookup's filter, an
// older Index) passes it by.
//
// Ingest's Index mirrors the name keys in memory for the hot path and, on
// a miss, looks the name up in the bucket itself, so a start right after
// a worker registered is not refused because the mirror lags.
//
// Registrar and Index are safe for concurrent use.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Kinds of registration: the first token of a key. They are persisted.
const (
	KindWorkflow = "wf"
	KindActivity = "act"
)

// Entry is a key's value.
type Entry struct {
	// Worker identifies the registering worker (its last key token).
	Worker string `json:"worker"`
	// Host is the worker's host name, for people reading the bucket.
	Host string `json:"host,omitempty"`
	// ExpiresAt is when the registration lapses unless renewed.
	ExpiresAt time.Time `json:"expires_at"`
	// BuildID is the worker's build id: what the workflow tasks it
	// completes record, and what routes a pinned execution's tasks
	// (docs/versioning.md#pinned-workflows). Empty from a worker of a
	// version before builds routed tasks.
	BuildID string `json:"build_id,omitempty"`
	// StartedAt is when the worker's registrar started.
	StartedAt time.Time `json:"started_at"`
	// Arrived is when the worker's build arrived (Index.NewestBuild):
	// the Arrived of the live workers of its build when it started, so
	// that a build restarted worker by worker keeps when it came, else
	// its own start. Zero from a worker of a version before it.
	Arrived time.Time `json:"arrived,omitzero"`
}

// arrival is when e's build arrived, as e says.
func (e Entry) arrival() time.Time {
	if !e.Arrived.IsZero() {
		return e.Arrived
	}
	return e.StartedAt
}

// Live says whether e still holds at now.
func (e Entry) Live(now time.Time) bool { return now.Before(e.ExpiresAt) }

// RecordPrefix is the first token of a worker's record key. It is
// persisted.
const RecordPrefix = "worker"

// Key is the key of one registration: <kind>.<name>.<task queue>.<worker>.
// Names, task queues and worker ids are letters, digits, '_' and '-'
// (dedup.ValidateName, dedup.NewID), so they are safe key tokens.
func Key(kind, name, taskQueue, worker string) string {
	return kind + "." + name + "." + taskQueue + "." + worker
}

// RecordKey is the key of a worker's record: worker.<worker>.
func RecordKey(worker string) string {
	return RecordPrefix + "." + worker
}

// nameKey splits the key of a registration of a name into its kind,
// name, task queue and worker; ok is false for any other key (a record).
func nameKey(key string) (kind, name, taskQueue, worker string, ok bool) {
	parts := strings.Split(key, ".")
	if len(parts) != 4 || (parts[0] != KindWorkflow && parts[0] != KindActivity) {
		return "", "", "", "", false
	}
	for _, p := range parts {
		if p == "" {
			return "", "", "", "", false
		}
	}
	return parts[0], parts[1], parts[2], parts[3], true
}

// served is the key prefix of every worker's registration of one name on
// one task queue, without its trailing dot.
func served(kind, name, taskQueue string) string {
	return kind + "." + name + "." + taskQueue
}

// splitKey returns a key's served prefix and its worker.
func splitKey(key string) (prefix, worker string, ok bool) {
	i := strings.LastIndexByte(key, '.')
	if i <= 0 || i == len(key)-1 {
		return "", "", false
	}
	return key[:i], key[i+1:], true
}

func decodeEntry(value []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(value, &e); err != nil {
		return e, fmt.Errorf("decode registration: %w", err)
	}
	if e.ExpiresAt.IsZero() {
		return e, errors.New("decode registration: no expires_at")
	}
	return e, nil
}

// scanAttempt bounds one watch of scan. A watch learns how many values
// it is to deliver as it is created; a value that ages out of the bucket
// (its TTL) before it is delivered never comes, and the watch would wait
// for it for good. scan then watches again, up to scanAttempts times.
const (
	scanAttempt  = 2 * time.Second
	scanAttempts = 3
)

// scan reads the current values of the keys of kv that match filter,
// deletions left out.
func scan(ctx context.Context, kv jetstream.KeyValue, filter string) ([]jetstream.KeyValueEntry, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, scanAttempt)
		entries, err := scanOnce(actx, kv, filter)
		cancel()
		if err == nil || attempt == scanAttempts || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return entries, err
		}
	}
}

func scanOnce(ctx context.Context, kv jetstream.KeyValue, filter string) ([]jetstream.KeyValueEntry, error) {
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("watch closed")
			}
			if e == nil { // the current values are all in
				return out, nil
			}
			out = append(out, e)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Lookup reads the bucket itself: whether a live worker has registered
// name of kind on taskQueue at now.
func Lookup(ctx context.Context, kv jetstream.KeyValue, kind, name, taskQueue string, now time.Time) (bool, error) {
	entries, err := scan(ctx, kv, served(kind, name, taskQueue)+".*")
	if err != nil {
		return false, fmt.Errorf("look up %s %q in %s: %w", kind, name, kv.Bucket(), err)
	}
	for _, e := range entries {
		if ent, err := decodeEntry(e.Value()); err == nil && ent.Live(now) {
			return true, nil
		}
	}
	return false, nil
}

// LookupBuild reads the bucket itself: whether a live worker of build has
// registered the workflow name on taskQueue at now.
func LookupBuild(ctx context.Context, kv jetstream.KeyValue, name, taskQueue, build string, now time.Time) (bool, error) {
	entries, err := scan(ctx, kv, served(KindWorkflow, name, taskQueue)+".*")
	if err != nil {
		return false, fmt.Errorf("look up build %q of workflow %q in %s: %w", build, name, kv.Bucket(), err)
	}
	for _, e := range entries {
		if ent, err := decodeEntry(e.Value()); err == nil && ent.Live(now) && ent.BuildID == build {
			return true, nil
		}
	}
	return false, nil
}

// BuildArrival reads the bucket itself: the earliest arrival that live
// workers of build registering any of workflows on taskQueue say, zero
// when none runs.
func BuildArrival(ctx context.Context, kv jetstream.KeyValue, workflows []string, taskQueue, build string, now time.Time) (time.Time, error) {
	var at time.Time
	for _, name := range workflows {
		entries, err := scan(ctx, kv, served(KindWorkflow, name, taskQueue)+".*")
		if err != nil {
			return time.Time{}, fmt.Errorf("look up the arrival of build %q in %s: %w", build, kv.Bucket(), err)
		}
		for _, e := range entries {
			ent, err := decodeEntry(e.Value())
			if err != nil || !ent.Live(now) || ent.BuildID != build {
				continue
			}
			if a := ent.arrival(); !a.IsZero() && (at.IsZero() || a.Before(at)) {
				at = a
			}
		}
	}
	return at, nil
}
