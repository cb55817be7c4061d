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

// LoadHistories returns the stored history of each execution of from, in
// order, from the event whose seq from gives it on (1: the whole
// history).
func LoadHistories(ctx context.Context, tx Tx, from map[string]int) (map[string][]wire.Event, error) {
	out := make(map[string][]wire.Event, len(from))
	if len(from) == 0 {
		return out, nil
	}
	// One query per execution, in one round trip: each is planned with
	// its own execution and first seq, and always takes the primary key's
	// index. A single join over all of them (unnest, then history_events)
	// was planned without knowing the seqs: on a table that is mostly one
	// long execution, PostgreSQL expected a third of it to match and
	// scanned it whole, 20 ms a task at 40,000 events (docs/benchmarks.md).
	b := &pgx.Batch{}
	for id, seq := range from {
		b.Queue(`SELECT seq, type, at, attrs FROM history_events WHERE execution_id = $1 AND seq >= $2 ORDER BY seq`, id, seq).
			Query(func(rows pgx.Rows) error {
				var ev wire.Event
				_, err := pgx.ForEachRow(rows, []any{&ev.Seq, &ev.Type, &ev.At, &ev.Attrs}, func() error {
					ev.Attrs = append(json.RawMessage(nil), ev.Attrs...)
					out[id] = append(out[id], ev)
					return nil
				})
				if err != nil {
					return fmt.Errorf("load the history of %s: %w", id, err)
				}
				return nil
			})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
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

// HistoryPage reads an execution's events from seq from to seq to, in
// order, until they hold maxBytes (of type and attributes; at least one
// event is read however large); more says events up to to are left.
// ErrExecutionNotFound if the execution does not exist.
func HistoryPage(ctx context.Context, db DBTX, executionID string, from, to, maxBytes int) (events []wire.Event, more bool, err error) {
	const pageRows = 1000
	rows, err := db.Query(ctx, `
		SELECT h.seq, h.type, h.at, h.attrs
		FROM executions e LEFT JOIN LATERAL (
			SELECT seq, type, at, attrs FROM history_events
			WHERE execution_id = e.execution_id AND seq >= $2 AND seq <= $3 ORDER BY seq LIMIT $4) h ON true
		WHERE e.execution_id = $1 ORDER BY h.seq`, executionID, from, to, pageRows+1)
	if err != nil {
		return nil, false, fmt.Errorf("read history page of %s: %w", executionID, err)
	}
	defer rows.Close()
	found, size := false, 0
	events = []wire.Event{}
	for rows.Next() {
		found = true
		var seq *int
		var typ *string
		var at pgtype.Timestamptz
		var attrs []byte
		if err := rows.Scan(&seq, &typ, &at, &attrs); err != nil {
			return nil, false, fmt.Errorf("read history page of %s: %w", executionID, err)
		}
		if seq == nil {
			continue // no event in range
		}
		n := len(*typ) + len(attrs)
		if len(events) == pageRows || (len(events) > 0 && size+n > maxBytes) {
			more = true
			break
		}
		size += n
		events = append(events, wire.Event{Seq: *seq, Type: *typ, At: at.Time, Attrs: append(json.RawMessage(nil), attrs...)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("read history page of %s: %w", executionID, err)
	}
	if !found {
		return nil, false, fmt.Errorf("read history page of %s: %w", executionID, ErrExecutionNotFound)
	}
	return events, more, nil
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
