package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/schedspec"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Schedule is a schedules row (docs/schedules.md): its definition, and
// where its firing stands.
type Schedule struct {
	ScheduleID string              `json:"schedule_id"`
	Shard      int                 `json:"shard"`
	Definition api.ScheduleRequest `json:"definition"`
	Source     string              `json:"source"`
	Paused     bool                `json:"paused"`
	Note       string              `json:"note"`
	// FiredThrough: every nominal time of the spec up to it is decided.
	FiredThrough time.Time `json:"fired_through"`
	// NextDue is when the shard next fires it; nil: its spec has no
	// more nominal times.
	NextDue   *time.Time     `json:"next_due"`
	Running   []RunningFire  `json:"running"`
	Buffered  []BufferedFire `json:"buffered"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
	// Unreadable says its row could not be decoded (LoadSchedules): it
	// can be replaced or deleted, nothing else.
	Unreadable bool `json:"-"`
}

// RunningFire is a fire whose execution has not closed, or whose start
// is not known yet (ExecutionID empty).
type RunningFire struct {
	Nominal     time.Time `json:"nominal"`
	Trigger     string    `json:"trigger"`
	WorkflowID  string    `json:"workflow_id,omitempty"`
	ExecutionID string    `json:"execution_id,omitempty"`
	// Outcome is the ledger's (started or deduplicated) once its start
	// is known.
	Outcome string `json:"outcome,omitempty"`
	// Stopping says a cancel_other or terminate_other fire asked it to
	// stop, StopWith which.
	Stopping bool   `json:"stopping,omitempty"`
	StopWith string `json:"stop_with,omitempty"`
	// SentAt is when its start was sent.
	SentAt time.Time `json:"sent_at,omitzero"`
}

// BufferedFire is a fire waiting for the running ones to close.
type BufferedFire struct {
	Nominal time.Time `json:"nominal"`
	Trigger string    `json:"trigger"`
	// Overlap is the policy it came under (a backfill's may be its own).
	Overlap string `json:"overlap,omitempty"`
}

// ScheduleFire is one row of a schedule's ledger of fires.
type ScheduleFire struct {
	ScheduleID      string
	Nominal         time.Time
	Trigger         string
	Outcome         string
	IdempotencyKey  string
	WorkflowID      string
	ExecutionID     string
	ExecutionStatus string
	Error           string
	Message         string
	RecordedAt      time.Time
}

// FireRef names a ledger row.
type FireRef struct {
	ScheduleID string
	Nominal    time.Time
	Trigger    string
}

// Ref is the row's key.
func (f *ScheduleFire) Ref() FireRef {
	return FireRef{ScheduleID: f.ScheduleID, Nominal: f.Nominal.UTC(), Trigger: f.Trigger}
}

// FireRange is the nominal times From to To (both included) of a
// schedule's ledger.
type FireRange struct {
	ScheduleID string
	From, To   time.Time
}

// ScheduleWrites are what an apply transaction changes of schedules.
type ScheduleWrites struct {
	// Put are schedules created or changed, written whole; Deleted those
	// deleted, with their ledgers.
	Put     []*Schedule
	Deleted []string
	// Fires are ledger rows, new or changed.
	Fires []*ScheduleFire
	// Counted are the outcomes the batch decided, one per fire, for the
	// scheduler's metrics once it commits: nothing is written for them.
	Counted []string
	// Prune deletes the ledger rows of schedules older than their
	// times.
	Prune []FirePrune
	// SetAside are schedules whose rows cannot be read: they are due no
	// more (next_due NULL), left for an operator.
	SetAside []string
}

// FirePrune is a schedule's ledger rows to delete: those of nominal
// times before Before.
type FirePrune struct {
	ScheduleID string
	Before     time.Time
}

const scheduleColumns = `schedule_id, shard, definition, source, paused, note, fired_through, next_due, running, buffered, created_at, updated_at`

func decodeSchedule(raw []byte) (*Schedule, error) {
	sc := &Schedule{}
	if err := json.Unmarshal(raw, sc); err != nil {
		return nil, fmt.Errorf("decode schedule: %w", err)
	}
	return sc, nil
}

// LoadSchedules reads into out the schedules ids names that exist,
// locked for update.
func (r *Reads) LoadSchedules(ids []string, out map[string]*Schedule) {
	if len(ids) == 0 {
		return
	}
	r.b.Queue(`SELECT schedule_id, to_json(s) FROM schedules s WHERE schedule_id = ANY($1) FOR UPDATE`, ids).Query(func(rows pgx.Rows) error {
		var (
			id  string
			raw []byte
		)
		_, err := pgx.ForEachRow(rows, []any{&id, &raw}, func() error {
			sc, err := decodeSchedule(raw)
			if err != nil {
				// Replaced or deleted, it goes; it stops nothing else.
				sc = &Schedule{ScheduleID: id, Unreadable: true}
			}
			out[id] = sc
			return nil
		})
		if err != nil {
			return fmt.Errorf("load schedules: %w", err)
		}
		return nil
	})
}

// LoadFires reads into out the ledger rows of the ranges that name an
// execution.
func (r *Reads) LoadFires(ranges []FireRange, out map[FireRef]*ScheduleFire) {
	if len(ranges) == 0 {
		return
	}
	n := len(ranges)
	ids, froms, tos := make([]string, n), make([]time.Time, n), make([]time.Time, n)
	for i, fr := range ranges {
		ids[i], froms[i], tos[i] = fr.ScheduleID, fr.From, fr.To
	}
	r.b.Queue(`SELECT `+fireColumns+` FROM schedule_fires f JOIN unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS q(id, lo, hi)
		ON f.schedule_id = q.id AND f.nominal_time BETWEEN q.lo AND q.hi WHERE f.execution_id IS NOT NULL`, ids, froms, tos).Query(func(rows pgx.Rows) error {
		_, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
			f, err := scanFire(row)
			if err == nil {
				out[f.Ref()] = f
			}
			return struct{}{}, err
		})
		if err != nil {
			return fmt.Errorf("load schedule fires: %w", err)
		}
		return nil
	})
}

const fireColumns = `f.schedule_id, f.nominal_time, f.trigger, f.outcome, coalesce(f.idempotency_key, ''), coalesce(f.workflow_id, ''),
	coalesce(f.execution_id::text, ''), coalesce(f.execution_status, ''), coalesce(f.error, ''), coalesce(f.message, ''), f.recorded_at`

func scanFire(row pgx.CollectableRow) (*ScheduleFire, error) {
	f := &ScheduleFire{}
	err := row.Scan(&f.ScheduleID, &f.Nominal, &f.Trigger, &f.Outcome, &f.IdempotencyKey, &f.WorkflowID, &f.ExecutionID, &f.ExecutionStatus,
		&f.Error, &f.Message, &f.RecordedAt)
	f.Nominal, f.RecordedAt = f.Nominal.UTC(), f.RecordedAt.UTC()
	return f, err
}

func queueScheduleWrites(b *pgx.Batch, w *ScheduleWrites) {
	if len(w.SetAside) > 0 {
		b.Queue(`UPDATE schedules SET next_due = NULL WHERE schedule_id = ANY($1)`, w.SetAside)
	}
	if n := len(w.Prune); n > 0 {
		ids, befores := make([]string, n), make([]time.Time, n)
		for i, p := range w.Prune {
			ids[i], befores[i] = p.ScheduleID, p.Before
		}
		b.Queue(`DELETE FROM schedule_fires f USING unnest($1::text[], $2::timestamptz[]) AS p(id, before)
			WHERE f.schedule_id = p.id AND f.nominal_time < p.before`, ids, befores)
	}
	if len(w.Deleted) > 0 {
		b.Queue(`DELETE FROM schedules WHERE schedule_id = ANY($1)`, w.Deleted)
		b.Queue(`DELETE FROM schedule_fires WHERE schedule_id = ANY($1)`, w.Deleted)
	}
	if len(w.Put) > 0 {
		put := lastOf(w.Put, func(s *Schedule) string { return s.ScheduleID })
		rows := make([]string, len(put))
		for i, sc := range put {
			// The columns are NOT NULL: an empty list is [].
			if sc.Running == nil {
				sc.Running = []RunningFire{}
			}
			if sc.Buffered == nil {
				sc.Buffered = []BufferedFire{}
			}
			raw, _ := json.Marshal(sc)
			rows[i] = string(raw)
		}
		b.Queue(`INSERT INTO schedules (`+scheduleColumns+`)
			SELECT `+scheduleColumns+` FROM jsonb_populate_recordset(NULL::schedules, $1::jsonb)
			ON CONFLICT (schedule_id) DO UPDATE SET shard = excluded.shard, definition = excluded.definition, source = excluded.source,
				paused = excluded.paused, note = excluded.note, fired_through = excluded.fired_through, next_due = excluded.next_due,
				running = excluded.running, buffered = excluded.buffered, updated_at = excluded.updated_at`, "["+joinRows(rows)+"]")
	}
	if len(w.Fires) > 0 {
		fires := lastOf(w.Fires, func(f *ScheduleFire) FireRef { return f.Ref() })
		n := len(fires)
		ids, nominals, triggers, outcomes := make([]string, n), make([]time.Time, n), make([]string, n), make([]string, n)
		keys, wfids, execs, statuses, errs, msgs := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		recorded := make([]time.Time, n)
		for i, f := range fires {
			ids[i], nominals[i], triggers[i], outcomes[i], recorded[i] = f.ScheduleID, f.Nominal, f.Trigger, f.Outcome, f.RecordedAt
			keys[i], wfids[i], execs[i], statuses[i], errs[i], msgs[i] = nonEmpty(f.IdempotencyKey), nonEmpty(f.WorkflowID), nonEmpty(f.ExecutionID),
				nonEmpty(f.ExecutionStatus), nonEmpty(f.Error), nonEmpty(f.Message)
		}
		b.Queue(`INSERT INTO schedule_fires (schedule_id, nominal_time, trigger, outcome, idempotency_key, workflow_id, execution_id, execution_status,
				error, message, recorded_at)
			SELECT unnest($1::text[]), unnest($2::timestamptz[]), unnest($3::text[]), unnest($4::text[]), unnest($5::text[]), unnest($6::text[]),
				unnest($7::uuid[]), unnest($8::text[]), unnest($9::text[]), unnest($10::text[]), unnest($11::timestamptz[])
			ON CONFLICT (schedule_id, nominal_time, trigger) DO UPDATE SET outcome = excluded.outcome, idempotency_key = excluded.idempotency_key,
				workflow_id = excluded.workflow_id, execution_id = excluded.execution_id, execution_status = excluded.execution_status,
				error = excluded.error, message = excluded.message, recorded_at = excluded.recorded_at`,
			ids, nominals, triggers, outcomes, keys, wfids, execs, statuses, errs, msgs, recorded)
	}
}

func joinRows(rows []string) string {
	n := 0
	for _, r := range rows {
		n += len(r) + 1
	}
	out := make([]byte, 0, n)
	for i, r := range rows {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, r...)
	}
	return string(out)
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// DueSchedules reads, locked, up to limit schedules of shard due at now,
// earliest first; skipping those another transaction holds.
// A row that does not decode (written by no version of Harvest that
// reads it) is returned in bad, with why, for the caller to set aside:
// it does not stop the others.
func DueSchedules(ctx context.Context, tx Tx, shard int, now time.Time, limit int) (due []*Schedule, bad map[string]error, err error) {
	rows, err := tx.Query(ctx, `SELECT schedule_id, to_json(s) FROM schedules s WHERE shard = $1 AND next_due <= $2
		ORDER BY next_due LIMIT $3 FOR UPDATE SKIP LOCKED`, shard, now, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("due schedules of shard %d: %w", shard, err)
	}
	var (
		id  string
		raw []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &raw}, func() error {
		sc, err := decodeSchedule(raw)
		if err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[id] = err
			return nil
		}
		due = append(due, sc)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("due schedules of shard %d: %w", shard, err)
	}
	return due, bad, nil
}

// ErrScheduleNotFound is GetSchedule's error for a schedule that does
// not exist.
var ErrScheduleNotFound = errors.New("schedule not found")

// GetSchedule reads a schedule, and the latest fire of its ledger (nil
// when it has none).
func GetSchedule(ctx context.Context, db DBTX, id string) (*Schedule, *ScheduleFire, error) {
	var raw []byte
	err := db.QueryRow(ctx, `SELECT to_json(s) FROM schedules s WHERE schedule_id = $1`, id).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrScheduleNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read schedule %s: %w", id, err)
	}
	sc, err := decodeSchedule(raw)
	if err != nil {
		return nil, nil, err
	}
	fires, err := ListFires(ctx, db, id, nil, 1)
	if err != nil || len(fires) == 0 {
		return sc, nil, err
	}
	return sc, fires[0], nil
}

// LastFires reads the latest fire of each of the schedules, by id.
func LastFires(ctx context.Context, db DBTX, ids []string) (map[string]*ScheduleFire, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT ON (f.schedule_id) `+fireColumns+` FROM schedule_fires f
		WHERE f.schedule_id = ANY($1) ORDER BY f.schedule_id, f.nominal_time DESC, f.trigger DESC`, ids)
	if err != nil {
		return nil, fmt.Errorf("last fires of schedules: %w", err)
	}
	out := map[string]*ScheduleFire{}
	_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
		f, err := scanFire(row)
		if err == nil {
			out[f.ScheduleID] = f
		}
		return struct{}{}, err
	})
	if err != nil {
		return nil, fmt.Errorf("last fires of schedules: %w", err)
	}
	return out, nil
}

