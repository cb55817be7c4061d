package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/store"
)

// errOutboxAckLate is a publish of an outbox row whose acknowledgement did
// not come within outboxAckTimeout.
var errOutboxAckLate = errors.New("no acknowledgement")

// outboxAckTimeout bounds the wait for a published task's acknowledgement.
// JetStream's asynchronous publishes wait for theirs forever by default,
// and one whose stream lost its leader (a cluster node went down) may
// never be answered: the session would wait with its batch in hand. Past
// the timeout the session fails and starts again, publishing the rows
// again under their message ids, which the stream deduplicates.
const outboxAckTimeout = 5 * time.Second

// reap collects the acknowledgements that have come in (all of them, if
// wait, each within outboxAckTimeout), moving their rows to published.
func (r *runner) reap(ctx context.Context, wait bool) error {
	var late <-chan time.Time
	if wait && len(r.inflight) > 0 {
		timer := time.NewTimer(outboxAckTimeout)
		defer timer.Stop()
		late = timer.C
	}
	left := r.inflight[:0]
	for i, p := range r.inflight {
		// The row's answer, an ack or an error (failed), whether or not
		// the reap waits for it.
		var ack *jetstream.PubAck
		var err error
		failed := false
		if !wait {
			select {
			case ack = <-p.f.Ok():
			case err = <-p.f.Err():
				failed = true
			default:
				left = append(left, p)
				continue
			}
		} else {
			select {
			case ack = <-p.f.Ok():
			case err = <-p.f.Err():
				failed = true
			case <-ctx.Done():
				r.inflight = append(left, r.inflight[i:]...)
				return ctx.Err()
			case <-late:
				r.inflight = append(left, r.inflight[i:]...)
				return fmt.Errorf("publish outbox row %d to %s: %w within %s", p.row.ID, p.row.Subject, errOutboxAckLate, outboxAckTimeout)
			}
		}
		if failed {
			r.inflight = append(left, r.inflight[i+1:]...)
			return fmt.Errorf("publish outbox row %d to %s: %w", p.row.ID, p.row.Subject, err)
		}
		r.trackTask(p.row, ack)
		r.published = append(r.published, p.row.ID)
	}
	clear(r.inflight[len(left):])
	r.inflight = left
	return nil
}

// flushPublished deletes the acknowledged outbox rows no batch has
// deleted yet.
func (r *runner) flushPublished(ctx context.Context) error {
	if err := r.reap(ctx, true); err != nil {
		return err
	}
	if len(r.published) == 0 {
		return nil
	}
	if err := store.DeleteOutbox(ctx, r.s.cfg.DB, r.published); err != nil {
		return err
	}
	r.published = nil
	return nil
}
