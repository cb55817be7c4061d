package scheduler

import (
	"net/http"

	"github.com/google/uuid"

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
	b.log.Error("command set aside as dead: it cannot be applied", "command_id", c.cmd.CommandID, "kind", kind,
		"stream_seq", c.seq, "error", c.dead.code, "reason", c.dead.reason)
	if _, err := uuid.Parse(c.cmd.CommandID); err != nil {
		return // no command id to answer under (the message carried none, or garbage)
	}
	b.refuse(wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: c.cmd.Kind, AppliedAt: b.now},
		http.StatusUnprocessableEntity, "command_rejected",
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
