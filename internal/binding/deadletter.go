package binding

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/dedup"
)

// retry hands a message whose command could not be published back for a
// later delivery, or dead-letters it once it has had max_deliver.
func (r *Runner) retry(ctx context.Context, d delivery, cause error) {
	n := d.meta.NumDelivered
	if n >= uint64(d.b.MaxDeliver) {
		r.deadLetter(ctx, d, ReasonUnavailable, fmt.Errorf("command not published in %d deliveries: %w", n, cause))
		return
	}
	delay := r.retryDelay(n)
	d.log.Warn("binding command not published; the message will be delivered again", "err", cause, "deliveries", n, "retry_in", delay)
	r.messages.WithLabelValues(d.b.Name, resultRetried).Inc()
	if err := d.m.NakWithDelay(delay); err != nil {
		d.log.Warn("nak binding message", "err", err)
	}
}

// retryDelay is the wait before delivery n+1.
func (r *Runner) retryDelay(n uint64) time.Duration {
	d := r.cfg.RetryDelay
	for i := uint64(1); i < n && d < r.cfg.MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, r.cfg.MaxRetryDelay)
}

// deadLetter publishes the message to the binding's dead-letter subject
// with the reason in its headers (without its body if both exceed the
// server's max payload), then terminates it. If even that fails, the
// message is kept and delivered again later: it is never lost.
func (r *Runner) deadLetter(ctx context.Context, d delivery, reason string, cause error) {
	seq := d.meta.Sequence.Stream
	msg := &nats.Msg{Subject: d.b.DeadLetterSubject, Data: d.m.Data(), Header: nats.Header{}}
	for k, vs := range d.m.Headers() {
		// Nats-* headers steer the server (Nats-Msg-Id, Nats-Expected-*):
		// they are not the dead letter's.
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			msg.Header[k] = append([]string(nil), vs...)
		}
	}
	msg.Header.Set(HeaderDeadReason, reason)
	msg.Header.Set(HeaderDeadError, headerValue(cause.Error()))
	msg.Header.Set(HeaderBinding, d.b.Name)
	msg.Header.Set(HeaderStream, d.b.Stream)
	msg.Header.Set(HeaderStreamSeq, strconv.FormatUint(seq, 10))
	msg.Header.Set(HeaderSubject, d.m.Subject())
	msg.Header.Set(HeaderDeliveries, strconv.FormatUint(d.meta.NumDelivered, 10))
	if id := d.m.Headers().Get(jetstream.MsgIDHeader); id != "" {
		msg.Header.Set(HeaderMsgID, headerValue(id))
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	durable, err := r.publishDeadLetter(pctx, msg, dedup.ConnKey(d.b.Name, d.b.Stream, seq))
	if errors.Is(err, nats.ErrMaxPayload) {
		// A body near the max payload leaves no room for the headers:
		// the dead letter goes without it, rather than never.
		msg.Header.Set(HeaderBodyOmitted, strconv.Itoa(len(msg.Data)))
		msg.Data = nil
		durable, err = r.publishDeadLetter(pctx, msg, dedup.ConnKey(d.b.Name, d.b.Stream, seq))
	}
	cancel()
	if err != nil {
		delay := r.retryDelay(d.meta.NumDelivered)
		d.log.Error("binding could not dead-letter a message; it will be delivered again", "reason", reason, "cause", cause.Error(),
			"dead_letter_subject", d.b.DeadLetterSubject, "err", err, "retry_in", delay)
		r.messages.WithLabelValues(d.b.Name, resultRetried).Inc()
		if err := d.m.NakWithDelay(delay); err != nil {
			d.log.Warn("nak binding message", "err", err)
		}
		return
	}
	r.messages.WithLabelValues(d.b.Name, resultDeadLettered).Inc()
	if err := d.m.TermWithReason(reason); err != nil {
		d.log.Warn("terminate binding message", "err", err)
	}
	d.log.Warn("binding message dead-lettered", "reason", reason, "err", cause, "dead_letter_subject", d.b.DeadLetterSubject,
		"deliveries", d.meta.NumDelivered, "durable", durable)
}

// publishDeadLetter publishes a dead letter. When a stream captures the
// dead-letter subject the publication is a JetStream one, acknowledged by
// that stream and deduplicated by msgID; when none does, it is a core NATS
// publication, which reaches only the subscribers of the moment.
func (r *Runner) publishDeadLetter(ctx context.Context, msg *nats.Msg, msgID string) (durable bool, err error) {
	js := r.cfg.Topology.JS
	stream, err := js.StreamNameBySubject(ctx, msg.Subject)
	switch {
	case err == nil:
		if _, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(stream)); err != nil {
			return true, fmt.Errorf("publish dead letter to %s (stream %s): %w", msg.Subject, stream, err)
		}
		return true, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		nc := js.Conn()
		if err := nc.PublishMsg(msg); err != nil {
			return false, fmt.Errorf("publish dead letter to %s: %w", msg.Subject, err)
		}
		if err := nc.FlushWithContext(ctx); err != nil {
			return false, fmt.Errorf("publish dead letter to %s: %w", msg.Subject, err)
		}
		return false, nil
	default:
		return false, fmt.Errorf("look up the stream of %s: %w", msg.Subject, err)
	}
}

// headerValue makes s fit in one header line of bounded length.
func headerValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	const limit = 1024
	if len(s) > limit {
		s = strings.ToValidUTF8(s[:limit], "") + "…"
	}
	return s
}
