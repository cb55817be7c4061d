package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// OutboxMsg is a message to publish once its transaction commits.
type OutboxMsg struct {
	ID      int64
	Shard   int
	Subject string
	MsgID   string
	Payload []byte
	// Trace is the W3C traceparent the message carries, "" for none.
	Trace string
}

// PendingOutbox returns the shard's unpublished outbox rows, oldest first.
func PendingOutbox(ctx context.Context, db DBTX, shard int, limit int) ([]*OutboxMsg, error) {
	msgs, err := queryRows(ctx, db, pgx.RowToAddrOfStructByPos[OutboxMsg], `SELECT id, shard, subject, msg_id, payload, COALESCE(trace_parent, '') FROM outbox WHERE shard = $1 ORDER BY id LIMIT $2`, shard, limit)
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
	traces := make([]*string, n)
	for i, m := range msgs {
		shards[i], subjects[i], msgIDs[i], payloads[i] = m.Shard, m.Subject, m.MsgID, m.Payload
		if m.Trace != "" {
			traces[i] = &m.Trace
		}
	}
	b.Queue(`WITH m AS (
			SELECT nextval('outbox_id_seq') AS id, generate_subscripts($1::int[], 1) AS ord,
				unnest($1::int[]) AS shard, unnest($2::text[]) AS subject, unnest($3::text[]) AS msg_id, unnest($4::bytea[]) AS payload,
				unnest($5::text[]) AS trace_parent
		), inserted AS (
			INSERT INTO outbox (id, shard, subject, msg_id, payload, trace_parent) SELECT id, shard, subject, msg_id, payload, trace_parent FROM m
		)
		SELECT ord, id FROM m`, shards, subjects, msgIDs, payloads, traces).Query(func(rows pgx.Rows) error {
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
