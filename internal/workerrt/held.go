package workerrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
)

// handbackTimeout bounds the bucket reads and writes of a hand-back.
const handbackTimeout = 5 * time.Second

// heldTask is a task message a worker holds, from the moment it arrives
// until it is acknowledged or handed back. While it is held the worker's
// keeper tells the server every third of TaskAckWait that it is in
// progress, so the server delivers it again only when the worker vanishes
// or its acknowledgements stop reaching the server: TaskAckWait after the
// last one that did.
type heldTask struct {
	m jetstream.Msg
	// md is m's metadata; nil if unreadable.
	md *jetstream.MsgMetadata
	// until, when not zero, is when the keeper lets the task go (unix
	// nanoseconds).
	until atomic.Int64
	// unstarted caches earlierUnstarted; only the task's handler reads
	// and writes it.
	unstarted *bool
	// log, once the handler has decoded the task, is the worker's logger
	// tagged with the task's execution (logattr); only the handler reads
	// and writes it.
	log *slog.Logger
}

// taskLog is t's logger: tagged with its execution once its handler has
// decoded it, the worker's before.
func (rt *Runtime) taskLog(t *heldTask) *slog.Logger {
	if t.log != nil {
		return t.log
	}
	return rt.log
}

func newHeldTask(m jetstream.Msg) *heldTask {
	t := &heldTask{m: m}
	if md, err := m.Metadata(); err == nil {
		t.md = md
	}
	return t
}

// delivery is which delivery of its message t is, from 1; 0 if unknown.
func (t *heldTask) delivery() uint64 {
	if t.md == nil {
		return 0
	}
	return t.md.NumDelivered
}

// keepUntil lets the task go at at: the keeper sends no in-progress
// acknowledgement for it after then. The zero time keeps it again.
func (t *heldTask) keepUntil(at time.Time) {
	if at.IsZero() {
		t.until.Store(0)
		return
	}
	t.until.Store(at.UnixNano())
}

// keeper keeps the tasks a worker holds in progress, all on one ticker.
// Safe for concurrent use.
type keeper struct {
	log  *slog.Logger
	mu   sync.Mutex
	held map[*heldTask]struct{}
	stop context.CancelFunc
	wg   conc.WaitGroup
}

// newKeeper starts a keeper that acknowledges its tasks in progress every
// interval, until close.
func newKeeper(interval time.Duration, log *slog.Logger) *keeper {
	ctx, cancel := context.WithCancel(context.Background())
	k := &keeper{log: log, held: map[*heldTask]struct{}{}, stop: cancel}
	k.wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var batch []*heldTask
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				batch = batch[:0]
				k.mu.Lock()
				for t := range k.held {
					if u := t.until.Load(); u == 0 || now.UnixNano() < u {
						batch = append(batch, t)
					}
				}
				k.mu.Unlock()
				var failed int
				var first error
				for _, t := range batch {
					// A task acknowledged since the batch was taken is
					// done with: nothing to keep in progress.
					if err := t.m.InProgress(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
						if failed++; first == nil {
							first = err
						}
					}
				}
				if failed > 0 {
					// Disconnected, most likely: the server delivers these
					// tasks again if it hears nothing for the ack wait.
					k.log.Warn("acknowledge tasks in progress", "tasks", failed, "err", first)
				}
			}
		}
	})
	return k
}

// hold starts keeping m in progress.
func (k *keeper) hold(m jetstream.Msg) *heldTask {
	t := newHeldTask(m)
	k.mu.Lock()
	k.held[t] = struct{}{}
	k.mu.Unlock()
	return t
}

// drop stops keeping t in progress; safe to call twice.
func (k *keeper) drop(t *heldTask) {
	k.mu.Lock()
	delete(k.held, t)
	k.mu.Unlock()
}

// close stops the keeper.
func (k *keeper) close() {
	k.stop()
	k.wg.Wait()
}

// handbackKey names the mark that delivery n of the message md describes
// was handed back unstarted. The stream sequence and the time the stream
// stored the message name the message, even across a reset of the stream.
func handbackKey(md *jetstream.MsgMetadata, n uint64) string {
	return fmt.Sprintf("%d.%d.%d", md.Sequence.Stream, md.Timestamp.UnixNano(), n)
}

// earlierUnstarted says whether no earlier delivery of t can have started
// its work: t is the first delivery, or the one before it was handed back
// unstarted, which a worker marks only when no delivery before that one
// can have started it either. When it cannot tell (the mark cannot be
// read), it says no: a task run twice is worse than one counted lost.
func (rt *Runtime) earlierUnstarted(ctx context.Context, t *heldTask) bool {
	if t.unstarted != nil {
		return *t.unstarted
	}
	unstarted := false
	switch n := t.delivery(); {
	case n == 1:
		unstarted = true
	case n > 1:
		_, err := rt.top.Handbacks.Get(ctx, handbackKey(t.md, n-1))
		switch {
		case err == nil:
			unstarted = true
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			rt.taskLog(t).Warn("read task hand-back mark; counting the task possibly started", "err", err)
		}
	}
	t.unstarted = &unstarted
	return unstarted
}

// Why a task is handed back, the reason label of
// harvest_worker_tasks_handed_back_total.
const (
	// handBackUnknown: the worker does not register the task's workflow or
	// activity. Tasks are routed by name, so only a task of the unrouted
	// subject an older scheduler wrote can be.
	handBackUnknown = "unknown"
	// handBackStopping: the worker is stopping and had not started it.
	handBackStopping = "stopping"
	// handBackNewerBuild: a newer build took the workflow's shared tasks
	// as the task came (builds.go).
	handBackNewerBuild = "newer_build"
	// handBackRetry: its workflow task failed; it is tried again later.
	// Counted as failed, not handed back.
	handBackRetry = ""
)

// handBackReasons are the reasons counted.
var handBackReasons = []string{handBackUnknown, handBackStopping, handBackNewerBuild}

// handBack returns t, a task of kind, to the stream unstarted, to be
// delivered again after delay (at once when 0), to this worker or
// another, and counts it by reason. When no delivery of it so far can have
// started its work, it first marks this delivery handed back, so that the
// next one runs the task as if it were the first.
func (rt *Runtime) handBack(t *heldTask, delay time.Duration, reason, kind string) {
	if reason != handBackRetry {
		rt.metrics.handedBack.WithLabelValues(kind, reason).Inc()
	}
	if rt.keeper != nil {
		rt.keeper.drop(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), handbackTimeout)
	defer cancel()
	if rt.earlierUnstarted(ctx, t) {
		if _, err := rt.top.Handbacks.Put(ctx, handbackKey(t.md, t.delivery()), []byte("unstarted")); err != nil {
			rt.taskLog(t).Warn("mark task handed back; its next delivery counts it possibly started", "err", err)
		}
	}
	var err error
	if delay > 0 {
		err = t.m.NakWithDelay(delay)
	} else {
		err = t.m.Nak()
	}
	if err != nil {
		rt.taskLog(t).Warn("hand task back; it is delivered again after the ack wait", "err", err)
	}
}
