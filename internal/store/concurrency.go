package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/internal/wire"
)

// Concurrency start policies (docs/start-policies.md#concurrency): a
// key's state is its start_policy_keys row (PolicyState.Running, Queued,
// Limit); its Pending executions wait in concurrency_waiting, in the
// order their starts came.

// ConcurrencyWrites are what an apply transaction changes of concurrency
// keys beyond their states: executions that wait, executions that began,
// and slots given back by executions that closed (added to the keys'
// counts without reading them).
type ConcurrencyWrites struct {
	Waiting []ConcurrencyWaiter
	// Begun are Pending executions that began: their waits go.
	Begun []string
	// Adjust are changes to keys' counts, made after their states are
	// written.
	Adjust []ConcurrencyAdjust
	// Release says a slot was given back: the shard looks for an
	// execution to begin at once.
	Release bool
}

// ConcurrencyWaiter is a Pending execution of a key.
type ConcurrencyWaiter struct {
	ExecutionID  string
	WorkflowName string
	Key          string
	Seq          int64
}

// ConcurrencyAdjust changes a key's counts by Running and Queued.
type ConcurrencyAdjust struct {
	WorkflowName, Key string
	Running, Queued   int
}

func queueConcurrencyWrites(b *pgx.Batch, shard int, w *ConcurrencyWrites) {
	if n := len(w.Waiting); n > 0 {
		ids, names, keys, seqs := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
		for i, c := range w.Waiting {
			ids[i], names[i], keys[i], seqs[i] = c.ExecutionID, c.WorkflowName, c.Key, c.Seq
		}
		b.Queue(`INSERT INTO concurrency_waiting (execution_id, shard, workflow_name, policy_key, seq)
			SELECT unnest($1::uuid[]), $2::int, unnest($3::text[]), unnest($4::text[]), unnest($5::bigint[])`, ids, shard, names, keys, seqs)
	}
	if len(w.Begun) > 0 {
		b.Queue(`DELETE FROM concurrency_waiting WHERE execution_id = ANY($1::uuid[])`, w.Begun)
	}
	if n := len(w.Adjust); n > 0 {
		names, keys, running, queued := make([]string, n), make([]string, n), make([]int32, n), make([]int32, n)
		for i, a := range w.Adjust {
			names[i], keys[i], running[i], queued[i] = a.WorkflowName, a.Key, int32(a.Running), int32(a.Queued)
		}
		// One key may be adjusted by several closes of the batch: summed.
		b.Queue(`UPDATE start_policy_keys AS k SET running = greatest(k.running + d.running, 0), queued = greatest(k.queued + d.queued, 0), stale_at = now()
			FROM (SELECT name, key, sum(r)::int AS running, sum(q)::int AS queued
				FROM unnest($1::text[], $2::text[], $3::int[], $4::int[]) AS a(name, key, r, q) GROUP BY name, key) AS d
			WHERE k.workflow_name = d.name AND k.kind = $5 AND k.policy_key = d.key`, names, keys, running, queued, wire.PolicyConcurrency)
	}
}

// ConcurrencyKey is a concurrency key with free slots and executions
// waiting for them, locked: its state and the executions that may begin,
// oldest first.
type ConcurrencyKey struct {
	WorkflowName, Key string
	State             *PolicyState
	Waiting           []string
}

// DueReleases locks up to limit concurrency keys of shard that have a
// free slot and an execution waiting for it, with the executions that
// may begin (as many as the key has free slots), oldest first.
func DueReleases(ctx context.Context, tx Tx, shard, limit int) ([]*ConcurrencyKey, error) {
	rows, err := tx.Query(ctx, `SELECT workflow_name, policy_key, running, queued, climit, stale_at FROM start_policy_keys
		WHERE shard = $1 AND kind = $2 AND queued > 0 AND running < climit ORDER BY workflow_name, policy_key LIMIT $3 FOR UPDATE SKIP LOCKED`,
		shard, wire.PolicyConcurrency, limit)
	if err != nil {
		return nil, fmt.Errorf("concurrency keys to release of shard %d: %w", shard, err)
	}
	var keys []*ConcurrencyKey
	_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
		k := &ConcurrencyKey{State: &PolicyState{}}
		err := row.Scan(&k.WorkflowName, &k.Key, &k.State.Running, &k.State.Queued, &k.State.Limit, &k.State.StaleAt)
		keys = append(keys, k)
		return struct{}{}, err
	})
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	n := len(keys)
	names, ks, free := make([]string, n), make([]string, n), make([]int32, n)
	byKey := make(map[[2]string]*ConcurrencyKey, n)
	for i, k := range keys {
		names[i], ks[i], free[i] = k.WorkflowName, k.Key, int32(k.State.Limit-k.State.Running)
		byKey[[2]string{k.WorkflowName, k.Key}] = k
	}
	rows, err = tx.Query(ctx, `SELECT k.name, k.key, w.execution_id::text
		FROM unnest($1::text[], $2::text[], $3::int[]) AS k(name, key, n)
		CROSS JOIN LATERAL (SELECT execution_id, seq FROM concurrency_waiting w
			WHERE w.workflow_name = k.name AND w.policy_key = k.key ORDER BY seq LIMIT k.n) AS w
		ORDER BY k.name, k.key, w.seq`, names, ks, free)
	if err != nil {
		return nil, fmt.Errorf("executions waiting for concurrency slots: %w", err)
	}
	var name, key, id string
	_, err = pgx.ForEachRow(rows, []any{&name, &key, &id}, func() error {
		k := byKey[[2]string{name, key}]
		k.Waiting = append(k.Waiting, id)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("executions waiting for concurrency slots: %w", err)
	}
	return keys, nil
}

// ErrNoConcurrencyKey is ConcurrencyState's error for a key no start
// under a concurrency policy has used (or none since it was swept).
var ErrNoConcurrencyKey = errors.New("no concurrency key")

// ConcurrencyState reads a concurrency key's counts and limit.
func ConcurrencyState(ctx context.Context, db DBTX, workflow, key string) (running, pending, limit int, err error) {
	err = db.QueryRow(ctx, `SELECT running, queued, climit FROM start_policy_keys WHERE workflow_name = $1 AND kind = $2 AND policy_key = $3`,
		workflow, wire.PolicyConcurrency, key).Scan(&running, &pending, &limit)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, 0, ErrNoConcurrencyKey
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read concurrency key of %s: %w", workflow, err)
	}
	return running, pending, limit, nil
}

// concurrencyDue is the NextTimer part that is due now when a key has a
// free slot and an execution waiting for it.
const concurrencyDue = `(SELECT now() FROM start_policy_keys WHERE shard = $1 AND kind = 'concurrency' AND queued > 0 AND running < climit LIMIT 1)`
