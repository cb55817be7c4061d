package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/harvest-engine/harvest/internal/wire"
)

// EventRow is a history event of one execution, to be appended.
type EventRow struct {
	ExecutionID string
	wire.Event
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

// GetHistory reads an execution's events in order; ErrExecutionNotFound
// if the execution does not exist.
func GetHistory(ctx context.Context, db DBTX, executionID string) ([]wire.Event, error) {
	rows, err := db.Query(ctx, `
		SELECT h.seq, h.type, h.at, h.attrs
		FROM executions e LEFT JOIN history_events h USING (execution_id)
		WHERE e.execution_id = $1 ORDER BY h.seq`, executionID)
	if err != nil {
		return nil, fmt.Errorf("get history %s: %w", executionID, err)
	}
	found := false
	events := []wire.Event{}
	var seq *int
	var typ *string
	var ev wire.Event
	var at pgtype.Timestamptz
	_, err = pgx.ForEachRow(rows, []any{&seq, &typ, &at, &ev.Attrs}, func() error {
		found = true
		if seq != nil {
			events = append(events, wire.Event{Seq: *seq, Type: *typ, At: at.Time, Attrs: append([]byte(nil), ev.Attrs...)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("get history %s: %w", executionID, err)
	}
	if !found {
		return nil, fmt.Errorf("get history %s: %w", executionID, ErrExecutionNotFound)
	}
	return events, nil
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
