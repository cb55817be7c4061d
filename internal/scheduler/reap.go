package scheduler

import (
	"context"
	"fmt"

	"github.com/harvest-engine/harvest/internal/store"
)

// reap collects the acknowledgements that have come in (all of them, if
// wait), moving their rows to published.
func (r *runner) reap(ctx context.Context, wait bool) error {
	left := r.inflight[:0]
	for i, p := range r.inflight {
		if !wait {
			select {
			case ack := <-p.f.Ok():
				r.trackTask(p.row, ack)
				r.published = append(r.published, p.row.ID)
			case err := <-p.f.Err():
				r.inflight = append(left, r.inflight[i+1:]...)
				return fmt.Errorf("publish outbox row %d to %s: %w", p.row.ID, p.row.Subject, err)
			default:
				left = append(left, p)
			}
			continue
		}
		select {
		case ack := <-p.f.Ok():
			r.trackTask(p.row, ack)
			r.published = append(r.published, p.row.ID)
		case err := <-p.f.Err():
			r.inflight = append(left, r.inflight[i+1:]...)
			return fmt.Errorf("publish outbox row %d to %s: %w", p.row.ID, p.row.Subject, err)
		case <-ctx.Done():
			r.inflight = append(left, r.inflight[i:]...)
			return ctx.Err()
		}
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
