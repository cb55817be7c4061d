package broker

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Follow watches every key of kv, or only those matching keys (filters,
// with wildcards) when there are any: apply gets each current entry,
// then every change, in order, from one goroutine. It returns once the
// current entries are applied (or ctx ends first: then it has stopped);
// stop ends the watch and waits for apply's last call. The watch itself
// outlives ctx, until stop.
func Follow(ctx context.Context, kv jetstream.KeyValue, apply func(jetstream.KeyValueEntry), keys ...string) (stop func(), err error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var w jetstream.KeyWatcher
	if len(keys) > 0 {
		w, err = kv.WatchFiltered(wctx, keys)
	} else {
		w, err = kv.WatchAll(wctx)
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch bucket %s: %w", kv.Bucket(), err)
	}
	loaded := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		markLoaded := sync.OnceFunc(func() { close(loaded) })
		defer markLoaded()
		for e := range w.Updates() {
			if e == nil { // the bucket's current values are all in
				markLoaded()
				continue
			}
			apply(e)
		}
	}()
	stop = func() {
		_ = w.Stop()
		cancel()
		<-done
	}
	select {
	case <-loaded:
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("load bucket %s: %w", kv.Bucket(), ctx.Err())
	}
}
