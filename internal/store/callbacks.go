package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// CallbackDelivery is a completion callback to deliver.
type CallbackDelivery struct {
	ExecutionID string
	URL         string
	Payload     json.RawMessage
	Attempts    int
}

// LeaseDueCallbacks takes up to limit undelivered callbacks of the given
// shards that are due, and pushes their next attempt lease ahead, so no
// other replica delivers them meanwhile. Attempts counts the attempts made
// before this one.
func LeaseDueCallbacks(ctx context.Context, db DBTX, shards []int, lease time.Duration, limit int) ([]CallbackDelivery, error) {
	if len(shards) == 0 {
		return nil, nil
	}
	s32 := make([]int32, len(shards))
	for i, s := range shards {
		s32[i] = int32(s)
	}
	out, err := queryRows(ctx, db, pgx.RowToStructByPos[CallbackDelivery], `
		UPDATE callback_deliveries SET next_attempt_at = now() + $2::interval
		WHERE execution_id IN (
			SELECT execution_id FROM callback_deliveries
			WHERE shard = ANY($1) AND delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
			ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING execution_id::text, url, payload, attempts`, s32, lease, limit)
	if err != nil {
		return nil, fmt.Errorf("lease due callbacks: %w", err)
	}
	return out, nil
}

// CallbackDelivered records a successful delivery.
func CallbackDelivered(ctx context.Context, db DBTX, executionID string) error {
	_, err := db.Exec(ctx, `UPDATE callback_deliveries SET delivered_at = now(), attempts = attempts + 1, last_error = NULL
		WHERE execution_id = $1`, executionID)
	if err != nil {
		return fmt.Errorf("record callback delivery of %s: %w", executionID, err)
	}
	return nil
}

// CallbackFailed records a failed attempt: retried at next, or given up
// when next is nil.
func CallbackFailed(ctx context.Context, db DBTX, executionID string, reason string, next *time.Time) error {
	_, err := db.Exec(ctx, `UPDATE callback_deliveries SET attempts = attempts + 1, last_error = $2,
			next_attempt_at = COALESCE($3, next_attempt_at), failed_at = CASE WHEN $3::timestamptz IS NULL THEN now() END
		WHERE execution_id = $1`, executionID, reason, next)
	if err != nil {
		return fmt.Errorf("record callback failure of %s: %w", executionID, err)
	}
	return nil
}

func queueInsertCallbacks(b *pgx.Batch, shard int, cbs []CallbackDelivery) {
	if len(cbs) == 0 {
		return
	}
	n := len(cbs)
	ids, urls, payloads := make([]string, n), make([]string, n), make([]json.RawMessage, n)
	for i, c := range cbs {
		ids[i], urls[i], payloads[i] = c.ExecutionID, c.URL, c.Payload
	}
	b.Queue(`INSERT INTO callback_deliveries (execution_id, shard, url, payload)
		SELECT unnest($2::uuid[]), $1::int, unnest($3::text[]), unnest($4::jsonb[])
		ON CONFLICT (execution_id) DO NOTHING`, shard, ids, urls, payloads)
}

// CallbackState is an execution's completion callback delivery as it
// stands.
type CallbackState struct {
	URL      string
	Attempts int
	// NextAttemptAt is when the next attempt is due while the delivery
	// is neither delivered nor failed (it doubles as the lease of an
	// attempt in flight).
	NextAttemptAt time.Time
	DeliveredAt   *time.Time
	FailedAt      *time.Time
	LastError     *string
	CreatedAt     time.Time
}

// Callback reads into out the completion callback delivery of execution;
// out stays nil when there is none (no callback, or the execution has
// not closed).
func (r *Reads) Callback(executionID string, out **CallbackState) {
	r.b.Queue(`SELECT url, attempts, next_attempt_at, delivered_at, failed_at, last_error, created_at
		FROM callback_deliveries WHERE execution_id = $1`, executionID).Query(func(rows pgx.Rows) error {
		var c CallbackState
		_, err := pgx.ForEachRow(rows, []any{&c.URL, &c.Attempts, &c.NextAttemptAt, &c.DeliveredAt, &c.FailedAt, &c.LastError, &c.CreatedAt}, func() error {
			*out = &c
			return nil
		})
		if err != nil {
			return fmt.Errorf("read callback of %s: %w", executionID, err)
		}
		return nil
	})
}
