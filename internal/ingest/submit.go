package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// notAccepted answers a command the command stream did not take: 413
// command_too_large when it is larger than NATS carries (retrying cannot
// help), else 503 unavailable (JetStream down or unreachable: retry).
func notAccepted(err error, what string) (int, api.ErrorResponse) {
	var big *broker.TooLargeError
	if errors.As(err, &big) {
		return http.StatusRequestEntityTooLarge, api.ErrorResponse{Error: api.CodeCommandTooLarge, Limit: big.Limit,
			Message: fmt.Sprintf("the %s, encoded as a command, is %d bytes: more than the %d the command stream carries", what, big.Size, big.Limit)}
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return http.StatusRequestEntityTooLarge, api.ErrorResponse{Error: api.CodeCommandTooLarge,
			Message: fmt.Sprintf("the %s, encoded as a command, is larger than the command stream carries", what)}
	}
	return http.StatusServiceUnavailable, api.ErrorResponse{Error: api.CodeUnavailable, Message: fmt.Sprintf("the command stream did not accept the %s; retry", what)}
}

var (
	// errNotAccepted: the command stream did not take the command.
	errNotAccepted = errors.New("command not accepted")
	// errOutcomeLate: the command is durable, its outcome not known yet.
	errOutcomeLate = errors.New("outcome not known yet")
)

// submit publishes cmd under msgID and waits, up to OutcomeWait, for its
// outcome. duplicate says the broker already held a message with the id;
// out is then the newest outcome of the command id. errOutcomeLate means
// the command is accepted and its outcome can be polled.
func (s *Server) submit(ctx context.Context, shard int, cmd *wire.Command, msgID string) (out wire.Outcome, duplicate bool, err error) {
	outcomes, stopWaiting := s.waiters.wait(cmd.CommandID)
	defer stopWaiting()
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	ack, err := s.publishCommand(pctx, shard, cmd, msgID)
	cancel()
	if err != nil {
		logattr.Command(s.log, cmd).Warn("command not accepted", "kind", cmd.Kind, "err", err)
		return out, false, fmt.Errorf("%w: %w", errNotAccepted, err)
	}
	if ack.Duplicate {
		s.duplicate(ctx, "broker")
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.OutcomeWait)
	defer cancel()
	out, ok := s.awaitOutcome(wctx, s.poolOfShard(shard), cmd.CommandID, ack.Sequence, ack.Duplicate, outcomes)
	if !ok {
		s.markPending(cmd)
		return out, ack.Duplicate, errOutcomeLate
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		executionID, workflow := logattr.Of(cmd)
		args := []any{"kind", cmd.Kind, "status", out.Status, "duplicate", ack.Duplicate, "deduplicated", out.Deduplicated}
		if out.Error != "" {
			args = append(args, "error", out.Error)
		}
		logattr.With(s.log, cmp.Or(out.ExecutionID, executionID), cmp.Or(out.WorkflowName, workflow), cmd.CommandID).DebugContext(ctx, "command applied", args...)
	}
	return out, ack.Duplicate, nil
}

// publishCommand publishes cmd under msgID. When the broker answers that
// it holds the id already, and the message it names has left the command
// stream without an outcome, the command was lost unapplied (the stream
// only lets a command go once the transaction that applied it and stored
// its outcome has committed): it is published again, under an id derived
// from the lost message's sequence, so that concurrent retries collapse
// into one message and the broker's duplicate window does not swallow the
// key's retries. The claims in PostgreSQL keep it to one execution.
func (s *Server) publishCommand(ctx context.Context, shard int, cmd *wire.Command, msgID string) (*jetstream.PubAck, error) {
	ack, err := s.publishAs(ctx, shard, cmd, msgID)
	if err != nil || !ack.Duplicate || !s.hasDB() {
		return ack, err
	}
	lost, err := s.lost(ctx, s.poolOfShard(shard), cmd.CommandID, ack.Sequence)
	if err != nil {
		logattr.Command(s.log, cmd).Debug("tell a lost command from a pending one", "err", err)
		return ack, nil
	}
	if !lost {
		return ack, nil
	}
	logattr.Command(s.log, cmd).Warn("a command accepted earlier left the command stream unapplied: accepting it again",
		"kind", cmd.Kind, "stream_seq", ack.Sequence)
	s.metrics.lost.Inc()
	return s.publishAs(ctx, shard, cmd, fmt.Sprintf("%s/lost/%d", msgID, ack.Sequence))
}

// publishAs publishes cmd under msgID, timed and counted in the metrics.
func (s *Server) publishAs(ctx context.Context, shard int, cmd *wire.Command, msgID string) (*jetstream.PubAck, error) {
	began := time.Now()
	ack, err := s.cfg.Topology.PublishCommandAs(ctx, shard, cmd, msgID)
	s.metrics.published(cmd.Kind, time.Since(began), err)
	return ack, err
}

// lost says whether the command whose message was at seq left the stream
// without being applied.
func (s *Server) lost(ctx context.Context, db *pgxpool.Pool, commandID string, seq uint64) (bool, error) {
	gone, err := s.cfg.Topology.CommandGone(ctx, seq)
	if err != nil || !gone {
		return false, err
	}
	// Read after the message was seen gone: the outcome committed before
	// the scheduler acknowledged it.
	out, ok, err := store.GetOutcome(ctx, db, commandID)
	if err != nil {
		return false, err
	}
	return !ok || out.StreamSeq < seq, nil
}

// tallyTimeout bounds the publish of a duplicate's report.
const tallyTimeout = 2 * time.Second

// tally reports d, a duplicate caught here (the broker dropped a
// message, or a keyed start was answered from its claim), so that the
// scheduler counts it against the key it names: ingest never writes
// PostgreSQL. It goes on the duplicated command's shard, after that
// command, so it is applied once the command has made its claim. Only
// duplicates pay for it; a report that cannot be published is logged and
// lost (the metrics still count the duplicate). A nil d (a command
// without a key) reports nothing.
func (s *Server) tally(ctx context.Context, shard int, d *wire.DuplicateCommand) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(tallyTimeout, s.cfg.PublishTimeout))
	defer cancel()
	if err := s.cfg.Topology.ReportDuplicate(ctx, shard, d); err != nil {
		s.log.Warn("report a duplicate to the scheduler", "layer", d.Layer, "workflow", d.WorkflowName, "execution_id", d.ExecutionID, "err", err)
	}
}
