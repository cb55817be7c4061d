package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
)

// reconnectCheck is how often a session looks for a reconnection of its
// NATS connection.
const reconnectCheck = 500 * time.Millisecond

// healthyAfter is how long a session must run without an error before a
// shard that failed counts as healthy although it had nothing to apply.
const healthyAfter = 10 * time.Second

// consumerName is the command consumer of shard's sessions.
func consumerName(shard int) string { return fmt.Sprintf("harvest_sched_%d", shard) }

func (r *runner) consumerName() string { return consumerName(r.lease.Shard) }

// session (re)creates the shard's consumer, so delivery restarts in stream
// order from the oldest unacknowledged command, publishes what an earlier
// owner left in the outbox, then applies batches until ctx ends or an error.
func (r *runner) session() error {
	ctx := r.ctx
	js := r.s.cfg.Topology.JS
	reconnects := js.Conn().Stats().Reconnects
	name := r.consumerName()
	if err := js.DeleteConsumer(ctx, broker.CommandStream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("reset consumer %s: %w", name, err)
	}
	cons, err := js.CreateConsumer(ctx, broker.CommandStream, jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: broker.CommandFilter(r.lease.Shard),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       r.s.cfg.AckWait,
		MaxAckPending: r.s.cfg.BatchSize * 4,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", name, err)
	}
	bound, err := store.BindShardStream(ctx, r.s.cfg.DB, r.s.cfg.Owner, r.lease, func(ctx context.Context) (time.Time, uint64, error) {
		st, err := js.Stream(ctx, broker.CommandStream)
		if err != nil {
			return time.Time{}, 0, fmt.Errorf("look up stream %s: %w", broker.CommandStream, err)
		}
		info := st.CachedInfo()
		return info.Created, info.State.LastSeq, nil
	})
	if err != nil {
		return err
	}
	if bound.Reset {
		r.log.Error("the command stream was created anew since this shard last applied from it: applying the new stream from its start; commands of the old stream that were not applied are lost with it",
			"stream", broker.CommandStream, "previous_stream_created", bound.Previous)
	}
	// Publishes of an earlier session are not waited for: their rows are
	// still in the outbox, and go again under their message ids.
	r.inflight = nil
	r.applied, r.known = -1, execCache{}
	r.delivered = 0
	if err := r.flushStoredOutbox(ctx); err != nil {
		return err
	}
	var got counts
	msgs := make(chan jetstream.Msg, r.s.cfg.BatchSize)
	consumeErr := make(chan error, 1)
	pullCtx, stopPull := context.WithCancel(ctx)
	var pulling conc.WaitGroup
	defer func() {
		stopPull()
		pulling.Wait()
	}()
	pulling.Go(func() {
		broker.Pull(pullCtx, js.Conn(), cons, r.s.cfg.BatchSize, func(m jetstream.Msg) {
			got.received.Add(1)
			select {
			case msgs <- m:
			case <-pullCtx.Done():
			}
		}, func(err error) {
			// The consumer is gone (a pull to a missing consumer has no
			// responder): a new session creates it again.
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrNoResponders) {
				select {
				case consumeErr <- err:
				default:
				}
				return
			}
			r.log.Warn("pull commands", "consumer", name, "err", err)
		})
	})
	timers := newTimerAlarm()
	defer timers.stop()
	if err := r.rearm(ctx, timers); err != nil {
		return err
	}
	// Published rows are deleted by the next batch's transaction; when
	// none comes for idleFlush, on their own.
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	var healthy <-chan time.Time
	if r.failing() {
		t := time.NewTimer(healthyAfter)
		defer t.Stop()
		healthy = t.C
	}
	// A connection that broke may have lost a delivery on its way; one
	// that a later delivery follows is caught by inOrder, but the last one
	// before a quiet spell would wait out AckWait. A reconnection since the
	// consumer was created ends the session, which delivers it again.
	reconnected := time.NewTicker(reconnectCheck)
	defer reconnected.Stop()
	r.consuming.Store(true)
	defer r.consuming.Store(false)
	for {
		if len(r.inflight) > 0 || len(r.published) > 0 {
			flush.Reset(idleFlush)
		}
		var first jetstream.Msg
		select {
		case <-ctx.Done():
			return nil
		case err := <-consumeErr:
			return fmt.Errorf("consumer %s: %w", name, err)
		case <-reconnected.C:
			if n := js.Conn().Stats().Reconnects; n != reconnects {
				r.log.Info("the NATS connection was re-established: applying the shard again from its oldest unacknowledged command", "reconnects", n)
				return fmt.Errorf("%w: the connection to NATS was re-established", errDeliveryGap)
			}
			continue
		case <-healthy:
			healthy = nil
			r.markHealthy(ctx)
			continue
		case <-flush.C:
			if err := r.flushPublished(ctx); err != nil {
				return err
			}
			continue
		case <-timers.c():
			// A timer decides against commands that arrived before it was
			// due (a heartbeat, a result): apply those first.
			if err := r.catchUp(ctx, cons, msgs, &got, timers, time.Now()); err != nil {
				return err
			}
			if err := r.fireDueTimers(ctx); err != nil {
				return err
			}
			if err := r.rearm(ctx, timers); err != nil {
				return err
			}
			continue
		case first = <-msgs:
		}
		if err := r.applyFrom(ctx, first, msgs, &got, timers); err != nil {
			return err
		}
	}
}

