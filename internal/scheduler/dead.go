package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// deadReason is why a command is set aside: code is machine-readable,
// reason for a person.
type deadReason struct {
	code, reason string
}

// Dead letter codes.
const (
	// deadMalformed: the message is not a command the scheduler knows.
	deadMalformed = "malformed"
	// deadUnappliable: applying the command fails for a reason retrying
	// will not fix (PostgreSQL refuses a value it carries).
	deadUnappliable = "unappliable"
)

// deadLetter sets a command aside, unapplied, with its reason, and
// answers it with an error: a request waiting on it gets that instead of
// 202, and GET /api/harvest/commands/{id} shows it.
func (b *batch) deadLetter(c seqCommand) {
	kind := c.cmd.Kind
	if kind == "" {
		kind = lastToken(c.subject)
	}
	b.writes.DeadCommands = append(b.writes.DeadCommands, store.DeadCommand{
		StreamSeq: c.seq, CommandID: c.cmd.CommandID, Kind: kind, Subject: c.subject, Payload: c.raw,
		Error: c.dead.code, Reason: c.dead.reason,
	})
	logattr.Command(b.log, &c.cmd).Error("command set aside as dead: it cannot be applied", "kind", kind,
		"stream_seq", c.seq, "error", c.dead.code, "reason", c.dead.reason)
	if _, err := uuid.Parse(c.cmd.CommandID); err != nil {
		return // no command id to answer under (the message carried none, or garbage)
	}
	b.refuse(wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: c.cmd.Kind, AppliedAt: b.now},
		http.StatusUnprocessableEntity, api.CodeCommandRejected,
		"the scheduler could not apply this command and set it aside (harvest commands dead lists it): "+c.dead.reason)
}

// lastToken is the last token of a subject: a command subject's kind.
func lastToken(subject string) string {
	for i := len(subject) - 1; i >= 0; i-- {
		if subject[i] == '.' {
			return subject[i+1:]
		}
	}
	return subject
}

// isolate applies cmds, whose batch failed for a reason retrying will not
// fix (cause), one per transaction, so that the others apply: a command
// that fails alone for such a reason is set aside as dead, with the
// error, in a transaction of its own; any other failure ends the session
// as before. It returns the writes of them all.
func (r *runner) isolate(ctx context.Context, cmds []seqCommand, cause error) (*store.Writes, error) {
	r.log.Warn("a batch failed for a reason retrying will not fix: applying its commands one by one", "commands", len(cmds), "err", cause)
	all := &store.Writes{Shard: r.lease.Shard}
	for _, c := range cmds {
		w, err := r.applyCommands(ctx, []seqCommand{c}, false)
		if err != nil && poisonous(err) && c.dead == nil {
			c.dead = &deadReason{code: deadUnappliable, reason: unappliableReason(err)}
			w, err = r.applyCommands(ctx, []seqCommand{c}, false)
		}
		if err != nil {
			return nil, err
		}
		all.AppliedSeq = w.AppliedSeq
		all.DeadCommands = append(all.DeadCommands, w.DeadCommands...)
		all.NewTimers = append(all.NewTimers, w.NewTimers...)
		all.Policies.Groups = append(all.Policies.Groups, w.Policies.Groups...)
		all.Policies.Members = append(all.Policies.Members, w.Policies.Members...)
		all.Outcomes = append(all.Outcomes, w.Outcomes...)
		all.States = append(all.States, w.States...)
		all.Outbox = append(all.Outbox, w.Outbox...)
		all.HistoryCrossings.Warned += w.HistoryCrossings.Warned
		all.HistoryCrossings.Exceeded += w.HistoryCrossings.Exceeded
	}
	return all, nil
}

// poisonous says whether err, failing an apply transaction, comes from
// what the commands carry, so that applying them again would fail again:
// PostgreSQL refusing a value (class 22, data exception: a NUL byte, an
// unsupported escape, a number out of range), a constraint (23), or a
// limit (54, a value too large or nested too deep), or pgx unable to
// encode a value for its column. Everything else —
// connections, timeouts, a lost lease, PostgreSQL shutting down, a
// statement the schema does not know (a deploy gone wrong) — is retried
// and never dead-letters a command.
func poisonous(err error) bool {
	if errors.Is(err, errUnappliable) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		// pgx could not encode a value for PostgreSQL (an integer out of
		// its column's range): the batch never left, and never will. Its
		// "build" step is client-side encoding only (the "prepare" step
		// talks to the server, and can fail for a broken connection); the
		// step is unexported, so it is read from the message.
		var pre pgx.ErrPreprocessingBatch
		return errors.As(err, &pre) && strings.HasPrefix(pre.Error(), "error preprocessing batch (build)")
	}
	if len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

// unappliableReason is err as a dead letter's reason: PostgreSQL's
// message, with its SQLSTATE.
func unappliableReason(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Sprintf("PostgreSQL refused it: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	return err.Error()
}

// msgCommandID is the command id a message's Nats-Msg-Id carries, for a
// command that does not decode: ids are "<command id>" or
// "<command id>/<suffix>".
func msgCommandID(m jetstream.Msg) string {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	if i := strings.IndexByte(id, '/'); i >= 0 {
		id = id[:i]
	}
	if _, err := uuid.Parse(id); err != nil {
		return ""
	}
	return id
}
