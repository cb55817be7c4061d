package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/store"
)

// TestEveryTableNamingAnExecutionIsPruned holds the schema to the
// pruner: a table with an execution_id column that PruneShard does not
// delete from would keep rows of pruned executions for ever. Add the new
// table to store.PrunedTables (and its delete to PruneShard).
func TestEveryTableNamingAnExecutionIsPruned(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	rows, err := db.Query(context.Background(), `
		SELECT table_name::text FROM information_schema.columns
		WHERE table_schema = current_schema() AND column_name = 'execution_id' ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	pruned := slices.Clone(store.PrunedTables)
	slices.Sort(pruned)
	require.Equal(t, pruned, tables, "the tables naming an execution are the tables a prune deletes from")
}

func insertClosed(t *testing.T, db store.DBTX, workflow string, closedAt time.Time, pruneAfter *time.Time) string {
	t.Helper()
	id := placement.MintExecutionID(1, 0)
	_, err := db.Exec(context.Background(), `
		INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status, closed_at, prune_after)
		VALUES ($1, 0, $2, $5, 'default', 'Completed', $3, $4)`, id, workflow, closedAt, pruneAfter, "wf-"+id)
	require.NoError(t, err)
	return id
}

// Executions that closed before retention existed get their prune_after
// from their close and their workflow's retention.
func TestSetPruneAfterForExecutionsClosedBefore(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	closed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := insertClosed(t, db, "charge", closed, nil)
	b := insertClosed(t, db, "collect", closed, nil)
	set := closed.Add(time.Hour)
	c := insertClosed(t, db, "charge", closed, &set)
	r := store.Retention{Default: 48 * time.Hour, ByWorkflow: map[string]time.Duration{"collect": 96 * time.Hour}}
	n, err := store.SetPruneAfter(ctx, db, 0, r, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a batch at a time")
	n, err = store.SetPruneAfter(ctx, db, 0, r, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	n, err = store.SetPruneAfter(ctx, db, 0, r, 10)
	require.NoError(t, err)
	require.Zero(t, n, "none left")
	for id, want := range map[string]time.Time{a: closed.Add(48 * time.Hour), b: closed.Add(96 * time.Hour), c: set} {
		e, err := store.GetExecution(ctx, db, id)
		require.NoError(t, err)
		require.NotNil(t, e.PruneAfter)
		require.True(t, want.Equal(*e.PruneAfter), "%s: %s, want %s", e.WorkflowName, e.PruneAfter, want)
	}
}

// A prune deletes the oldest executions past prune_after, a batch at a
// time, and only for the lease's holder at its epoch.
func TestPruneShardIsFencedByTheLease(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	now := time.Now()
	past, future := now.Add(-time.Minute), now.Add(time.Hour)
	old1 := insertClosed(t, db, "charge", now, &past)
	old2 := insertClosed(t, db, "charge", now, &past)
	keep := insertClosed(t, db, "charge", now, &future)

	leases, err := store.AcquireLeases(ctx, db, "owner-a", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	l := leases[0]
	res, err := store.PruneShard(ctx, db, "owner-b", l, now, 10)
	require.NoError(t, err)
	require.Zero(t, res.Executions, "not the lease's holder")
	res, err = store.PruneShard(ctx, db, "owner-a", store.Lease{Shard: 0, Epoch: l.Epoch + 1}, now, 10)
	require.NoError(t, err)
	require.Zero(t, res.Executions, "not the lease's epoch")

	res, err = store.PruneShard(ctx, db, "owner-a", l, now, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Executions)
	res, err = store.PruneShard(ctx, db, "owner-a", l, now, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Executions)
	require.EqualValues(t, 1, res.Rows["executions"])
	for _, id := range []string{old1, old2} {
		_, err := store.GetExecution(ctx, db, id)
		require.ErrorIs(t, err, store.ErrExecutionNotFound)
	}
	_, err = store.GetExecution(ctx, db, keep)
	require.NoError(t, err)
	n, err := store.PruneBacklog(ctx, db, []int{0}, now.Add(2*time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	past2, err := store.ListPastRetention(ctx, db, []int{0}, now.Add(2*time.Hour))
	require.NoError(t, err)
	require.Len(t, past2, 1)
	require.Equal(t, "charge", past2[0].WorkflowName)
	require.EqualValues(t, 1, past2[0].Executions)
}

// ListPastRetention counts, by workflow, the executions past their
// retention at the time asked about with the oldest prune_after, and the
// closed ones still without a prune_after; running executions and those
// not past retention yet are not counted.
func TestListPastRetentionByWorkflow(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	older, old, future := now.Add(-2*time.Hour), now.Add(-time.Hour), now.Add(time.Hour)
	insertClosed(t, db, "charge", now, &old)
	insertClosed(t, db, "charge", now, &older)
	insertClosed(t, db, "charge", now, &future)
	insertClosed(t, db, "collect", now, nil)
	insertClosed(t, db, "collect", now, &future)
	insertClosed(t, db, "sleep", now, &future)
	_, err := db.Exec(ctx, `
		INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status)
		VALUES ($1, 0, 'running', 'wf-running', 'default', 'Running')`, placement.MintExecutionID(1, 0))
	require.NoError(t, err)

	got, err := store.ListPastRetention(ctx, db, []int{0}, now)
	require.NoError(t, err)
	require.Len(t, got, 2, "%+v", got)
	require.Equal(t, "charge", got[0].WorkflowName)
	require.EqualValues(t, 2, got[0].Executions)
	require.NotNil(t, got[0].Oldest)
	require.True(t, older.Equal(*got[0].Oldest), "oldest %s, want %s", got[0].Oldest, older)
	require.Zero(t, got[0].Unset)
	require.Equal(t, store.PastRetention{WorkflowName: "collect", Unset: 1}, got[1])

	// Later, what will be past retention by then.
	got, err = store.ListPastRetention(ctx, db, []int{0}, future.Add(time.Second))
	require.NoError(t, err)
	require.Len(t, got, 3, "%+v", got)
	require.EqualValues(t, 3, got[0].Executions)
	require.EqualValues(t, 1, got[1].Executions)
	require.EqualValues(t, 1, got[1].Unset)
	require.Equal(t, "sleep", got[2].WorkflowName)
	require.EqualValues(t, 1, got[2].Executions)
	// Only the shards asked about.
	got, err = store.ListPastRetention(ctx, db, []int{1}, future.Add(time.Second))
	require.NoError(t, err)
	require.Empty(t, got)
}

// With statistics that do not know the backlog (here: none, the rows were
// just inserted; after an upgrade: prune_after NULL everywhere when last
// analyzed) the planner would fetch and sort every due execution of the
// shard for each prune transaction. Under the pruner's settings its query
// is the ordered index scan that stops at the limit.
func TestThePruneQueryScansTheIndexInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	_, err := db.Exec(ctx, `
		INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status, last_seq, closed_at, prune_after)
		SELECT gen_random_uuid(), g % 4, 'w', 'backlog-' || g, 'default', 'Completed', 1, now() - interval '8 days', now() - interval '1 day'
		FROM generate_series(1, 20000) AS g`)
	require.NoError(t, err)
	plan := func(settings string) string {
		var out string
		require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if settings != "" {
				if _, err := tx.Exec(ctx, settings); err != nil {
					return err
				}
			}
			return tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+store.PruneCandidates, 1, time.Now(), "a", 1, 100).Scan(&out)
		}))
		return out
	}
	require.Contains(t, plan(""), `"Sort"`, "the planner's own choice: fetch every due row, then sort them")
	p := plan(store.PruneSettings)
	require.NotContains(t, p, `"Sort"`)
	require.NotContains(t, p, `"Bitmap Heap Scan"`)
	require.Contains(t, p, `"Index Name": "executions_prune_after_idx"`)
	require.Contains(t, p, `"Scan Direction": "Forward"`)
}

// ComingDue counts what the pruner must keep up with: the executions of
// the shards asked about whose retention ends in the range.
func TestComingDueCountsTheRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	now := time.Now().Truncate(time.Second)
	_, err := db.Exec(ctx, `
		INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status, last_seq, closed_at, prune_after)
		SELECT gen_random_uuid(), g % 2, 'w', 'due-' || g, 'default', 'Completed', 1, $1::timestamptz, $1::timestamptz + g * interval '1 second'
		FROM generate_series(0, 29) AS g`, now)
	require.NoError(t, err)
	n, err := store.ComingDue(ctx, db, []int{0, 1}, now, now.Add(10*time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 10, n)
	n, err = store.ComingDue(ctx, db, []int{1}, now, now.Add(10*time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "only the shards asked about")
}

// PruneBatches deletes the batch parts that finished before the time
// asked, a batch at a time, with their per-execution rows, only for the
// lease's holder at its epoch; a running part, and one finished since,
// stay.
func TestPruneBatchesDeletesFinishedOnes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	now := time.Now().UTC()
	old, recent := now.Add(-8*24*time.Hour), now.Add(-time.Hour)
	insert := func(id, state string, finished *time.Time) {
		t.Helper()
		_, err := db.Exec(ctx, `INSERT INTO batches (batch_id, shard, spec, state, created_at, updated_at, finished_at)
			VALUES ($1, 0, '{}', $2, $3, $3, $4)`, id, state, old, finished)
		require.NoError(t, err)
		_, err = db.Exec(ctx, `INSERT INTO batch_items (batch_id, execution_id, at) VALUES ($1, $2, $3)`, id, placement.MintExecutionID(1, 0), old)
		require.NoError(t, err)
	}
	const (
		completed = "6f1c7d7e-0000-4000-8000-000000000001"
		cancelled = "6f1c7d7e-0000-4000-8000-000000000002"
		running   = "6f1c7d7e-0000-4000-8000-000000000003"
		fresh     = "6f1c7d7e-0000-4000-8000-000000000004"
	)
	insert(completed, "completed", &old)
	insert(cancelled, "cancelled", &old)
	insert(running, "running", nil)
	insert(fresh, "completed", &recent)

	leases, err := store.AcquireLeases(ctx, db, "owner-a", time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	l := leases[0]
	before := now.Add(-7 * 24 * time.Hour)
	n, err := store.PruneBatches(ctx, db, "owner-b", l, before, 10)
	require.NoError(t, err)
	require.Zero(t, n, "not the lease's holder")
	n, err = store.PruneBatches(ctx, db, "owner-a", l, before, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a batch at a time")
	n, err = store.PruneBatches(ctx, db, "owner-a", l, before, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	n, err = store.PruneBatches(ctx, db, "owner-a", l, before, 10)
	require.NoError(t, err)
	require.Zero(t, n, "none left")
	for id, kept := range map[string]bool{completed: false, cancelled: false, running: true, fresh: true} {
		_, err := store.GetBatch(ctx, db, id)
		if kept {
			require.NoError(t, err, id)
		} else {
			require.ErrorIs(t, err, store.ErrBatchNotFound, id)
		}
		var items int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM batch_items WHERE batch_id = $1`, id).Scan(&items))
		require.Equal(t, kept, items == 1, id)
	}
}