// applyFrom applies first and whatever else is waiting in msgs, up to a
// batch, and arms the alarm for the timers the batch set.
func (r *runner) applyFrom(ctx context.Context, first jetstream.Msg, msgs <-chan jetstream.Msg, got *counts, timers *timerAlarm) error {
	batch := []jetstream.Msg{first}
drain:
	for len(batch) < r.s.cfg.BatchSize {
		select {
		case m := <-msgs:
			batch = append(batch, m)
		default:
			break drain
		}
	}
	// What follows a lost delivery waits for the new session, which
	// delivers it again first.
	n, gap := r.inOrder(batch)
	if n == 0 {
		return gap
	}
	batch = batch[:n]
	writes, err := r.applyBatch(ctx, batch)
	if err != nil {
		return err
	}
	if r.failing() {
		r.markHealthy(ctx)
	}
	if gap != nil {
		return gap
	}
	got.applied += uint64(len(batch))
	if meta, err := batch[len(batch)-1].Metadata(); err == nil && meta.Timestamp.After(got.newest) {
		got.newest = meta.Timestamp
	}
	for _, tm := range writes.NewTimers {
		timers.arm(tm.FireAt)
	}
	for _, g := range writes.Policies.Groups {
		timers.arm(g.DueAt)
	}
	for _, sc := range writes.Schedules.Put {
		if sc.NextDue != nil {
			timers.arm(*sc.NextDue)
		}
	}
	if len(writes.Batches.New) > 0 {
		timers.arm(time.Now()) // a batch's first step
	}
	if writes.Concurrency.Release {
		// A concurrency slot was given back: the oldest execution
		// waiting for one begins now.
		timers.arm(time.Now())
	}
	r.s.metrics.deferredStarts(writes)
	return nil
}

// idleFlush is how long a shard with nothing to apply waits before it
// deletes its published outbox rows in a transaction of their own.
const idleFlush = 20 * time.Millisecond

// counts are a session's deliveries: received by the consume callback,
// and applied by the shard loop (which alone touches applied).
type counts struct {
	received atomic.Uint64
	applied  uint64
	// newest is when JetStream stored the newest command applied.
	newest time.Time
}

// errDeliveryGap says a delivery of the session's consumer never reached
// the shard loop: the session ends, and the next one applies the shard's
// commands again from the oldest unacknowledged.
var errDeliveryGap = errors.New("a command delivery was lost in flight")

// inOrder returns how many of msgs, from the first, continue the
// session's deliveries without a gap, and errDeliveryGap if one follows.
//
// The shard applies its commands in stream order, and skips a command at
// or below its applied sequence as one applied before. That holds only
// if no delivery is lost: the consumer delivers new commands in stream
// order, but one it sent on a connection that broke before the message
// arrived (a NATS server restarting gracefully keeps its consumers'
// state) is sent again only after AckWait, after later commands. Applying
// those first would move the applied sequence past it, and it would be
// skipped when it came back, never applied. Each delivery carries the
// consumer's delivery sequence, which grows by one per delivery, first
// or repeated; the session's consumer is new, so its first delivery is 1.
// A delivery that does not follow the previous one (a gap, or a sequence
// going back because the server lost the consumer's latest state) ends
// the session before anything after it is applied.
func (r *runner) inOrder(msgs []jetstream.Msg) (int, error) {
	for i, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			return i, fmt.Errorf("command metadata: %w", err)
		}
		if got := meta.Sequence.Consumer; got != r.delivered+1 {
			r.log.Warn("a command delivery was lost in flight: applying the shard again from its oldest unacknowledged command",
				"expected_delivery", r.delivered+1, "delivery", got, "stream_seq", meta.Sequence.Stream)
			return i, fmt.Errorf("%w: expected delivery %d, got %d (stream sequence %d)", errDeliveryGap, r.delivered+1, got, meta.Sequence.Stream)
		}
		r.delivered++
	}
	return len(msgs), nil
}

// catchUpLimit bounds how long due timers wait for the commands ahead of
// them, so a shard under a steady stream of commands still fires them.
const catchUpLimit = 2 * time.Second

// catchUp applies the shard's commands that JetStream holds or has
// delivered but that are not applied yet, so that due timers see them:
// without it a heartbeat queued behind a busy shard could lose the race
// against its own heartbeat timeout.
//
// Commands are delivered in stream order, so once a command stored at or
// after due has been applied, every one stored before it has been too:
// that ends the catch-up on a shard that never runs dry.
func (r *runner) catchUp(ctx context.Context, cons jetstream.Consumer, msgs <-chan jetstream.Msg, got *counts, timers *timerAlarm, due time.Time) error {
	deadline := time.NewTimer(catchUpLimit)
	defer deadline.Stop()
	if !got.newest.Before(due) {
		return nil
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer info: %w", err)
		}
		// The session's consumer is new, so its delivery count is this
		// session's: everything it delivered has reached the callback
		// and been applied, and nothing is left to deliver.
		if info.NumPending == 0 && info.Delivered.Consumer <= got.received.Load() && got.applied == got.received.Load() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			r.log.Warn("firing timers before the shard caught up", "pending", info.NumPending, "delivered", info.Delivered.Consumer, "applied", got.applied)
			return nil
		case m := <-msgs:
			if err := r.applyFrom(ctx, m, msgs, got, timers); err != nil {
				return err
			}
			if !got.newest.Before(due) {
				return nil
			}
		}
	}
}
