package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/internal/wire"
)

// Activity is one row of activities.
// Open says whether a may still run or report: scheduled, or given up
// while its attempt in flight has not ended.
func (a *Activity) Open() bool {
	return a.Status == ActivityScheduled || a.Status == ActivityCancelRequested
}

type Activity struct {
	ExecutionID    string
	ActivityID     int
	ActivityName   string
	Status         string
	Attempt        int
	IdempotencyKey string
	Input          json.RawMessage
	Options        json.RawMessage
	ScheduledAt    time.Time
	// HeartbeatDetails and LastHeartbeatAt are the current attempt's
	// liveness; OutcomeUnknown says the previous attempt left no result.
	HeartbeatDetails json.RawMessage
	LastHeartbeatAt  *time.Time
	OutcomeUnknown   bool
	// RetryAt is when its next attempt is dispatched while it waits for a
	// retry, nil while an attempt is in flight.
	RetryAt *time.Time
	// LastFailure is why its last attempt failed, while another follows;
	// nil before one failed.
	LastFailure *wire.Failure
}

// Activity statuses.
const (
	ActivityScheduled = "Scheduled"
	ActivityCompleted = "Completed"
	ActivityFailed    = "Failed"
	// ActivityCancelRequested: the workflow gave it up
	// (request_cancel_activity) while an attempt may run: that attempt's
	// end closes it, Completed if it completed, else Cancelled.
	ActivityCancelRequested = "CancelRequested"
	// ActivityCancelled: the workflow gave it up, and no attempt runs.
	ActivityCancelled = "Cancelled"
)

// ActivityRef names one activity of one execution.
type ActivityRef struct {
	ExecutionID string
	ActivityID  int
}

