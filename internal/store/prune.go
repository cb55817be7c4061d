package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PrunedTables are the tables a prune deletes an execution's rows from,
// in the order it deletes them: every table with an execution_id column
// (a test holds the schema to this list), the execution itself last.
var PrunedTables = []string{"history_events", "activities", "timers", "signal_claims", "workflow_updates", "callback_deliveries", "start_claims", "execution_states",
	"schedule_fires", "concurrency_waiting", "batch_items", "search_attributes", "executions"}

// pruneSettings make the planner take pruneCandidates' index scan in
// prune_after order, which stops at the limit (PruneShard says why).
const pruneSettings = `SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off`

// pruneCandidates locks the oldest executions of shard $1 past their
// retention at $2, up to $5, while $3 holds its lease at epoch $4.
const pruneCandidates = `
	SELECT e.execution_id::text, e.workflow_name, e.idempotency_key FROM executions AS e
	WHERE e.shard = $1 AND e.prune_after < $2
		AND EXISTS (SELECT 1 FROM shard_leases AS l WHERE l.shard = $1 AND l.owner = $3 AND l.epoch = $4)
	ORDER BY e.prune_after LIMIT $5
	FOR UPDATE OF e SKIP LOCKED`

// PruneResult says what one prune deleted: executions, and rows by table
// (the executions' own included).
type PruneResult struct {
	Executions int64
	Rows       map[string]int64
}

// PruneShard deletes, in one transaction, up to limit executions of the
// lease's shard whose prune_after is before now, oldest first, with every
// row that names them. It prunes only while owner holds the lease at its
// epoch, and skips executions another transaction has locked (an apply
// touching one: it is pruned next time), so a prune never waits on, nor
// deadlocks with, the shard's applies, and two schedulers never prune the
// same rows.
func PruneShard(ctx context.Context, db *pgxpool.Pool, owner string, lease Lease, now time.Time, limit int) (PruneResult, error) {
	res := PruneResult{Rows: map[string]int64{}}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// The oldest executions must come from an ordered scan of
		// executions_prune_after_idx that stops at the limit. With
		// statistics that predate the backlog (prune_after was NULL
		// everywhere when last analyzed, or the table was new) the
		// planner expects a few rows and fetches and sorts every due
		// execution of the shard instead: each transaction would cost as
		// much as the whole backlog.
		if _, err := tx.Exec(ctx, pruneSettings); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, pruneCandidates, lease.Shard, now, owner, lease.Epoch, limit)
		if err != nil {
			return err
		}
		var ids, keyNames, keys, keyExecs []string
		var id, name string
		var key *string
		if _, err := pgx.ForEachRow(rows, []any{&id, &name, &key}, func() error {
			ids = append(ids, id)
			if key != nil {
				keyNames, keys, keyExecs = append(keyNames, name), append(keys, *key), append(keyExecs, id)
			}
			return nil
		}); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		b := &pgx.Batch{}
		for _, table := range PrunedTables {
			var q *pgx.QueuedQuery
			switch table {
			case "start_claims":
				// A key's claim goes with the execution it resolves to; a
				// claim since taken over by a newer execution stays.
				q = b.Queue(`DELETE FROM start_claims AS c
					USING (SELECT unnest($1::text[]) AS workflow_name, unnest($2::text[]) AS idempotency_key, unnest($3::uuid[]) AS execution_id) AS d
					WHERE c.workflow_name = d.workflow_name AND c.idempotency_key = d.idempotency_key AND c.execution_id = d.execution_id`,
					keyNames, keys, keyExecs)
			case "signal_claims":
				// Keyed signals are claimed under the first run of a chain
				// of continued runs (Execution.Chain): they go when the
				// last run of the chain goes, not with its first.
				q = b.Queue(`DELETE FROM signal_claims AS sc WHERE sc.execution_id IN (
						SELECT coalesce(p.chain_id, p.execution_id) FROM executions AS p WHERE p.execution_id = ANY($1::uuid[]))
					AND NOT EXISTS (SELECT 1 FROM executions AS x WHERE x.execution_id = sc.execution_id AND x.execution_id <> ALL($1::uuid[]))
					AND NOT EXISTS (SELECT 1 FROM executions AS x WHERE x.chain_id = sc.execution_id AND x.execution_id <> ALL($1::uuid[]))`, ids)
			case "workflow_updates":
				// An update's key dedupes across its chain, as a signal's
				// does: its row goes when the chain's last run goes.
				q = b.Queue(`DELETE FROM workflow_updates AS u WHERE u.chain_id IN (
						SELECT coalesce(p.chain_id, p.execution_id) FROM executions AS p WHERE p.execution_id = ANY($1::uuid[]))
					AND NOT EXISTS (SELECT 1 FROM executions AS x WHERE x.execution_id = u.chain_id AND x.execution_id <> ALL($1::uuid[]))
					AND NOT EXISTS (SELECT 1 FROM executions AS x WHERE x.chain_id = u.chain_id AND x.execution_id <> ALL($1::uuid[]))`, ids)
			default:
				q = b.Queue(`DELETE FROM `+pgx.Identifier{table}.Sanitize()+` WHERE execution_id = ANY($1::uuid[])`, ids)
			}
			q.Exec(func(tag pgconn.CommandTag) error {
				res.Rows[table] += tag.RowsAffected()
				return nil
			})
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		res.Executions = res.Rows["executions"]
		return nil
	})
	if err != nil {
		return PruneResult{}, fmt.Errorf("prune shard %d: %w", lease.Shard, err)
	}
	return res, nil
}

