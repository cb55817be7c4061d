package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/internal/wire"
)

// ErrExecutionNotFound is returned for an execution id that does not exist.
var ErrExecutionNotFound = errors.New("execution not found")

// Execution is one row of executions.
type Execution struct {
	ExecutionID    string
	Shard          int
	WorkflowName   string
	WorkflowID     string
	TaskQueue      string
	Status         string
	Input          json.RawMessage
	Result         json.RawMessage
	Error          json.RawMessage
	LastSeq        int
	WFTID          int
	WFTOutstanding bool
	WFTDirty       bool
	IdempotencyKey *string
	// CompletionCallback is the URL the outcome is POSTed to on close.
	CompletionCallback *string
	CreatedAt          time.Time
	UpdatedAt          time.Time
	ClosedAt           *time.Time
}

const executionColumns = `execution_id::text, shard, workflow_name, workflow_id, task_queue, status, input, result, error,
	last_seq, wft_id, wft_outstanding, wft_dirty, idempotency_key, completion_callback, created_at, updated_at, closed_at`

func scanExecution(row pgx.Row) (*Execution, error) {
	var e Execution
	err := row.Scan(&e.ExecutionID, &e.Shard, &e.WorkflowName, &e.WorkflowID, &e.TaskQueue, &e.Status, &e.Input, &e.Result, &e.Error,
		&e.LastSeq, &e.WFTID, &e.WFTOutstanding, &e.WFTDirty, &e.IdempotencyKey, &e.CompletionCallback, &e.CreatedAt, &e.UpdatedAt, &e.ClosedAt)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// Activity is one row of activities.
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
}

// Activity statuses.
const (
	ActivityScheduled = "Scheduled"
	ActivityCompleted = "Completed"
	ActivityFailed    = "Failed"
)

// ActivityRef names one activity of one execution.
type ActivityRef struct {
	ExecutionID string
	ActivityID  int
}

// ClaimRef names a start idempotency claim.
type ClaimRef struct {
	WorkflowName   string
	IdempotencyKey string
}

// EventRow is a history event of one execution, to be appended.
type EventRow struct {
	ExecutionID string
	wire.Event
}

// OutboxMsg is a message to publish once its transaction commits.
type OutboxMsg struct {
	ID      int64
	Shard   int
	Subject string
	MsgID   string
	Payload []byte
}

