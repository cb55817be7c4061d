package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Timer kinds.
const (
	// TimerStart fires the first workflow task of a delayed start.
	TimerStart = "start"
	// TimerActivityTimeout ends an activity attempt that ran out of time.
	TimerActivityTimeout = "activity_timeout"
	// TimerActivityRetry starts the next attempt of a failed activity.
	TimerActivityRetry = "activity_retry"
	// TimerActivityHeartbeat checks that an attempt is still heartbeating.
	TimerActivityHeartbeat = "activity_heartbeat"
	// TimerWorkflowTask is a dispatched workflow task's deadline: if the
	// task has not completed by then and the task stream no longer holds
	// it, it is dispatched again.
	TimerWorkflowTask = "workflow_task"
	// TimerWorkflowTaskRetry ends the backoff after a workflow task
	// failed on its worker (Execution.TaskFailing): the task is
	// dispatched again.
	TimerWorkflowTaskRetry = "workflow_task_retry"
)

// TimerWorkflow fires a timer the workflow started (Sleep, NewTimer).
const TimerWorkflow = "workflow"

// TimerRunTimeout and TimerExecutionTimeout end an execution's run
// timeout and its chain's execution timeout.
const (
	TimerRunTimeout       = "run_timeout"
	TimerExecutionTimeout = "execution_timeout"
)

// TimerCancelGrace ends the grace of an execution asked to cancel: if it
// is still running then, it is terminated.
const TimerCancelGrace = "cancel_grace"

// WorkflowTimerRef names one timer a workflow started (its timer id).
type WorkflowTimerRef struct {
	ExecutionID string
	TimerID     int
}

// WorkflowTaskRef names one workflow task of one execution.
type WorkflowTaskRef struct {
	ExecutionID string
	TaskID      int
}

// Timer is a durable timer of one execution.
type Timer struct {
	ID          int64
	ExecutionID string
	Kind        string
	FireAt      time.Time
	Attrs       json.RawMessage
}

// DueTimers locks up to limit of the shard's timers that are due at now;
// only those of ids, when given.
func DueTimers(ctx context.Context, tx Tx, shard int, now time.Time, limit int, ids ...int64) ([]Timer, error) {
	timers, err := queryRows(ctx, tx, pgx.RowToStructByPos[Timer], `
		SELECT timer_id, execution_id::text, kind, fire_at, attrs FROM timers
		WHERE shard = $1 AND fire_at <= $2 AND ($4::bigint[] IS NULL OR timer_id = ANY($4))
		ORDER BY fire_at LIMIT $3 FOR UPDATE SKIP LOCKED`, shard, now, limit, ids)
	if err != nil {
		return nil, fmt.Errorf("due timers of shard %d: %w", shard, err)
	}
	return timers, nil
}

// DeleteTimer deletes one timer.
func DeleteTimer(ctx context.Context, tx Tx, id int64) error {
	if _, err := tx.Exec(ctx, `DELETE FROM timers WHERE timer_id = $1`, id); err != nil {
		return fmt.Errorf("delete timer %d: %w", id, err)
	}
	return nil
}

// NextTimer is when the shard's earliest timer fires, or its earliest
// group of deferred starts or schedule is due; ok is false when it has
// none.
func NextTimer(ctx context.Context, db DBTX, shard int) (at time.Time, ok bool, err error) {
	var next *time.Time
	if err := db.QueryRow(ctx, `SELECT least((SELECT min(fire_at) FROM timers WHERE shard = $1),
		(SELECT min(due_at) FROM deferred_starts WHERE shard = $1), (SELECT min(next_due) FROM schedules WHERE shard = $1),
		(SELECT min(next_due) FROM batches WHERE shard = $1 AND state = 'running'), `+concurrencyDue+`)`, shard).Scan(&next); err != nil {
		return at, false, fmt.Errorf("next timer of shard %d: %w", shard, err)
	}
	if next == nil {
		return at, false, nil
	}
	return *next, true, nil
}

