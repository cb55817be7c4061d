package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StateRow is one row of execution_states: the latest value of an
// execution's query state, and the seq of the WorkflowTaskCompleted of
// the task that set it.
type StateRow struct {
	ExecutionID string
	Name        string
	Value       json.RawMessage
	Seq         int
	UpdatedAt   time.Time
}

// stateKey is a state's primary key.
type stateKey struct{ executionID, name string }

// queueUpsertStates upserts rows, the last row of each state winning. A
// row replaces a stored one only with a greater seq: a task's result
// applied again (a fresh replay resends every state) changes nothing.
func queueUpsertStates(b *pgx.Batch, rows []StateRow) {
	if len(rows) == 0 {
		return
	}
	// One statement may not change a row twice (two tasks of an
	// execution in one batch, or a speculative next task).
	rows = lastOf(rows, func(r StateRow) stateKey { return stateKey{r.ExecutionID, r.Name} })
	n := len(rows)
	ids, names, values, seqs, ats := make([]string, n), make([]string, n), make([]json.RawMessage, n), make([]int, n), make([]time.Time, n)
	for i, r := range rows {
		ids[i], names[i], values[i], seqs[i], ats[i] = r.ExecutionID, r.Name, r.Value, r.Seq, r.UpdatedAt
	}
	b.Queue(`INSERT INTO execution_states (execution_id, name, value, seq, updated_at)
		SELECT unnest($1::uuid[]), unnest($2::text[]), unnest($3::jsonb[]), unnest($4::int[]), unnest($5::timestamptz[])
		ON CONFLICT (execution_id, name) DO UPDATE SET
			value = excluded.value, seq = excluded.seq, updated_at = excluded.updated_at
		WHERE execution_states.seq < excluded.seq`, ids, names, values, seqs, ats)
}

// ExecutionStates are an execution's query states as a read finds them,
// with what the read needs of the execution: its workflow (for a token
// limited to some workflows) and its status (a closed execution's states
// change no more).
type ExecutionStates struct {
	WorkflowName string
	Status       string
	// States are by name; those a read asked for that are not set are
	// absent.
	States []StateRow
}

// GetStates reads execution executionID's query states: the one named
// name, or all of them when name is empty, by name. An unknown execution
// is ErrExecutionNotFound. One statement, so the execution's status and
// its states are read at one instant.
func GetStates(ctx context.Context, db DBTX, executionID, name string) (*ExecutionStates, error) {
	rows, err := db.Query(ctx, `
		SELECT e.workflow_name, e.status, s.name, s.value, s.seq, s.updated_at
		FROM executions AS e
		LEFT JOIN execution_states AS s ON s.execution_id = e.execution_id AND ($2 = '' OR s.name = $2)
		WHERE e.execution_id = $1
		ORDER BY s.name`, executionID, name)
	if err != nil {
		return nil, fmt.Errorf("read states of %s: %w", executionID, err)
	}
	var out *ExecutionStates
	var (
		workflow, status string
		sname            *string
		value            []byte
		seq              *int
		at               *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&workflow, &status, &sname, &value, &seq, &at}, func() error {
		if out == nil {
			out = &ExecutionStates{WorkflowName: workflow, Status: status}
		}
		if sname != nil && seq != nil && at != nil {
			out.States = append(out.States, StateRow{ExecutionID: executionID, Name: *sname, Value: append(json.RawMessage(nil), value...),
				Seq: *seq, UpdatedAt: *at})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read states of %s: %w", executionID, err)
	}
	if out == nil {
		return nil, fmt.Errorf("read states of %s: %w", executionID, ErrExecutionNotFound)
	}
	return out, nil
}