// Claim is a start idempotency claim.
type Claim struct {
	ExecutionID string
	Fingerprint string
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// NewClaim is a claim a start wants to take.
type NewClaim struct {
	ClaimRef
	ExecutionID string
	Fingerprint string
}

const claimColumns = `workflow_name, idempotency_key, execution_id::text, fingerprint, created_at, expires_at`

// ClaimStartKeys takes each claim for the execution given with it. A live
// claim held by another execution is left alone; an expired one is taken
// over. It returns, for every key, the claim as it now stands: the new
// one, or the live holder's.
func ClaimStartKeys(ctx context.Context, tx Tx, claims []NewClaim, window time.Duration) (map[ClaimRef]Claim, error) {
	out := make(map[ClaimRef]Claim, len(claims))
	var r Reads
	r.ClaimStartKeys(claims, window, out)
	if err := r.Send(ctx, tx); err != nil {
		return nil, err
	}
	return out, ClaimsMissed(ctx, tx, claims, out)
}

// ClaimsMissed reads the claims of keys Reads.ClaimStartKeys did not
// take: keys held by a live claim of another execution.
func ClaimsMissed(ctx context.Context, tx Tx, claims []NewClaim, out map[ClaimRef]Claim) error {
	if len(out) == len(claims) {
		return nil
	}
	names := make([]string, len(claims))
	keys := make([]string, len(claims))
	for i, c := range claims {
		names[i], keys[i] = c.WorkflowName, c.IdempotencyKey
	}
	rows, err := tx.Query(ctx, `
		SELECT `+claimColumns+` FROM start_claims
		WHERE (workflow_name, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, names, keys)
	if err != nil {
		return fmt.Errorf("read start claims: %w", err)
	}
	if err := collectClaims(rows, out); err != nil {
		return fmt.Errorf("read start claims: %w", err)
	}
	return nil
}

func collectClaims(rows pgx.Rows, out map[ClaimRef]Claim) error {
	var r ClaimRef
	var c Claim
	_, err := pgx.ForEachRow(rows, []any{&r.WorkflowName, &r.IdempotencyKey, &c.ExecutionID, &c.Fingerprint, &c.CreatedAt, &c.ExpiresAt}, func() error {
		if _, ok := out[r]; !ok {
			out[r] = c
		}
		return nil
	})
	return err
}

// LiveClaim reads the live claim of a key, if any, with the execution it
// points to.
func LiveClaim(ctx context.Context, db DBTX, ref ClaimRef) (*Claim, *Execution, error) {
	var c Claim
	var r ClaimRef
	err := db.QueryRow(ctx, `SELECT `+claimColumns+` FROM start_claims
		WHERE workflow_name = $1 AND idempotency_key = $2 AND expires_at > now()`, ref.WorkflowName, ref.IdempotencyKey).
		Scan(&r.WorkflowName, &r.IdempotencyKey, &c.ExecutionID, &c.Fingerprint, &c.CreatedAt, &c.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read claim %q: %w", ref.IdempotencyKey, err)
	}
	e, err := GetExecution(ctx, db, c.ExecutionID)
	if err != nil {
		return nil, nil, err
	}
	return &c, e, nil
}

// SweepExpiredClaims deletes up to limit expired claims and returns how
// many it deleted. Correctness never depends on it: expired claims are
// ignored and taken over wherever they are read.
func SweepExpiredClaims(ctx context.Context, db DBTX, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM start_claims WHERE ctid IN (
			SELECT ctid FROM start_claims WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`, limit)
	if err != nil {
		return 0, fmt.Errorf("sweep expired claims: %w", err)
	}
	return tag.RowsAffected(), nil
}

// WorkflowRef names executions by workflow id.
type WorkflowRef struct {
	WorkflowName string
	WorkflowID   string
}

// LatestByWorkflowID returns, for each (workflow_name, workflow_id), its most
// recent execution, locked for update.
func LatestByWorkflowID(ctx context.Context, tx Tx, refs []WorkflowRef) (map[WorkflowRef]*Execution, error) {
	out := make(map[WorkflowRef]*Execution, len(refs))
	var r Reads
	r.LatestByWorkflowID(refs, out)
	return out, r.Send(ctx, tx)
}

// LoadExecutions returns the executions with the given ids, locked for
// update. Unknown ids are absent from the map.
func LoadExecutions(ctx context.Context, tx Tx, ids []string) (map[string]*Execution, error) {
	out := make(map[string]*Execution, len(ids))
	var r Reads
	r.LoadExecutions(ids, out)
	return out, r.Send(ctx, tx)
}

// LoadActivities returns the activities named, locked for update.
func LoadActivities(ctx context.Context, tx Tx, refs []ActivityRef) (map[ActivityRef]*Activity, error) {
	out := make(map[ActivityRef]*Activity, len(refs))
	var r Reads
	r.LoadActivities(refs, out)
	return out, r.Send(ctx, tx)
}

// LoadHistories returns the stored history of each execution, in order.
func LoadHistories(ctx context.Context, tx Tx, ids []string) (map[string][]wire.Event, error) {
	out := make(map[string][]wire.Event, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `
		SELECT execution_id::text, seq, type, at, attrs FROM history_events
		WHERE execution_id = ANY($1::uuid[]) ORDER BY execution_id, seq`, ids)
	if err != nil {
		return nil, fmt.Errorf("load histories: %w", err)
	}
	var id string
	var ev wire.Event
	_, err = pgx.ForEachRow(rows, []any{&id, &ev.Seq, &ev.Type, &ev.At, &ev.Attrs}, func() error {
		ev.Attrs = append(json.RawMessage(nil), ev.Attrs...)
		out[id] = append(out[id], ev)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load histories: %w", err)
	}
	return out, nil
}

// Writes is everything one apply transaction writes, sent to PostgreSQL as
// one batch (one round trip).
type Writes struct {
	Shard             int
	AppliedSeq        int64
	NewExecutions     []*Execution
	UpdatedExecutions []*Execution
	Events            []EventRow
	NewActivities     []*Activity
	UpdatedActivities []*Activity
	// RepointClaims moves claims taken for a fresh execution to the
	// existing execution a start resolved to instead.
	RepointClaims map[ClaimRef]string
	// DeleteClaims rolls back claims taken by starts that were refused.
	DeleteClaims []ClaimRef
	// NewTimers are durable timers to set; FiredTimers those to delete.
	NewTimers   []Timer
	FiredTimers []int64
	// ActivityDone clears the timers of activities that finished;
	// ExecutionsClosed clears every timer of executions that closed.
	ActivityDone     []ActivityRef
	ExecutionsClosed []string
	// WorkflowTasksDone clears the deadlines of workflow tasks that
	// completed.
	WorkflowTasksDone []WorkflowTaskRef
	// Callbacks are completion callbacks to deliver.
	Callbacks []CallbackDelivery
	// SignalClaims record keyed signals delivered.
	SignalClaims []SignalRef
	// Outcomes are the outcomes of the commands applied, stored by
	// command id.
	Outcomes []OutcomeRow
	// DeadCommands are commands set aside, unapplied (their outcomes are
	// in Outcomes).
	DeadCommands []DeadCommand
	// Outbox rows get their ids filled in.
	Outbox []*OutboxMsg
	// PublishedOutbox are rows of earlier batches that JetStream has
	// acknowledged: deleted in this transaction rather than one of their
	// own.
	PublishedOutbox []int64
	// Preconditions, when set, are checked before anything is written:
	// the batch was applied without reading (see Preconditions).
	Preconditions *Preconditions
}

// Write sends everything w holds to PostgreSQL in tx as one pgx batch: one
// round trip, and one set-based statement per kind of row (executions
// inserted, events, outbox rows, ...), however many rows the batch has;
// only a few updated executions or activities go one UPDATE per row (see
// setBasedUpdateRows). The statements run in a fixed order; each kind is
// skipped when it has no rows.
func Write(ctx context.Context, tx Tx, w *Writes) error {
	b := &pgx.Batch{}
	queuePreconditions(b, w.Preconditions)
	queueInsertExecutions(b, w.NewExecutions)
	queueUpdateExecutions(b, w.UpdatedExecutions)
	queueInsertEvents(b, w.Events)
	queueInsertActivities(b, w.NewActivities)
	queueUpdateActivities(b, w.UpdatedActivities)
	queueRepointClaims(b, w.RepointClaims)
	queueInsertTimers(b, w.Shard, w.NewTimers)
	queueDeleteTimers(b, w.ActivityDone, w.ExecutionsClosed, w.WorkflowTasksDone)
	if len(w.FiredTimers) > 0 {
		b.Queue(`DELETE FROM timers WHERE timer_id = ANY($1)`, w.FiredTimers)
	}
	queueInsertSignalClaims(b, w.SignalClaims)
	queueInsertCallbacks(b, w.Shard, w.Callbacks)
	queueDeleteClaims(b, w.DeleteClaims)
	queueUpsertOutcomes(b, w.Outcomes)
	queueInsertDeadCommands(b, w.Shard, w.DeadCommands)
	queueInsertOutbox(b, w.Outbox)
	if len(w.PublishedOutbox) > 0 {
		b.Queue(`DELETE FROM outbox WHERE id = ANY($1)`, w.PublishedOutbox)
	}
	b.Queue(`UPDATE shard_offsets SET applied_seq = $2 WHERE shard = $1`, w.Shard, w.AppliedSeq)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write batch of shard %d: %w", w.Shard, wrapPrecondition(err))
	}
	return nil
}

// The queue helpers below each add one statement for all rows of a kind,
// passing every column as an array that unnest turns back into rows. A nil
// pointer or nil json.RawMessage in a slice is a NULL element, as it is a
// NULL argument of a single-row statement. The arrays are unnested side by
// side in a SELECT list, which zips them row by row (they have one length);
// unnest(a, b, ...) in FROM would do the same but materialises each array
// first, which costs more than the rows themselves in small batches.
//
// The UPDATEs and DELETEs that join the arrays to a table also match its key
// with = ANY of the key array. In the plan it caches for a prepared
// statement, PostgreSQL takes an array for ten elements, and for ten rows to
// join it prefers reading a table of up to a few thousand rows whole; with
// the ANY it fetches just those keys through the index.

// setBasedUpdateRows is how many executions (or activities) a batch must
// update before their UPDATE goes set-based; below it, each row gets an
// UPDATE by primary key. PostgreSQL keeps one cached plan for those, but
// plans the set-based UPDATE anew on nearly every execution (its cached
// plan, costed for ten array elements, loses to a custom plan for fewer),
// and that planning costs more than a few single-row UPDATEs. Measured on
// PostgreSQL 15, backend CPU per batch: even at about 8 rows, half at 32.
const setBasedUpdateRows = 8

func queueInsertExecutions(b *pgx.Batch, es []*Execution) {
	if len(es) == 0 {
		return
	}
	n := len(es)
	var (
		ids, names, wfIDs, queues, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		shards, lastSeqs, wftIDs            = make([]int, n), make([]int, n), make([]int, n)
		inputs, results, errs               = make([]json.RawMessage, n), make([]json.RawMessage, n), make([]json.RawMessage, n)
		outstanding, dirty                  = make([]bool, n), make([]bool, n)
		keys, callbacks                     = make([]*string, n), make([]*string, n)
		created, updated                    = make([]time.Time, n), make([]time.Time, n)
		closed                              = make([]*time.Time, n)
	)
	for i, e := range es {
		ids[i], shards[i], names[i], wfIDs[i], queues[i], statuses[i] = e.ExecutionID, e.Shard, e.WorkflowName, e.WorkflowID, e.TaskQueue, e.Status
		inputs[i], results[i], errs[i] = e.Input, e.Result, e.Error
		lastSeqs[i], wftIDs[i], outstanding[i], dirty[i] = e.LastSeq, e.WFTID, e.WFTOutstanding, e.WFTDirty
		keys[i], callbacks[i], created[i], updated[i], closed[i] = e.IdempotencyKey, e.CompletionCallback, e.CreatedAt, e.UpdatedAt, e.ClosedAt
	}
	b.Queue(`INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status, input, result, error,
			last_seq, wft_id, wft_outstanding, wft_dirty, idempotency_key, completion_callback, created_at, updated_at, closed_at)
		SELECT unnest($1::uuid[]), unnest($2::int[]), unnest($3::text[]), unnest($4::text[]), unnest($5::text[]), unnest($6::text[]),
			unnest($7::jsonb[]), unnest($8::jsonb[]), unnest($9::jsonb[]), unnest($10::int[]), unnest($11::int[]), unnest($12::bool[]),
			unnest($13::bool[]), unnest($14::text[]), unnest($15::text[]), unnest($16::timestamptz[]), unnest($17::timestamptz[]),
			unnest($18::timestamptz[])`,
		ids, shards, names, wfIDs, queues, statuses, inputs, results, errs,
		lastSeqs, wftIDs, outstanding, dirty, keys, callbacks, created, updated, closed)
}

func queueUpdateExecutions(b *pgx.Batch, es []*Execution) {
	es = lastOf(es, func(e *Execution) string { return e.ExecutionID })
	if len(es) < setBasedUpdateRows {
		for _, e := range es {
			b.Queue(`UPDATE executions SET status = $2, result = $3, error = $4, last_seq = $5, wft_id = $6,
				wft_outstanding = $7, wft_dirty = $8, updated_at = $9, closed_at = $10 WHERE execution_id = $1`,
				e.ExecutionID, e.Status, e.Result, e.Error, e.LastSeq, e.WFTID, e.WFTOutstanding, e.WFTDirty, e.UpdatedAt, e.ClosedAt)
		}
		return
	}
	n := len(es)
	var (
		ids, statuses      = make([]string, n), make([]string, n)
		results, errs      = make([]json.RawMessage, n), make([]json.RawMessage, n)
		lastSeqs, wftIDs   = make([]int, n), make([]int, n)
		outstanding, dirty = make([]bool, n), make([]bool, n)
		updated            = make([]time.Time, n)
		closed             = make([]*time.Time, n)
	)
	for i, e := range es {
		ids[i], statuses[i], results[i], errs[i] = e.ExecutionID, e.Status, e.Result, e.Error
		lastSeqs[i], wftIDs[i], outstanding[i], dirty[i], updated[i], closed[i] = e.LastSeq, e.WFTID, e.WFTOutstanding, e.WFTDirty, e.UpdatedAt, e.ClosedAt
	}
	b.Queue(`UPDATE executions AS e SET status = v.status, result = v.result, error = v.error, last_seq = v.last_seq, wft_id = v.wft_id,
			wft_outstanding = v.wft_outstanding, wft_dirty = v.wft_dirty, updated_at = v.updated_at, closed_at = v.closed_at
		FROM (SELECT unnest($1::uuid[]) AS execution_id, unnest($2::text[]) AS status, unnest($3::jsonb[]) AS result,
			unnest($4::jsonb[]) AS error, unnest($5::int[]) AS last_seq, unnest($6::int[]) AS wft_id, unnest($7::bool[]) AS wft_outstanding,
			unnest($8::bool[]) AS wft_dirty, unnest($9::timestamptz[]) AS updated_at, unnest($10::timestamptz[]) AS closed_at) AS v
		WHERE e.execution_id = v.execution_id AND e.execution_id = ANY($1::uuid[])`,
		ids, statuses, results, errs, lastSeqs, wftIDs, outstanding, dirty, updated, closed)
}

func queueInsertEvents(b *pgx.Batch, evs []EventRow) {
	if len(evs) == 0 {
		return
	}
	n := len(evs)
	ids, seqs, types, ats, attrs := make([]string, n), make([]int, n), make([]string, n), make([]time.Time, n), make([]json.RawMessage, n)
	for i, ev := range evs {
		ids[i], seqs[i], types[i], ats[i], attrs[i] = ev.ExecutionID, ev.Seq, ev.Type, ev.At, ev.Attrs
	}
	b.Queue(`INSERT INTO history_events (execution_id, seq, type, at, attrs)
		SELECT unnest($1::uuid[]), unnest($2::int[]), unnest($3::text[]), unnest($4::timestamptz[]), unnest($5::jsonb[])`, ids, seqs, types, ats, attrs)
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
	)
	for i, a := range as {
		ids[i], actIDs[i], names[i], statuses[i], attempts[i] = a.ExecutionID, a.ActivityID, a.ActivityName, a.Status, a.Attempt
		keys[i], inputs[i], options[i], scheduled[i], unknown[i] = a.IdempotencyKey, a.Input, a.Options, a.ScheduledAt, a.OutcomeUnknown
	}
	// An activity can be inserted closed: its first attempt ran eagerly.
	b.Queue(`INSERT INTO activities (execution_id, activity_id, activity_name, status, attempt, idempotency_key, input, options, scheduled_at,
			outcome_unknown, closed_at)
		SELECT v.*, CASE WHEN v.status = 'Scheduled' THEN NULL ELSE now() END
		FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::int[], $6::text[], $7::jsonb[], $8::jsonb[], $9::timestamptz[], $10::bool[])
			AS v (execution_id, activity_id, activity_name, status, attempt, idempotency_key, input, options, scheduled_at, outcome_unknown)`,
		ids, actIDs, names, statuses, attempts, keys, inputs, options, scheduled, unknown)
}

