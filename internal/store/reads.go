package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reads gathers the reads of an apply transaction so that they reach
// PostgreSQL in one round trip, executed in the order queued. Each method
// queues one statement (none for an empty request) that fills out when
// Send runs. The zero value is ready to use.
type Reads struct {
	b pgx.Batch
}

// Send runs the queued statements in tx and fills their results. It
// returns the first error, which aborts the transaction.
func (r *Reads) Send(ctx context.Context, tx Tx) error {
	if r.b.Len() == 0 {
		return nil
	}
	err := tx.SendBatch(ctx, &r.b).Close()
	r.b = pgx.Batch{}
	return err
}

// LockShard fences the transaction, as the function LockShard does, and
// sets *applied to the shard's applied stream sequence. Statements queued
// after it run under the lock.
func (r *Reads) LockShard(owner string, l Lease, applied *int64) {
	r.b.Queue(`
		SELECT o.applied_seq FROM shard_leases l JOIN shard_offsets o USING (shard)
		WHERE l.shard = $1 AND l.owner = $2 AND l.epoch = $3
		FOR UPDATE OF o FOR SHARE OF l`, l.Shard, owner, l.Epoch).QueryRow(func(row pgx.Row) error {
		err := row.Scan(applied)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("shard %d epoch %d: %w", l.Shard, l.Epoch, ErrLeaseLost)
		}
		if err != nil {
			return fmt.Errorf("lock shard %d: %w", l.Shard, err)
		}
		return nil
	})
}

// ClaimStartKeys takes each claim for the execution given with it, in one
// statement: a live claim held by another execution is left alone, an
// expired one is taken over. It puts in out, for every key, the claim as
// it now stands, for the keys it took; a key held by a live claim of
// another execution is missing, and ClaimsMissed reads those.
func (r *Reads) ClaimStartKeys(claims []NewClaim, window time.Duration, out map[ClaimRef]Claim) {
	if len(claims) == 0 {
		return
	}
	names := make([]string, len(claims))
	keys := make([]string, len(claims))
	execs := make([]string, len(claims))
	prints := make([]string, len(claims))
	for i, c := range claims {
		names[i], keys[i], execs[i], prints[i] = c.WorkflowName, c.IdempotencyKey, c.ExecutionID, c.Fingerprint
	}
	// The INSERT returns the claims it took (new keys, and expired claims
	// taken over); a key held by a live claim of another execution is not
	// returned, and ClaimsMissed reads it in a second round trip. Keeping
	// the common statement a plain INSERT matters: PostgreSQL plans it on
	// every call (store.PoolConfig), and planning the earlier form, which
	// also read the held claims in a UNION ALL, cost more than running it.
	r.b.Queue(`
		INSERT INTO start_claims AS c (workflow_name, idempotency_key, execution_id, fingerprint, expires_at)
		SELECT n, k, e::uuid, f, now() + $5::interval FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(n, k, e, f)
		ON CONFLICT (workflow_name, idempotency_key) DO UPDATE
			SET execution_id = EXCLUDED.execution_id, fingerprint = EXCLUDED.fingerprint,
				created_at = now(), expires_at = EXCLUDED.expires_at
			WHERE c.expires_at <= now()
		RETURNING `+claimColumns,
		names, keys, execs, prints, window).Query(func(rows pgx.Rows) error {
		if err := collectClaims(rows, out); err != nil {
			return fmt.Errorf("claim start keys: %w", err)
		}
		return nil
	})
}

// LatestByWorkflowID puts in out, for each (workflow_name, workflow_id),
// its most recent execution, locked for update.
func (r *Reads) LatestByWorkflowID(refs []WorkflowRef, out map[WorkflowRef]*Execution) {
	if len(refs) == 0 {
		return
	}
	names := make([]string, len(refs))
	ids := make([]string, len(refs))
	for i, ref := range refs {
		names[i], ids[i] = ref.WorkflowName, ref.WorkflowID
	}
	// One index probe per ref (executions_workflow_id_idx), newest first:
	// a plan PostgreSQL makes quickly and cannot turn into a scan.
	r.b.Queue(`
		SELECT e.* FROM unnest($1::text[], $2::text[]) AS u(n, id)
		CROSS JOIN LATERAL (
			SELECT `+executionColumns+` FROM executions
			WHERE workflow_name = u.n AND workflow_id = u.id
			ORDER BY created_at DESC LIMIT 1
		) AS e`, names, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			e, err := scanExecution(rows)
			if err != nil {
				return fmt.Errorf("look up executions by workflow id: %w", err)
			}
			out[WorkflowRef{e.WorkflowName, e.WorkflowID}] = e
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("look up executions by workflow id: %w", err)
		}
		return nil
	})
}

// LoadExecutions puts in out the executions with the given ids, locked for
// update. Unknown ids are left out.
func (r *Reads) LoadExecutions(ids []string, out map[string]*Execution) {
	if len(ids) == 0 {
		return
	}
	r.b.Queue(`SELECT `+executionColumns+` FROM executions WHERE execution_id = ANY($1::uuid[]) FOR UPDATE`, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			e, err := scanExecution(rows)
			if err != nil {
				return fmt.Errorf("load executions: %w", err)
			}
			out[e.ExecutionID] = e
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("load executions: %w", err)
		}
		return nil
	})
}

// LoadActivities puts in out the activities named, locked for update.
func (r *Reads) LoadActivities(refs []ActivityRef, out map[ActivityRef]*Activity) {
	if len(refs) == 0 {
		return
	}
	ids := make([]string, len(refs))
	aids := make([]int32, len(refs))
	for i, ref := range refs {
		ids[i], aids[i] = ref.ExecutionID, int32(ref.ActivityID)
	}
	r.b.Queue(`
		SELECT execution_id::text, activity_id, activity_name, status, attempt, idempotency_key, input, options, scheduled_at,
			heartbeat_details, last_heartbeat_at, outcome_unknown
		FROM activities
		WHERE (execution_id, activity_id) IN (SELECT * FROM unnest($1::uuid[], $2::int[]))
		FOR UPDATE`, ids, aids).Query(func(rows pgx.Rows) error {
		acts, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByPos[Activity])
		if err != nil {
			return fmt.Errorf("load activities: %w", err)
		}
		for _, a := range acts {
			out[ActivityRef{a.ExecutionID, a.ActivityID}] = a
		}
		return nil
	})
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