// LoadActivities returns the activities named, locked for update.
func LoadActivities(ctx context.Context, tx Tx, refs []ActivityRef) (map[ActivityRef]*Activity, error) {
	return readAlone(ctx, tx, refs, (*Reads).LoadActivities)
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
			heartbeat_details, last_heartbeat_at, outcome_unknown, retry_at, last_failure
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

func queueInsertActivities(b *pgx.Batch, as []*Activity) {
	if len(as) == 0 {
		return
	}
	n := len(as)
	var (
		ids, names, statuses, keys = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		actIDs, attempts           = make([]int, n), make([]int, n)
		inputs, options            = make([]json.RawMessage, n), make([]json.RawMessage, n)
		scheduled                  = make([]time.Time, n)
		unknown                    = make([]bool, n)
		retries                    = make([]*time.Time, n)
		failures                   = make([]*wire.Failure, n)
	)
	for i, a := range as {
		ids[i], actIDs[i], names[i], statuses[i], attempts[i] = a.ExecutionID, a.ActivityID, a.ActivityName, a.Status, a.Attempt
		keys[i], inputs[i], options[i], scheduled[i], unknown[i] = a.IdempotencyKey, a.Input, a.Options, a.ScheduledAt, a.OutcomeUnknown
		retries[i], failures[i] = a.RetryAt, a.LastFailure
	}
	// An activity can be inserted closed (its first attempt ran eagerly),
	// or waiting for its attempt 2 (its eager attempt 1 failed: when and
	// why, for describe).
	b.Queue(`INSERT INTO activities (execution_id, activity_id, activity_name, status, attempt, idempotency_key, input, options, scheduled_at,
			outcome_unknown, retry_at, last_failure, closed_at)
		SELECT v.*, CASE WHEN v.status IN ('Scheduled', 'CancelRequested') THEN NULL ELSE now() END
		FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::int[], $6::text[], $7::jsonb[], $8::jsonb[], $9::timestamptz[], $10::bool[],
			$11::timestamptz[], $12::jsonb[])
			AS v (execution_id, activity_id, activity_name, status, attempt, idempotency_key, input, options, scheduled_at, outcome_unknown,
				retry_at, last_failure)`,
		ids, actIDs, names, statuses, attempts, keys, inputs, options, scheduled, unknown, retries, failures)
}

func queueUpdateActivities(b *pgx.Batch, as []*Activity) {
	as = lastOf(as, func(a *Activity) ActivityRef { return ActivityRef{a.ExecutionID, a.ActivityID} })
	if len(as) < setBasedUpdateRows {
		for _, a := range as {
			b.Queue(`UPDATE activities SET status = $3, attempt = $4, closed_at = CASE WHEN $3 IN ('Scheduled', 'CancelRequested') THEN NULL ELSE now() END,
				heartbeat_details = $5, last_heartbeat_at = $6, outcome_unknown = $7, retry_at = $8, last_failure = $9
				WHERE execution_id = $1 AND activity_id = $2`, a.ExecutionID, a.ActivityID, a.Status, a.Attempt,
				a.HeartbeatDetails, a.LastHeartbeatAt, a.OutcomeUnknown, a.RetryAt, a.LastFailure)
		}
		return
	}
	n := len(as)
	var (
		ids, statuses    = make([]string, n), make([]string, n)
		actIDs, attempts = make([]int, n), make([]int, n)
		details          = make([]json.RawMessage, n)
		heartbeats       = make([]*time.Time, n)
		unknown          = make([]bool, n)
		retries          = make([]*time.Time, n)
		failures         = make([]*wire.Failure, n)
	)
	for i, a := range as {
		ids[i], actIDs[i], statuses[i], attempts[i] = a.ExecutionID, a.ActivityID, a.Status, a.Attempt
		details[i], heartbeats[i], unknown[i], retries[i] = a.HeartbeatDetails, a.LastHeartbeatAt, a.OutcomeUnknown, a.RetryAt
		failures[i] = a.LastFailure
	}
	b.Queue(`UPDATE activities AS a SET status = v.status, attempt = v.attempt,
			closed_at = CASE WHEN v.status IN ('Scheduled', 'CancelRequested') THEN NULL ELSE now() END,
			heartbeat_details = v.heartbeat_details, last_heartbeat_at = v.last_heartbeat_at, outcome_unknown = v.outcome_unknown,
			retry_at = v.retry_at, last_failure = v.last_failure
		FROM (SELECT unnest($1::uuid[]) AS execution_id, unnest($2::int[]) AS activity_id, unnest($3::text[]) AS status,
			unnest($4::int[]) AS attempt, unnest($5::jsonb[]) AS heartbeat_details, unnest($6::timestamptz[]) AS last_heartbeat_at,
			unnest($7::bool[]) AS outcome_unknown, unnest($8::timestamptz[]) AS retry_at, unnest($9::jsonb[]) AS last_failure) AS v
		WHERE a.execution_id = v.execution_id AND a.activity_id = v.activity_id AND a.execution_id = ANY($1::uuid[])`,
		ids, actIDs, statuses, attempts, details, heartbeats, unknown, retries, failures)
}

// OpenActivities sets *out to the execution's activities that are
// scheduled and not closed, by id, at most 100: each with its attempt,
// its retry, its last failure and its heartbeat.
func (r *Reads) OpenActivities(executionID string, out *[]*Activity) {
	r.b.Queue(`
		SELECT execution_id::text, activity_id, activity_name, status, attempt, idempotency_key, input, options, scheduled_at,
			heartbeat_details, last_heartbeat_at, outcome_unknown, retry_at, last_failure
		FROM activities WHERE execution_id = $1 AND status IN ('Scheduled', 'CancelRequested') ORDER BY activity_id LIMIT 100`,
		executionID).Query(func(rows pgx.Rows) error {
		acts, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByPos[Activity])
		if err != nil {
			return fmt.Errorf("read open activities of %s: %w", executionID, err)
		}
		*out = acts
		return nil
	})
}

// PendingActivity is an activity an execution has scheduled and not
// closed: its name, and the task queue its options send it to (empty: its
// execution's).
type PendingActivity struct {
	Name      string
	TaskQueue string
}

// PendingActivities sets *out to the execution's activities that are
// scheduled and not closed, each name and task queue once, in order.
func (r *Reads) PendingActivities(executionID string, out *[]PendingActivity) {
	r.b.Queue(`SELECT DISTINCT activity_name, coalesce(options->>'task_queue', '') AS task_queue FROM activities
		WHERE execution_id = $1 AND status = 'Scheduled' ORDER BY activity_name, task_queue`,
		executionID).Query(func(rows pgx.Rows) error {
		pending, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PendingActivity])
		if err != nil {
			return fmt.Errorf("read pending activities of %s: %w", executionID, err)
		}
		*out = pending
		return nil
	})
}
