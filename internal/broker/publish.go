package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/wire"
)

// PublishCommand publishes cmd on its shard with Nats-Msg-Id set to its
// command id. After a lost PubAck it publishes again, with the same id,
// until an acknowledgement (duplicate or not) arrives or ctx ends. The
// returned PubAck says whether the broker had already seen the id
// (Duplicate), and its Sequence is the stream sequence of the message that
// holds the command.
func (t *Topology) PublishCommand(ctx context.Context, shard int, cmd *wire.Command) (*jetstream.PubAck, error) {
	return t.PublishCommandAs(ctx, shard, cmd, cmd.CommandID)
}

// ReportDuplicate publishes d, a duplicate caught outside the scheduler
// (a broker duplicate, a replay answered from a claim), on the shard of
// the command it duplicated, under a fresh id, so that the scheduler
// counts it after that command. A nil d publishes nothing.
func (t *Topology) ReportDuplicate(ctx context.Context, shard int, d *wire.DuplicateCommand) error {
	if d == nil {
		return nil
	}
	_, err := t.PublishCommand(ctx, shard, &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindDuplicate, Duplicate: d})
	return err
}

// PublishCommandAs is PublishCommand with an explicit Nats-Msg-Id, for
// publishing a command again when the broker's memory of its id outlives
// the command's meaning (a start whose idempotency claim has expired).
func (t *Topology) PublishCommandAs(ctx context.Context, shard int, cmd *wire.Command, msgID string) (*jetstream.PubAck, error) {
	data, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command %s: %w", cmd.CommandID, err)
	}
	subject := CommandSubject(shard, cmd.Kind)
	headroom := 128
	if t.Tracing.Enabled() {
		headroom += 128 // traceparent and tracestate
	}
	if limit := t.JS.Conn().MaxPayload(); limit > 0 && int64(len(data)+len(msgID)+headroom) > limit {
		// The server refuses it whatever we do.
		return nil, fmt.Errorf("publish command %s to %s: %w", cmd.CommandID, subject, &TooLargeError{Size: len(data), Limit: limit})
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	t.Tracing.Inject(ctx, msg.Header)
	backoff := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		ack, err := t.JS.PublishMsg(actx, msg, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(CommandStream))
		cancel()
		if err == nil {
			return ack, nil
		}
		if streamFull(err) {
			return nil, fmt.Errorf("publish command %s to %s: %w: %w", cmd.CommandID, subject, ErrStreamFull, err)
		}
		if ctx.Err() != nil || !retryablePublishError(err) {
			return nil, fmt.Errorf("publish command %s to %s: %w", cmd.CommandID, subject, err)
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("publish command %s to %s: %w", cmd.CommandID, subject, errors.Join(err, ctx.Err()))
		case <-timer.C:
		}
		backoff = min(backoff*2, time.Second)
	}
}

// ErrStreamFull is matched (errors.Is) by the error of a publish the
// stream refused because it holds its max bytes (Config.CommandMaxBytes):
// the schedulers have not been applying commands for a while. Nothing was
// stored; the same publish succeeds once they drain the stream. It is
// returned at once, not tried again until the context ends: ingest
// answers 503 at once, and a worker waits on its own terms.
var ErrStreamFull = errors.New("the stream is full: it holds its max bytes")

// errCodeStoreFailed is JetStream's answer to a message it did not store;
// its description says why ("maximum bytes exceeded").
const errCodeStoreFailed jetstream.ErrorCode = 10077

// streamFull says whether err is a stream's refusal of a message for its
// max bytes or max messages (DiscardNew).
func streamFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed &&
		(strings.Contains(apiErr.Description, "maximum bytes exceeded") || strings.Contains(apiErr.Description, "maximum messages exceeded"))
}

// TooLargeError says a message is larger than the NATS server carries
// (its max_payload, 1 MiB by default). It matches nats.ErrMaxPayload.
type TooLargeError struct {
	Size  int
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("message of %d bytes exceeds the server's max payload of %d", e.Size, e.Limit)
}

func (e *TooLargeError) Is(target error) bool { return target == nats.ErrMaxPayload }

// publishAttemptTimeout bounds one publish attempt, so a lost PubAck is
// retried instead of using up the caller's whole deadline.
const publishAttemptTimeout = 2 * time.Second

// retryablePublishError says whether publishing again with the same message
// id may succeed: a lost or late acknowledgement, no JetStream responder
// yet, or a replicated stream's "duplicate message id is in process".
func retryablePublishError(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == 10158
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoStreamResponse) || isTimeout(err) ||
		// Disconnected: the connection holds no publishes while it
		// reconnects (see ClientOptions), so the publish is tried again.
		errors.Is(err, nats.ErrReconnectBufExceeded)
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// CommandGone says whether the command stream no longer holds its
// message at seq. The streams are work queues: a command leaves its stream
// when the scheduler acknowledges it, after the transaction that applied
// it (and stored its outcome) committed. A message gone without an
// outcome was lost unapplied.
func (t *Topology) CommandGone(ctx context.Context, seq uint64) (bool, error) {
	_, err := t.commands.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up command %d in %s: %w", seq, CommandStream, err)
	}
	return false, nil
}
