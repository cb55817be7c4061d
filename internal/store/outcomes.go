package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/internal/wire"
)

// OutcomeRow is a command's outcome as the apply transaction stores it:
// Payload is the encoded wire.Outcome, kept until ExpiresAt.
type OutcomeRow struct {
	CommandID string
	StreamSeq uint64
	Payload   []byte
	ExpiresAt time.Time
}

// queueUpsertOutcomes stores outcomes, one statement for the batch. A row
// replaces a stored one for the same command id only if it comes from the
// same or a later message of the command stream, so the newest outcome
// wins whatever order two writers commit in. The rows must have distinct
// command ids (lastOf): one INSERT may not update a row twice.
func queueUpsertOutcomes(b *pgx.Batch, rows []OutcomeRow) {
	if len(rows) == 0 {
		return
	}
	rows = lastOf(rows, func(r OutcomeRow) string { return r.CommandID })
	n := len(rows)
	ids, seqs, payloads, expires := make([]string, n), make([]int64, n), make([]string, n), make([]time.Time, n)
	for i, r := range rows {
		ids[i], seqs[i], payloads[i], expires[i] = r.CommandID, int64(r.StreamSeq), string(r.Payload), r.ExpiresAt
	}
	b.Queue(`INSERT INTO command_outcomes (command_id, stream_seq, outcome, expires_at)
		SELECT unnest($1::text[]), unnest($2::bigint[]), unnest($3::text[])::json, unnest($4::timestamptz[])
		ON CONFLICT (command_id) DO UPDATE SET
			stream_seq = excluded.stream_seq, outcome = excluded.outcome, expires_at = excluded.expires_at
		WHERE command_outcomes.stream_seq <= excluded.stream_seq`, ids, seqs, payloads, expires)
}

// GetOutcome reads the stored outcome of a command; ok is false when there
// is none (not applied yet, unknown, or expired).
func GetOutcome(ctx context.Context, db DBTX, commandID string) (out wire.Outcome, ok bool, err error) {
	var payload []byte
	err = db.QueryRow(ctx, `SELECT outcome FROM command_outcomes WHERE command_id = $1 AND expires_at > now()`, commandID).Scan(&payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, false, nil
	}
	if err != nil {
		return out, false, fmt.Errorf("read outcome of command %s: %w", commandID, err)
	}
	if err := json.Unmarshal(payload, &out); err != nil {
		return out, false, fmt.Errorf("decode outcome of command %s: %w", commandID, err)
	}
	return out, true, nil
}

// SweepExpiredOutcomes deletes up to limit expired outcomes and returns
// how many it deleted. Readers ignore expired rows, so nothing depends on
// when it runs.
func SweepExpiredOutcomes(ctx context.Context, db DBTX, limit int) (int64, error) {
	return sweepExpired(ctx, db, "command_outcomes", "outcomes", limit)
}