func queueUpdateActivities(b *pgx.Batch, as []*Activity) {
	as = lastOf(as, func(a *Activity) ActivityRef { return ActivityRef{a.ExecutionID, a.ActivityID} })
	if len(as) < setBasedUpdateRows {
		for _, a := range as {
			b.Queue(`UPDATE activities SET status = $3, attempt = $4, closed_at = CASE WHEN $3 = 'Scheduled' THEN NULL ELSE now() END,
				heartbeat_details = $5, last_heartbeat_at = $6, outcome_unknown = $7
				WHERE execution_id = $1 AND activity_id = $2`, a.ExecutionID, a.ActivityID, a.Status, a.Attempt,
				a.HeartbeatDetails, a.LastHeartbeatAt, a.OutcomeUnknown)
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
	)
	for i, a := range as {
		ids[i], actIDs[i], statuses[i], attempts[i] = a.ExecutionID, a.ActivityID, a.Status, a.Attempt
		details[i], heartbeats[i], unknown[i] = a.HeartbeatDetails, a.LastHeartbeatAt, a.OutcomeUnknown
	}
	b.Queue(`UPDATE activities AS a SET status = v.status, attempt = v.attempt,
			closed_at = CASE WHEN v.status = 'Scheduled' THEN NULL ELSE now() END,
			heartbeat_details = v.heartbeat_details, last_heartbeat_at = v.last_heartbeat_at, outcome_unknown = v.outcome_unknown
		FROM (SELECT unnest($1::uuid[]) AS execution_id, unnest($2::int[]) AS activity_id, unnest($3::text[]) AS status,
			unnest($4::int[]) AS attempt, unnest($5::jsonb[]) AS heartbeat_details, unnest($6::timestamptz[]) AS last_heartbeat_at,
			unnest($7::bool[]) AS outcome_unknown) AS v
		WHERE a.execution_id = v.execution_id AND a.activity_id = v.activity_id AND a.execution_id = ANY($1::uuid[])`,
		ids, actIDs, statuses, attempts, details, heartbeats, unknown)
}

func queueRepointClaims(b *pgx.Batch, repoint map[ClaimRef]string) {
	if len(repoint) == 0 {
		return
	}
	names, keys, ids := make([]string, 0, len(repoint)), make([]string, 0, len(repoint)), make([]string, 0, len(repoint))
	for ref, id := range repoint {
		names, keys, ids = append(names, ref.WorkflowName), append(keys, ref.IdempotencyKey), append(ids, id)
	}
	b.Queue(`UPDATE start_claims AS c SET execution_id = v.execution_id
		FROM (SELECT unnest($1::text[]) AS workflow_name, unnest($2::text[]) AS idempotency_key, unnest($3::uuid[]) AS execution_id) AS v
		WHERE c.workflow_name = v.workflow_name AND c.idempotency_key = v.idempotency_key`, names, keys, ids)
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
func queueDeleteTimers(b *pgx.Batch, done []ActivityRef, closed []string, tasks []WorkflowTaskRef) {
	if len(done)+len(closed)+len(tasks) == 0 {
		return
	}
	ids := make([]string, 0, len(done)+len(closed)+len(tasks))
	for _, ref := range done {
		ids = append(ids, ref.ExecutionID)
	}
	for _, ref := range tasks {
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
	// One table, no join: PostgreSQL plans it on every call
	// (PoolConfig), and a join with the unnested arrays cost more to plan
	// than to run.
	b.Queue(`DELETE FROM timers AS t
		WHERE t.execution_id = ANY($1::uuid[])
			AND (t.execution_id = ANY($2::uuid[])
				OR (t.kind IN ('activity_timeout', 'activity_retry', 'activity_heartbeat')
					AND t.execution_id::text || '/' || (t.attrs->>'activity_id') = ANY($3::text[]))
				OR (t.kind = 'workflow_task'
					AND t.execution_id::text || '/' || (t.attrs->>'task_id') = ANY($4::text[])))`,
		ids, closed, activities, wfts)
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

func queueDeleteClaims(b *pgx.Batch, refs []ClaimRef) {
	if len(refs) == 0 {
		return
	}
	names, keys := make([]string, len(refs)), make([]string, len(refs))
	for i, ref := range refs {
		names[i], keys[i] = ref.WorkflowName, ref.IdempotencyKey
	}
	b.Queue(`DELETE FROM start_claims AS c USING (SELECT unnest($1::text[]) AS workflow_name, unnest($2::text[]) AS idempotency_key) AS d
		WHERE c.workflow_name = d.workflow_name AND c.idempotency_key = d.idempotency_key`, names, keys)
}

// queueInsertOutbox inserts the messages and fills in their ids. Each row
// draws its id from the outbox sequence beside its place in the slice, and
// the statement returns the pairs, so no id depends on the order in which
// rows come back. (Drawn row by row, the ids ascend along the slice, the
// order PendingOutbox reads them in.)
func queueInsertOutbox(b *pgx.Batch, msgs []*OutboxMsg) {
	if len(msgs) == 0 {
		return
	}
	n := len(msgs)
	shards, subjects, msgIDs, payloads := make([]int, n), make([]string, n), make([]string, n), make([][]byte, n)
	for i, m := range msgs {
		shards[i], subjects[i], msgIDs[i], payloads[i] = m.Shard, m.Subject, m.MsgID, m.Payload
	}
	b.Queue(`WITH m AS (
			SELECT nextval('outbox_id_seq') AS id, generate_subscripts($1::int[], 1) AS ord,
				unnest($1::int[]) AS shard, unnest($2::text[]) AS subject, unnest($3::text[]) AS msg_id, unnest($4::bytea[]) AS payload
		), inserted AS (
			INSERT INTO outbox (id, shard, subject, msg_id, payload) SELECT id, shard, subject, msg_id, payload FROM m
		)
		SELECT ord, id FROM m`, shards, subjects, msgIDs, payloads).Query(func(rows pgx.Rows) error {
		filled := 0
		var ord int
		var id int64
		_, err := pgx.ForEachRow(rows, []any{&ord, &id}, func() error {
			if ord < 1 || ord > n {
				return fmt.Errorf("id for row %d of %d", ord, n)
			}
			msgs[ord-1].ID = id
			filled++
			return nil
		})
		if err != nil {
			return fmt.Errorf("insert outbox: %w", err)
		}
		if filled != n {
			return fmt.Errorf("insert outbox: %d ids for %d rows", filled, n)
		}
		return nil
	})
}

// lastOf drops rows whose key a later row repeats, keeping the first one's
// place and the last one's value: what one UPDATE per row, in order, would
// leave.
func lastOf[R any, K comparable](rows []R, key func(R) K) []R {
	at := make(map[K]int, len(rows))
	out := make([]R, 0, len(rows))
	for _, r := range rows {
		k := key(r)
		if i, ok := at[k]; ok {
			out[i] = r
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	return out
}

// PendingOutbox returns the shard's unpublished outbox rows, oldest first.
func PendingOutbox(ctx context.Context, db DBTX, shard int, limit int) ([]*OutboxMsg, error) {
	rows, err := db.Query(ctx, `SELECT id, shard, subject, msg_id, payload FROM outbox WHERE shard = $1 ORDER BY id LIMIT $2`, shard, limit)
	if err != nil {
		return nil, fmt.Errorf("read outbox of shard %d: %w", shard, err)
	}
	msgs, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByPos[OutboxMsg])
	if err != nil {
		return nil, fmt.Errorf("read outbox of shard %d: %w", shard, err)
	}
	return msgs, nil
}

// DeleteOutbox removes published outbox rows.
func DeleteOutbox(ctx context.Context, db DBTX, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("delete %d outbox rows: %w", len(ids), err)
	}
	return nil
}

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
)

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
	rows, err := tx.Query(ctx, `
		SELECT timer_id, execution_id::text, kind, fire_at, attrs FROM timers
		WHERE shard = $1 AND fire_at <= $2 AND ($4::bigint[] IS NULL OR timer_id = ANY($4))
		ORDER BY fire_at LIMIT $3 FOR UPDATE SKIP LOCKED`, shard, now, limit, ids)
	if err != nil {
		return nil, fmt.Errorf("due timers of shard %d: %w", shard, err)
	}
	timers, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Timer])
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

// NextTimer is when the shard's earliest timer fires; ok is false when it
// has none.
func NextTimer(ctx context.Context, db DBTX, shard int) (at time.Time, ok bool, err error) {
	var next *time.Time
	if err := db.QueryRow(ctx, `SELECT min(fire_at) FROM timers WHERE shard = $1`, shard).Scan(&next); err != nil {
		return at, false, fmt.Errorf("next timer of shard %d: %w", shard, err)
	}
	if next == nil {
		return at, false, nil
	}
	return *next, true, nil
}

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
	rows, err := db.Query(ctx, `
		UPDATE callback_deliveries SET next_attempt_at = now() + $2::interval
		WHERE execution_id IN (
			SELECT execution_id FROM callback_deliveries
			WHERE shard = ANY($1) AND delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
			ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING execution_id::text, url, payload, attempts`, s32, lease, limit)
	if err != nil {
		return nil, fmt.Errorf("lease due callbacks: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[CallbackDelivery])
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

// TimerWorkflow fires a timer the workflow started (Sleep, NewTimer).
const TimerWorkflow = "workflow"

// SignalRef names a keyed signal delivery.
type SignalRef struct {
	ExecutionID    string
	IdempotencyKey string
}

// LoadSignalClaims returns which of the keyed signals were delivered.
func LoadSignalClaims(ctx context.Context, tx Tx, refs []SignalRef) (map[SignalRef]bool, error) {
	out := make(map[SignalRef]bool, len(refs))
	var r Reads
	r.LoadSignalClaims(refs, out)
	return out, r.Send(ctx, tx)
}
