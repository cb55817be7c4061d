package harvesttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errWrongRevision is what Update answers when the key has moved on.
var errWrongRevision = errors.New("wrong last revision")

// ledger is harvest.Once's effect ledger kept in memory: the bucket
// operations Once makes (Get, Create, Update, Put, Delete), with each
// entry expiring the retention after it was last written, on the Env's
// clock, as the deployment's bucket does. The other methods of
// jetstream.KeyValue are not there (Once does not call them; the kit's
// tests would fail if it did). Delete does not check the revision it is
// given: the kit runs one attempt at a time, so no other caller can hold
// the key meanwhile.
type ledger struct {
	jetstream.KeyValue
	now func() time.Time
	ttl time.Duration

	mu      sync.Mutex
	rev     uint64
	entries map[string]ledgerEntry
}

type ledgerEntry struct {
	key     string
	value   []byte
	rev     uint64
	written time.Time
}

func (e ledgerEntry) Bucket() string                  { return "harvest_ledger" }
func (e ledgerEntry) Key() string                     { return e.key }
func (e ledgerEntry) Value() []byte                   { return e.value }
func (e ledgerEntry) Revision() uint64                { return e.rev }
func (e ledgerEntry) Created() time.Time              { return e.written }
func (e ledgerEntry) Delta() uint64                   { return 0 }
func (e ledgerEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

func newLedger(now func() time.Time, ttl time.Duration) *ledger {
	return &ledger{now: now, ttl: ttl, entries: map[string]ledgerEntry{}}
}

// live returns key's entry unless it has expired. Call with mu held.
func (l *ledger) live(key string) (ledgerEntry, bool) {
	e, ok := l.entries[key]
	if ok && !l.now().Before(e.written.Add(l.ttl)) {
		delete(l.entries, key)
		return ledgerEntry{}, false
	}
	return e, ok
}

func (l *ledger) write(key string, value []byte) uint64 {
	l.rev++
	l.entries[key] = ledgerEntry{key: key, value: append([]byte(nil), value...), rev: l.rev, written: l.now()}
	return l.rev
}

func (l *ledger) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.live(key)
	if !ok {
		return nil, jetstream.ErrKeyNotFound
	}
	return e, nil
}

func (l *ledger) Put(_ context.Context, key string, value []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.write(key, value), nil
}

func (l *ledger) Create(_ context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.live(key); ok {
		return 0, jetstream.ErrKeyExists
	}
	return l.write(key, value), nil
}

func (l *ledger) Update(_ context.Context, key string, value []byte, revision uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.live(key); !ok || e.rev != revision {
		return 0, fmt.Errorf("update %s: %w", key, errWrongRevision)
	}
	return l.write(key, value), nil
}

func (l *ledger) Delete(_ context.Context, key string, _ ...jetstream.KVDeleteOpt) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, key)
	return nil
}
