package ingest

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// awaitOutcome waits for the outcome of the message at stream sequence seq,
// announced by the scheduler on core NATS once stored. A broker
// duplicate's outcome may be stored already, so it is read from
// PostgreSQL at once; any other is read from there too once the
// announcement is late (it is lost if the scheduler stops between its
// commit and the announcement).
func (s *Server) awaitOutcome(ctx context.Context, db *pgxpool.Pool, commandID string, seq uint64, duplicate bool, ch <-chan wire.Outcome) (wire.Outcome, bool) {
	// A fresh message is answered by its own outcome; a duplicate by the
	// newest outcome for the command id, which is at least as new as the
	// original message's.
	matches := func(out wire.Outcome) bool {
		if duplicate {
			return out.StreamSeq >= seq
		}
		return out.StreamSeq == seq
	}
	// Waiting began before the publish, so an outcome stored after it is
	// announced to ch; one stored before (a duplicate's original) is read
	// at once. Later reads only cover a lost announcement.
	first := lateOutcome
	if duplicate {
		first = 0
	}
	backoff := lateOutcome
	poll := time.NewTimer(first)
	defer poll.Stop()
	if db == nil {
		poll.Stop()
	}
	for {
		select {
		case <-poll.C:
			out, ok, err := store.GetOutcome(ctx, db, commandID)
			if err == nil && ok && matches(out) {
				return out, true
			}
			poll.Reset(backoff)
			backoff = min(backoff*2, time.Second)
		case out := <-ch:
			if matches(out) {
				return out, true
			}
		case <-ctx.Done():
			return wire.Outcome{}, false
		}
	}
}

// lateOutcome is how long a start waits for the announcement of its
// outcome before it also reads PostgreSQL for it.
const lateOutcome = 250 * time.Millisecond

// markPending records that a command was accepted, so polling it answers
// "accepted" until the scheduler stores its outcome.
func (s *Server) markPending(cmd *wire.Command) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Topology.MarkAccepted(ctx, cmd.CommandID); err != nil {
		logattr.Command(s.log, cmd).Debug("mark command pending", "err", err)
	}
}