func queueInsertTimers(b *pgx.Batch, shard int, timers []Timer) {
	if len(timers) == 0 {
		return
	}
	n := len(timers)
	ids, kinds, fireAts, attrs := make([]string, n), make([]string, n), make([]time.Time, n), make([]json.RawMessage, n)
	for i, tm := range timers {
		ids[i], kinds[i], fireAts[i], attrs[i] = tm.ExecutionID, tm.Kind, tm.FireAt, tm.Attrs
	}
	b.Queue(`INSERT INTO timers (shard, execution_id, kind, fire_at, attrs)
		SELECT $1::int, unnest($2::uuid[]), unnest($3::text[]), unnest($4::timestamptz[]), unnest($5::jsonb[])`, shard, ids, kinds, fireAts, attrs)
}

// queueDeleteTimers deletes the timers of activities that finished, the
// deadlines of workflow tasks that completed, and every timer of
// executions that closed, in one statement: a pair with a NULL activity id
// stands for all of its execution's timers.
func queueDeleteTimers(b *pgx.Batch, done []ActivityRef, closed []string, tasks []WorkflowTaskRef, cancelled []WorkflowTimerRef) {
	if len(done)+len(closed)+len(tasks)+len(cancelled) == 0 {
		return
	}
	ids := make([]string, 0, len(done)+len(closed)+len(tasks)+len(cancelled))
	for _, ref := range done {
		ids = append(ids, ref.ExecutionID)
	}
	for _, ref := range tasks {
		ids = append(ids, ref.ExecutionID)
	}
	for _, ref := range cancelled {
		ids = append(ids, ref.ExecutionID)
	}
	ids = append(ids, closed...)
	activities := make([]string, len(done))
	for i, ref := range done {
		activities[i] = ref.ExecutionID + "/" + strconv.Itoa(ref.ActivityID)
	}
	wfts := make([]string, len(tasks))
	for i, ref := range tasks {
		wfts[i] = ref.ExecutionID + "/" + strconv.Itoa(ref.TaskID)
	}
	timers := make([]string, len(cancelled))
	for i, ref := range cancelled {
		timers[i] = ref.ExecutionID + "/" + strconv.Itoa(ref.TimerID)
	}
	// One table, no join: PostgreSQL plans it on every call
	// (PoolConfig), and a join with the unnested arrays cost more to plan
	// than to run.
	b.Queue(`DELETE FROM timers AS t
		WHERE t.execution_id = ANY($1::uuid[])
			AND (t.execution_id = ANY($2::uuid[])
				OR (t.kind IN ('activity_timeout', 'activity_retry', 'activity_heartbeat')
					AND t.execution_id::text || '/' || (t.attrs->>'activity_id') = ANY($3::text[]))
				OR (t.kind = 'workflow_task'
					AND t.execution_id::text || '/' || (t.attrs->>'task_id') = ANY($4::text[]))
				OR (t.kind = 'workflow'
					AND t.execution_id::text || '/' || (t.attrs->>'timer_id') = ANY($5::text[])))`,
		ids, closed, activities, wfts, timers)
}

// TimerCounts are a shard's timers: all of them, and those due.
type TimerCounts struct {
	Pending, Due int64
}

// CountTimers counts the timers of shards, and those due at now, by shard
// (a shard without timers is left out); for the scheduler's metrics.
func CountTimers(ctx context.Context, db DBTX, shards []int, now time.Time) (map[int]TimerCounts, error) {
	rows, err := db.Query(ctx, `
		SELECT shard, count(*), count(*) FILTER (WHERE fire_at <= $2) FROM timers
		WHERE shard = ANY($1::int[]) GROUP BY shard`, shards, now)
	if err != nil {
		return nil, fmt.Errorf("count timers of shards %v: %w", shards, err)
	}
	out := make(map[int]TimerCounts, len(shards))
	var (
		shard int
		c     TimerCounts
	)
	if _, err := pgx.ForEachRow(rows, []any{&shard, &c.Pending, &c.Due}, func() error {
		out[shard] = c
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count timers of shards %v: %w", shards, err)
	}
	return out, nil
}