// Retention says how long a workflow's closed executions stay.
type Retention struct {
	Default    time.Duration
	ByWorkflow map[string]time.Duration
}

// For is the retention of workflow's executions.
func (r Retention) For(workflow string) time.Duration {
	if d, ok := r.ByWorkflow[workflow]; ok && d > 0 {
		return d
	}
	return r.Default
}

// SetPruneAfter gives up to limit executions of shard that closed without
// a prune_after (before retention existed) theirs: their close plus r. It
// returns how many it set; none once every closed execution has one.
func SetPruneAfter(ctx context.Context, db DBTX, shard int, r Retention, limit int) (int64, error) {
	names := make([]string, 0, len(r.ByWorkflow))
	secs := make([]float64, 0, len(r.ByWorkflow))
	for name, d := range r.ByWorkflow {
		names, secs = append(names, name), append(secs, d.Seconds())
	}
	tag, err := db.Exec(ctx, `
		UPDATE executions AS e SET prune_after = e.closed_at + make_interval(secs => COALESCE(
			(SELECT r.secs FROM unnest($4::text[], $5::float8[]) AS r(workflow_name, secs) WHERE r.workflow_name = e.workflow_name), $2))
		WHERE e.ctid IN (
			SELECT ctid FROM executions WHERE shard = $1 AND closed_at IS NOT NULL AND prune_after IS NULL
			LIMIT $3 FOR UPDATE SKIP LOCKED)`,
		shard, r.Default.Seconds(), limit, names, secs)
	if err != nil {
		return 0, fmt.Errorf("set prune_after in shard %d: %w", shard, err)
	}
	return tag.RowsAffected(), nil
}

// PruneBacklog counts the executions of shards past their retention and
// not pruned yet.
func PruneBacklog(ctx context.Context, db DBTX, shards []int, now time.Time) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM executions WHERE shard = ANY($1) AND prune_after < $2`, shards, now).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the retention backlog: %w", err)
	}
	return n, nil
}

// ComingDue counts the executions of shards whose retention ends in
// [from, to): a range of executions_prune_after_idx per shard.
func ComingDue(ctx context.Context, db DBTX, shards []int, from, to time.Time) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM executions WHERE shard = ANY($1) AND prune_after >= $2 AND prune_after < $3`,
		shards, from, to).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the executions coming due: %w", err)
	}
	return n, nil
}

// PastRetention is one workflow's closed executions the pruners have yet
// to deal with.
type PastRetention struct {
	WorkflowName string
	// Executions are those whose prune_after is before the time asked
	// about: past their retention, not pruned yet.
	Executions int64
	// Oldest is the earliest prune_after among them; nil when there are
	// none.
	Oldest *time.Time
	// Unset counts its executions that closed without a prune_after
	// (before retention existed): the pruner gives them theirs (their
	// close plus their retention), then prunes them when that has passed.
	Unset int64
}

// ListPastRetention returns, by workflow name, the executions of shards
// whose prune_after is before asOf (what the pruners have yet to delete,
// when asOf is now) and their closed executions still without a
// prune_after; workflows with neither are left out. It only reads: each
// half is a range scan of its partial index (migration 019) per shard.
func ListPastRetention(ctx context.Context, db DBTX, shards []int, asOf time.Time) ([]PastRetention, error) {
	out, err := queryRows(ctx, db, pgx.RowToStructByPos[PastRetention], `
		SELECT workflow_name, count(prune_after), min(prune_after), count(*) - count(prune_after)
		FROM (
			SELECT workflow_name, prune_after FROM executions WHERE shard = ANY($1) AND prune_after < $2
			UNION ALL
			SELECT workflow_name, NULL FROM executions WHERE shard = ANY($1) AND closed_at IS NOT NULL AND prune_after IS NULL
		) AS e
		GROUP BY workflow_name ORDER BY workflow_name`, shards, asOf)
	if err != nil {
		return nil, fmt.Errorf("list executions past retention: %w", err)
	}
	return out, nil
}

// PruneBatches deletes, in one transaction, up to limit batch parts of
// the lease's shard that finished (completed or cancelled) before
// before, with the per-execution rows of their batches in this store
// (a batch has one part per store, on one shard of it). Like PruneShard
// it deletes only while owner holds the lease at its epoch. It returns
// how many parts it deleted.
func PruneBatches(ctx context.Context, db *pgxpool.Pool, owner string, lease Lease, before time.Time, limit int) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			DELETE FROM batches AS b WHERE b.ctid IN (
				SELECT ctid FROM batches WHERE shard = $1 AND state <> 'running' AND finished_at < $2
					AND EXISTS (SELECT 1 FROM shard_leases AS l WHERE l.shard = $1 AND l.owner = $3 AND l.epoch = $4)
				LIMIT $5 FOR UPDATE SKIP LOCKED)
			RETURNING b.batch_id::text`, lease.Shard, before, owner, lease.Epoch, limit)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		n = int64(len(ids))
		if n == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `DELETE FROM batch_items WHERE batch_id = ANY($1::uuid[])`, ids)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune batches of shard %d: %w", lease.Shard, err)
	}
	return n, nil
}
