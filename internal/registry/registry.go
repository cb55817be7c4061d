// Package registry owns the workers bucket (streams.WorkersBucket): which
// workflows and activities the live workers serve, on which task queue.
//
// A worker's Registrar puts one key per kind, name, task queue and
// worker (Key), whose value says until when it holds, and puts them again
// every third of the bucket's max age, the registration TTL, while the
// worker lives; a worker that stops removes its keys. The bucket's max
// age bounds it, and a worker that vanishes leaves keys that age out; an
// age-based removal produces no watch event, so a reader treats a value
// past its expiry as absent.
//
// Ingest's Index mirrors the bucket in memory for the hot path and, on a
// miss, looks the name up in the bucket itself, so a start right after a
// worker registered is not refused because the mirror lags.
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
}

// Live says whether e still holds at now.
func (e Entry) Live(now time.Time) bool { return now.Before(e.ExpiresAt) }

// Key is the key of one registration: <kind>.<name>.<task queue>.<worker>.
// Names, task queues and worker ids are letters, digits, '_' and '-'
// (dedup.ValidateName, dedup.NewID), so they are safe key tokens.
func Key(kind, name, taskQueue, worker string) string {
	return kind + "." + name + "." + taskQueue + "." + worker
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

// lookupAttempt bounds one watch of Lookup. A watch learns how many
// values it is to deliver as it is created; a value that ages out of the
// bucket (its TTL) before it is delivered never comes, and the watch
// would wait for it for good. Lookup then watches again, up to
// lookupAttempts times.
const (
	lookupAttempt  = 2 * time.Second
	lookupAttempts = 3
)

// Lookup reads the bucket itself: whether a live worker has registered
// name of kind on taskQueue at now.
func Lookup(ctx context.Context, kv jetstream.KeyValue, kind, name, taskQueue string, now time.Time) (bool, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, lookupAttempt)
		live, err := lookupOnce(actx, kv, kind, name, taskQueue, now)
		cancel()
		if err == nil || attempt == lookupAttempts || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return live, err
		}
	}
}

func lookupOnce(ctx context.Context, kv jetstream.KeyValue, kind, name, taskQueue string, now time.Time) (bool, error) {
	w, err := kv.Watch(ctx, served(kind, name, taskQueue)+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return false, fmt.Errorf("look up %s %q in %s: %w", kind, name, kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	live := false
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return false, fmt.Errorf("look up %s %q in %s: watch closed", kind, name, kv.Bucket())
			}
			if e == nil { // the current values are all in
				return live, nil
			}
			if ent, err := decodeEntry(e.Value()); err == nil && ent.Live(now) {
				live = true
			}
		case <-ctx.Done():
			return false, fmt.Errorf("look up %s %q in %s: %w", kind, name, kv.Bucket(), ctx.Err())
		}
	}
}
