package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// ErrDeadCommandNotFound is returned for a dead-letter id that does not
// exist.
var ErrDeadCommandNotFound = errors.New("dead command not found")

// DeadCommand is a command set aside because it cannot be applied: the
// message as it came (Payload), where it was (Shard, StreamSeq, Subject),
// and why (Error, a machine code, and Reason, for a person).
type DeadCommand struct {
	ID        int64
	Shard     int
	StreamSeq uint64
	CommandID string
	Kind      string
	Subject   string
	Payload   []byte
	Error     string
	Reason    string
	DeadAt    time.Time
}

// Storable returns s as text PostgreSQL stores: invalid UTF-8 replaced,
// NUL removed. Dead commands' text columns hold what a poison message
// carried, which may be neither.
func Storable(s string) string {
	s = strings.ToValidUTF8(s, string(utf8.RuneError))
	return strings.ReplaceAll(s, "\x00", "")
}

func queueInsertDeadCommands(b *pgx.Batch, shard int, dead []DeadCommand) {
	for _, d := range dead {
		b.Queue(`INSERT INTO dead_commands (shard, stream_seq, command_id, kind, subject, payload, error, reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			shard, int64(d.StreamSeq), Storable(d.CommandID), Storable(d.Kind), Storable(d.Subject), d.Payload, Storable(d.Error), Storable(d.Reason))
	}
}

// DeadFilter narrows ListDeadCommands; zero values match everything.
type DeadFilter struct {
	Shard *int
	// Before lists dead commands with a smaller id (the next page).
	Before int64
	// Limit caps the rows, default 50.
	Limit int
}

const deadColumns = `id, shard, stream_seq, command_id, kind, subject, error, reason, dead_at`

// ListDeadCommands returns dead commands, newest first, without their
// payloads.
func ListDeadCommands(ctx context.Context, db DBTX, f DeadFilter) ([]DeadCommand, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	rows, err := db.Query(ctx, `SELECT `+deadColumns+` FROM dead_commands
		WHERE ($1::int IS NULL OR shard = $1) AND ($2::bigint = 0 OR id < $2)
		ORDER BY id DESC LIMIT $3`, f.Shard, f.Before, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list dead commands: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadCommand, error) {
		var d DeadCommand
		var seq int64
		err := row.Scan(&d.ID, &d.Shard, &seq, &d.CommandID, &d.Kind, &d.Subject, &d.Error, &d.Reason, &d.DeadAt)
		d.StreamSeq = uint64(seq)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("list dead commands: %w", err)
	}
	return out, nil
}

// GetDeadCommand returns one dead command with its payload.
func GetDeadCommand(ctx context.Context, db DBTX, id int64) (*DeadCommand, error) {
	var d DeadCommand
	var seq int64
	err := db.QueryRow(ctx, `SELECT `+deadColumns+`, payload FROM dead_commands WHERE id = $1`, id).
		Scan(&d.ID, &d.Shard, &seq, &d.CommandID, &d.Kind, &d.Subject, &d.Error, &d.Reason, &d.DeadAt, &d.Payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("dead command %d: %w", id, ErrDeadCommandNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read dead command %d: %w", id, err)
	}
	d.StreamSeq = uint64(seq)
	return &d, nil
}
