package scheduler

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/tracing"
)

// flushStoredOutbox publishes the rows an earlier owner (or an earlier
// session of this one) committed but did not get to publish.
func (r *runner) flushStoredOutbox(ctx context.Context) error {
	for {
		msgs, err := store.PendingOutbox(ctx, r.s.cfg.DB, r.lease.Shard, 1000)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return nil
		}
		if err := r.publish(ctx, msgs); err != nil {
			return err
		}
		if err := r.flushPublished(ctx); err != nil {
			return err
		}
	}
}

// publish sends outbox rows asynchronously with their message ids and
// returns without waiting: the shard goes on to its next batch while
// JetStream acknowledges them, in order, on the one connection. reap
// collects the acknowledgements; rows are deleted once acknowledged (see
// published), and a failed publish restarts the session, which publishes
// every row still in the outbox again under its message id.
func (r *runner) publish(ctx context.Context, msgs []*store.OutboxMsg) error {
	if len(r.inflight)+len(msgs) > maxInflight {
		if err := r.reap(ctx, true); err != nil {
			return err
		}
	}
	js := r.s.cfg.Topology.JS
	for _, m := range msgs {
		nm := nats.NewMsg(m.Subject)
		nm.Data = m.Payload
		if m.Trace != "" {
			nm.Header.Set(tracing.HeaderTraceparent, m.Trace)
		}
		f, err := js.PublishMsgAsync(nm, jetstream.WithMsgID(m.MsgID))
		if err != nil {
			return fmt.Errorf("publish outbox row %d to %s: %w", m.ID, m.Subject, err)
		}
		r.inflight = append(r.inflight, pending{f: f, row: m})
	}
	return nil
}

// maxInflight bounds a shard's outbox rows published and not yet
// acknowledged.
const maxInflight = 4096

// pending is an outbox row published and not yet acknowledged.
type pending struct {
	f   jetstream.PubAckFuture
	row *store.OutboxMsg
}
