package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/api"
)

// Update statuses (workflow_updates.status): the API's, which says what
// each means.
const (
	UpdateRequested = api.UpdateRequested
	UpdateAccepted  = api.UpdateAccepted
	UpdateCompleted = api.UpdateCompleted
	UpdateFailed    = api.UpdateFailed
	UpdateRejected  = api.UpdateRejected
)

// RunUpdates are a run's updates in flight, kept on its execution row
// (executions.updates), and the number of updates it was asked for. A
// value is never changed once on an Execution: a change makes a new one
// (Execution copies share it).
type RunUpdates struct {
	Total    int              `json:"total"`
	InFlight []InFlightUpdate `json:"in_flight,omitempty"`
}

// InFlightUpdate is an update a run was asked for and has not answered:
// requested (no task has taken it: the next one carries it), or accepted.
type InFlightUpdate struct {
	UpdateID string          `json:"update_id"`
	Name     string          `json:"name"`
	Args     json.RawMessage `json:"args,omitempty"`
	Accepted bool            `json:"accepted,omitempty"`
}

// Clone is a copy of u that shares nothing with it (nil for nil).
func (u *RunUpdates) Clone() *RunUpdates {
	if u == nil {
		return &RunUpdates{}
	}
	return &RunUpdates{Total: u.Total, InFlight: slices.Clone(u.InFlight)}
}

// All are u's updates in flight (none for nil).
func (u *RunUpdates) All() []InFlightUpdate {
	if u == nil {
		return nil
	}
	return u.InFlight
}

// Find is the index of update id among u's in flight, or -1.
func (u *RunUpdates) Find(id string) int {
	if u == nil {
		return -1
	}
	return slices.IndexFunc(u.InFlight, func(f InFlightUpdate) bool { return f.UpdateID == id })
}

// Requested are u's updates no task has taken, oldest first.
func (u *RunUpdates) Requested() []InFlightUpdate {
	if u == nil {
		return nil
	}
	var out []InFlightUpdate
	for _, f := range u.InFlight {
		if !f.Accepted {
			out = append(out, f)
		}
	}
	return out
}

// UpdateKeyRef names an update by its key in a chain of continued runs
// (its first run).
type UpdateKeyRef struct {
	ChainID        string
	IdempotencyKey string
}

// Update is a row of workflow_updates.
type Update struct {
	UpdateID       string
	ChainID        string
	ExecutionID    string
	IdempotencyKey string
	Name           string
	Args           json.RawMessage
	Status         string
	Result         json.RawMessage
	Failure        json.RawMessage
	// ErrorCode says why a failed or rejected update was: the API's
	// error code (update_rejected, update_not_found, execution_closed);
	// "" for a handler's failure.
	ErrorCode string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// View is u as the API shows it.
func (u *Update) View() api.Update {
	return api.Update{UpdateID: u.UpdateID, ExecutionID: u.ExecutionID, Name: u.Name, Status: u.Status, Result: u.Result,
		Failure: u.Failure, Error: u.ErrorCode, CreatedAt: u.CreatedAt, UpdatedAt: u.UpdatedAt}
}

// UpdateChange is what an apply changes of an update: its status, its
// answer, and the run it belongs to (a requested update moves to the run
// its run continued as).
type UpdateChange struct {
	UpdateID    string
	ExecutionID string
	Status      string
	Result      json.RawMessage
	Failure     json.RawMessage
	ErrorCode   string
}

// LoadUpdateKeys puts in out, by key, the update each of refs names, for
// those that exist.
func (r *Reads) LoadUpdateKeys(refs []UpdateKeyRef, out map[UpdateKeyRef]string) {
	if len(refs) == 0 {
		return
	}
	chains, keys := make([]string, len(refs)), make([]string, len(refs))
	for i, ref := range refs {
		chains[i], keys[i] = ref.ChainID, ref.IdempotencyKey
	}
	r.b.Queue(`SELECT chain_id::text, idempotency_key, update_id::text FROM workflow_updates
		WHERE (chain_id, idempotency_key) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))`, chains, keys).Query(func(rows pgx.Rows) error {
		var ref UpdateKeyRef
		var id string
		_, err := pgx.ForEachRow(rows, []any{&ref.ChainID, &ref.IdempotencyKey, &id}, func() error {
			out[ref] = id
			return nil
		})
		if err != nil {
			return fmt.Errorf("load update keys: %w", err)
		}
		return nil
	})
}

func queueInsertUpdates(b *pgx.Batch, us []*Update) {
	if len(us) == 0 {
		return
	}
	n := len(us)
	ids, chains, execs, names := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	keys, args := make([]*string, n), make([]json.RawMessage, n)
	for i, u := range us {
		ids[i], chains[i], execs[i], keys[i], names[i], args[i] = u.UpdateID, u.ChainID, u.ExecutionID, nullIfEmpty(u.IdempotencyKey), u.Name, u.Args
	}
	b.Queue(`INSERT INTO workflow_updates (update_id, chain_id, execution_id, idempotency_key, name, args, status)
		SELECT unnest($1::uuid[]), unnest($2::uuid[]), unnest($3::uuid[]), unnest($4::text[]), unnest($5::text[]), unnest($6::jsonb[]), 'requested'`,
		ids, chains, execs, keys, names, args)
}

func queueUpdateChanges(b *pgx.Batch, cs []UpdateChange) {
	cs = lastOf(cs, func(c UpdateChange) string { return c.UpdateID })
	if len(cs) == 0 {
		return
	}
	n := len(cs)
	ids, execs, statuses := make([]string, n), make([]string, n), make([]string, n)
	results, failures := make([]json.RawMessage, n), make([]json.RawMessage, n)
	codes := make([]*string, n)
	for i, c := range cs {
		ids[i], execs[i], statuses[i], results[i], failures[i], codes[i] = c.UpdateID, c.ExecutionID, c.Status, c.Result, c.Failure, nullIfEmpty(c.ErrorCode)
	}
	b.Queue(`UPDATE workflow_updates AS u SET execution_id = v.execution_id, status = v.status, result = v.result, failure = v.failure,
			error_code = v.error_code, updated_at = now()
		FROM (SELECT unnest($1::uuid[]) AS update_id, unnest($2::uuid[]) AS execution_id, unnest($3::text[]) AS status,
			unnest($4::jsonb[]) AS result, unnest($5::jsonb[]) AS failure, unnest($6::text[]) AS error_code) AS v
		WHERE u.update_id = v.update_id AND u.update_id = ANY($1::uuid[])`,
		ids, execs, statuses, results, failures, codes)
}

// ErrUpdateNotFound is returned for an update that does not exist.
var ErrUpdateNotFound = errors.New("update not found")

// GetUpdate reads update id.
func GetUpdate(ctx context.Context, db DBTX, id string) (*Update, error) {
	var u Update
	var code *string
	err := db.QueryRow(ctx, `SELECT update_id::text, chain_id::text, execution_id::text, coalesce(idempotency_key, ''), name, args, status, result, failure,
			error_code, created_at, updated_at FROM workflow_updates WHERE update_id = $1`, id).
		Scan(&u.UpdateID, &u.ChainID, &u.ExecutionID, &u.IdempotencyKey, &u.Name, &u.Args, &u.Status, &u.Result, &u.Failure, &code, &u.CreatedAt, &u.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrUpdateNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read update %s: %w", id, err)
	}
	if code != nil {
		u.ErrorCode = *code
	}
	return &u, nil
}

// Closed says whether u has its answer.
func (u *Update) Closed() bool {
	return u.Status == UpdateCompleted || u.Status == UpdateFailed || u.Status == UpdateRejected
}