// ListSchedules reads up to limit schedules with ids after after, by
// id: of the workflows, when it is not nil.
func ListSchedules(ctx context.Context, db DBTX, after string, limit int, workflows []string) ([]*Schedule, error) {
	rows, err := db.Query(ctx, `SELECT to_json(s) FROM schedules s WHERE schedule_id > $1
		AND ($3::text[] IS NULL OR definition->>'workflow' = ANY($3)) ORDER BY schedule_id LIMIT $2`, after, limit, workflows)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var out []*Schedule
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&raw}, func() error {
		sc, err := decodeSchedule(raw)
		out = append(out, sc)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return out, nil
}

// ListFires reads up to limit rows of a schedule's ledger, newest
// nominal time first, those before before when it is not nil.
func ListFires(ctx context.Context, db DBTX, id string, before *FireRef, limit int) ([]*ScheduleFire, error) {
	var (
		at      *time.Time
		trigger string
	)
	if before != nil {
		at, trigger = &before.Nominal, before.Trigger
	}
	rows, err := db.Query(ctx, `SELECT `+fireColumns+` FROM schedule_fires f
		WHERE f.schedule_id = $1 AND ($2::timestamptz IS NULL OR (f.nominal_time, f.trigger) < ($2, $3))
		ORDER BY f.nominal_time DESC, f.trigger DESC LIMIT $4`, id, at, trigger, limit)
	if err != nil {
		return nil, fmt.Errorf("list fires of schedule %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*ScheduleFire, error) { return scanFire(row) })
	if err != nil {
		return nil, fmt.Errorf("list fires of schedule %s: %w", id, err)
	}
	return out, nil
}

// View is the schedule as the API answers it: its definition, state,
// next fires and latest fire (last, nil for none).
func (sc *Schedule) View(last *ScheduleFire) api.Schedule {
	d := sc.Definition
	v := api.Schedule{ScheduleID: sc.ScheduleID, Workflow: d.Workflow, Input: d.Input, TaskQueue: d.TaskQueue, Spec: d.Spec, Overlap: d.Overlap,
		CatchupWindow: d.CatchupWindow, PauseOnFailure: d.PauseOnFailure, WorkflowIDTemplate: d.WorkflowIDTemplate, Paused: sc.Paused, Note: sc.Note,
		SearchAttributes: d.SearchAttributes,
		Source:           sc.Source, NextFires: []api.ScheduleNextFire{}, Running: []api.ScheduleFire{}, Buffered: []time.Time{},
		CreatedAt: sc.CreatedAt.UTC(), UpdatedAt: sc.UpdatedAt.UTC()}
	if spec, err := schedspec.Parse(d.Spec); err == nil {
		t := sc.FiredThrough
		for range 5 {
			var ok bool
			if t, ok = spec.Next(t); !ok {
				break
			}
			due := t
			if !sc.Paused {
				due = t.Add(spec.Jitter(sc.ScheduleID, t))
			}
			v.NextFires = append(v.NextFires, api.ScheduleNextFire{NominalTime: t.UTC(), DueAt: due.UTC()})
		}
	}
	for _, run := range sc.Running {
		v.Running = append(v.Running, api.ScheduleFire{NominalTime: run.Nominal.UTC(), Trigger: run.Trigger, Outcome: cmp.Or(run.Outcome, api.FireStarting),
			IdempotencyKey: wire.ScheduleKey(sc.ScheduleID, run.Nominal), WorkflowID: run.WorkflowID, ExecutionID: run.ExecutionID})
	}
	for _, b := range sc.Buffered {
		v.Buffered = append(v.Buffered, b.Nominal.UTC())
	}
	if last != nil {
		f := last.View()
		v.LastFire = &f
	}
	return v
}

// View is the fire as the API answers it.
func (f *ScheduleFire) View() api.ScheduleFire {
	return api.ScheduleFire{NominalTime: f.Nominal.UTC(), Trigger: f.Trigger, Outcome: f.Outcome, IdempotencyKey: f.IdempotencyKey, WorkflowID: f.WorkflowID,
		ExecutionID: f.ExecutionID, ExecutionStatus: f.ExecutionStatus, Error: f.Error, Message: f.Message, RecordedAt: f.RecordedAt.UTC()}
}
