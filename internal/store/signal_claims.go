package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SignalRef names a keyed signal delivery.
type SignalRef struct {
	ExecutionID    string
	IdempotencyKey string
}

// LoadSignalClaims returns which of the keyed signals were delivered.
func LoadSignalClaims(ctx context.Context, tx Tx, refs []SignalRef) (map[SignalRef]bool, error) {
	return readAlone(ctx, tx, refs, (*Reads).LoadSignalClaims)
}

// LoadSignalClaims marks in out the keyed signals that were delivered.
func (r *Reads) LoadSignalClaims(refs []SignalRef, out map[SignalRef]bool) {
	if len(refs) == 0 {
		return
	}
	ids := make([]string, len(refs))
	keys := make([]string, len(refs))
	for i, ref := range refs {
		ids[i], keys[i] = ref.ExecutionID, ref.IdempotencyKey
	}
	r.b.Queue(`SELECT execution_id::text, idempotency_key FROM signal_claims
		WHERE (execution_id, idempotency_key) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))`, ids, keys).Query(func(rows pgx.Rows) error {
		var ref SignalRef
		_, err := pgx.ForEachRow(rows, []any{&ref.ExecutionID, &ref.IdempotencyKey}, func() error {
			out[ref] = true
			return nil
		})
		if err != nil {
			return fmt.Errorf("load signal claims: %w", err)
		}
		return nil
	})
}

func queueInsertSignalClaims(b *pgx.Batch, refs []SignalRef) {
	if len(refs) == 0 {
		return
	}
	ids, keys := make([]string, len(refs)), make([]string, len(refs))
	for i, ref := range refs {
		ids[i], keys[i] = ref.ExecutionID, ref.IdempotencyKey
	}
	b.Queue(`INSERT INTO signal_claims (execution_id, idempotency_key) SELECT unnest($1::uuid[]), unnest($2::text[])`, ids, keys)
}

// SignalKey is a keyed signal an execution received, with the duplicates
// of it that were dropped.
type SignalKey struct {
	IdempotencyKey string
	ReceivedAt     time.Time
	Duplicates     Duplicates
}

// SignalKeys reads into out the keyed signals execution received, oldest
// first.
func (r *Reads) SignalKeys(executionID string, out *[]SignalKey) {
	r.b.Queue(`SELECT idempotency_key, created_at, broker_duplicates, claim_duplicates FROM signal_claims
		WHERE execution_id = $1 ORDER BY created_at, idempotency_key`, executionID).Query(func(rows pgx.Rows) error {
		var k SignalKey
		_, err := pgx.ForEachRow(rows, []any{&k.IdempotencyKey, &k.ReceivedAt, &k.Duplicates.Broker, &k.Duplicates.Claim}, func() error {
			*out = append(*out, k)
			return nil
		})
		if err != nil {
			return fmt.Errorf("read signal keys of %s: %w", executionID, err)
		}
		return nil
	})
}
