package ingest

import (
	"context"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/broker"
)

// mirror keeps an in-memory copy of a key-value bucket, decoded, and
// follows its changes: every ingest replica watches the same bucket, so a
// change made through one reaches all of them.
type mirror[T any] struct {
	kv     jetstream.KeyValue
	decode func(key string, value []byte) (T, error)
	log    *slog.Logger

	mu   sync.RWMutex
	m    map[string]T
	stop func()
}

func newMirror[T any](kv jetstream.KeyValue, log *slog.Logger, decode func(string, []byte) (T, error)) *mirror[T] {
	return &mirror[T]{kv: kv, decode: decode, log: log, m: map[string]T{}}
}

// start loads the bucket, then follows it until close.
func (b *mirror[T]) start(ctx context.Context) error {
	stop, err := broker.Follow(ctx, b.kv, b.apply)
	if err != nil {
		return err
	}
	b.stop = stop
	return nil
}

func (b *mirror[T]) close() {
	if b.stop != nil {
		b.stop()
		b.stop = nil
	}
}

func (b *mirror[T]) apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		b.remove(e.Key())
		return
	}
	v, err := b.decode(e.Key(), e.Value())
	if err != nil {
		b.log.Warn("ignoring undecodable bucket entry", "bucket", b.kv.Bucket(), "key", e.Key(), "err", err)
		b.remove(e.Key())
		return
	}
	b.set(e.Key(), v)
}

func (b *mirror[T]) set(key string, v T) {
	b.mu.Lock()
	b.m[key] = v
	b.mu.Unlock()
}

func (b *mirror[T]) remove(key string) {
	b.mu.Lock()
	delete(b.m, key)
	b.mu.Unlock()
}

func (b *mirror[T]) get(key string) (T, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	v, ok := b.m[key]
	return v, ok
}

func (b *mirror[T]) all() []T {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]T, 0, len(b.m))
	for _, v := range b.m {
		out = append(out, v)
	}
	return out
}

// keys returns the keys the mirror holds.
func (b *mirror[T]) keys() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]string, 0, len(b.m))
	for k := range b.m {
		out = append(out, k)
	}
	return out
}
