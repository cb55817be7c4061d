package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrLeaseLost is returned when a scheduler no longer holds the shard lease
// (owner and epoch) it acts under: another scheduler has taken the shard.
var ErrLeaseLost = errors.New("shard lease lost")

// ErrShardCountMismatch is returned when the database was set up for a
// different number of shards.
var ErrShardCountMismatch = errors.New("shard count differs from the database's")

// Lease is a held shard lease.
type Lease struct {
	Shard int
	Epoch int64
}

// EnsureShards creates the lease and offset rows of shards 0..n-1. It fails
// with ErrShardCountMismatch if the database holds rows for another count.
func EnsureShards(ctx context.Context, db *pgxpool.Pool, n int) error {
	return EnsureShardRange(ctx, db, 0, n)
}

// EnsureShardRange is EnsureShards for a store of a deployment with
// several (stores.Layout): its shards are base to base+n-1. A database
// that holds other shards is refused (ErrShardCountMismatch): it is
// another store's.
func EnsureShardRange(ctx context.Context, db *pgxpool.Pool, base, n int) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE shard_leases IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("ensure shards: lock: %w", err)
		}
		var have, first int
		if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(min(shard), 0) FROM shard_leases`).Scan(&have, &first); err != nil {
			return fmt.Errorf("ensure shards: count: %w", err)
		}
		if have != 0 && (have != n || first != base) {
			return fmt.Errorf("ensure shards: %w: configured shards %d to %d, database has %d from %d", ErrShardCountMismatch, base, base+n-1, have, first)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO shard_leases (shard) SELECT generate_series($1::int, $1::int + $2 - 1) ON CONFLICT DO NOTHING`, base, n); err != nil {
			return fmt.Errorf("ensure shards: leases: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO shard_offsets (shard) SELECT generate_series($1::int, $1::int + $2 - 1) ON CONFLICT DO NOTHING`, base, n); err != nil {
			return fmt.Errorf("ensure shards: offsets: %w", err)
		}
		return nil
	})
}

// Heartbeat records owner as alive for ttl and returns how many schedulers
// are alive, owner included.
func Heartbeat(ctx context.Context, db *pgxpool.Pool, owner string, ttl time.Duration) (int, error) {
	var alive int
	err := db.QueryRow(ctx, `
		WITH hb AS (
			INSERT INTO schedulers (owner, expires_at) VALUES ($1, now() + $2::interval)
			ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at
		)
		SELECT count(*) + 1 FROM schedulers WHERE expires_at > now() AND owner <> $1`, owner, ttl).Scan(&alive)
	if err != nil {
		return 0, fmt.Errorf("scheduler heartbeat %s: %w", owner, err)
	}
	return alive, nil
}

// Leave removes owner from the live schedulers and releases its leases, so
// others take its shards at once instead of after the lease expires.
func Leave(ctx context.Context, db *pgxpool.Pool, owner string) error {
	_, err := db.Exec(ctx, `
		WITH l AS (UPDATE shard_leases SET owner = NULL, expires_at = '-infinity' WHERE owner = $1)
		DELETE FROM schedulers WHERE owner = $1`, owner)
	if err != nil {
		return fmt.Errorf("scheduler leave %s: %w", owner, err)
	}
	return nil
}

// RenewLeases extends every lease owner holds and returns them.
func RenewLeases(ctx context.Context, db *pgxpool.Pool, owner string, ttl time.Duration) ([]Lease, error) {
	rows, err := db.Query(ctx, `
		UPDATE shard_leases SET expires_at = now() + $2::interval
		WHERE owner = $1 RETURNING shard, epoch`, owner, ttl)
	if err != nil {
		return nil, fmt.Errorf("renew leases of %s: %w", owner, err)
	}
	leases, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Lease])
	if err != nil {
		return nil, fmt.Errorf("renew leases of %s: %w", owner, err)
	}
	return leases, nil
}

// AcquireLeases takes up to max shards whose lease is free or expired,
// bumping each one's epoch so the previous owner is fenced out.
func AcquireLeases(ctx context.Context, db *pgxpool.Pool, owner string, ttl time.Duration, max int) ([]Lease, error) {
	if max <= 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `
		UPDATE shard_leases SET owner = $1, epoch = epoch + 1, expires_at = now() + $2::interval
		WHERE shard IN (
			SELECT shard FROM shard_leases
			WHERE owner IS NULL OR expires_at <= now()
			ORDER BY shard LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING shard, epoch`, owner, ttl, max)
	if err != nil {
		return nil, fmt.Errorf("acquire leases for %s: %w", owner, err)
	}
	leases, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Lease])
	if err != nil {
		return nil, fmt.Errorf("acquire leases for %s: %w", owner, err)
	}
	return leases, nil
}

// ReleaseLease gives a shard up, if owner still holds it at epoch.
func ReleaseLease(ctx context.Context, db *pgxpool.Pool, owner string, l Lease) error {
	_, err := db.Exec(ctx, `
		UPDATE shard_leases SET owner = NULL, expires_at = '-infinity'
		WHERE shard = $1 AND owner = $2 AND epoch = $3`, l.Shard, owner, l.Epoch)
	if err != nil {
		return fmt.Errorf("release shard %d: %w", l.Shard, err)
	}
	return nil
}

// LockShard fences an apply transaction: it returns the shard's applied
// stream sequence, locking the offset row, if owner still holds the lease at
// epoch, and ErrLeaseLost otherwise. The lease row stays share-locked until
// the transaction ends, so no takeover can slip in between.
func LockShard(ctx context.Context, tx Tx, owner string, l Lease) (int64, error) {
	var applied int64
	var r Reads
	r.LockShard(owner, l, &applied)
	return applied, r.Send(ctx, tx)
}

// LockShard fences the transaction, as the function LockShard does, and
// sets *applied to the shard's applied stream sequence. Statements queued
// after it run under the lock.
func (r *Reads) LockShard(owner string, l Lease, applied *int64) {
	r.b.Queue(`
		SELECT o.applied_seq FROM shard_leases l JOIN shard_offsets o USING (shard)
		WHERE l.shard = $1 AND l.owner = $2 AND l.epoch = $3
		FOR UPDATE OF o FOR SHARE OF l`, l.Shard, owner, l.Epoch).QueryRow(func(row pgx.Row) error {
		err := row.Scan(applied)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("shard %d epoch %d: %w", l.Shard, l.Epoch, ErrLeaseLost)
		}
		if err != nil {
			return fmt.Errorf("lock shard %d: %w", l.Shard, err)
		}
		return nil
	})
}

// ForgetDeadSchedulers deletes schedulers whose heartbeat lapsed over an
// hour ago, so the table does not grow with every process start.
func ForgetDeadSchedulers(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, `DELETE FROM schedulers WHERE expires_at < now() - interval '1 hour'`); err != nil {
		return fmt.Errorf("forget dead schedulers: %w", err)
	}
	return nil
}

// StreamBinding is what BindShardStream found: the shard's applied
// sequence counted in another command stream than the one now deployed,
// created at Previous (zero when unknown), and was reset to 0 for the new
// stream; the commands of the old stream it had not applied are gone with
// it.
type StreamBinding struct {
	Reset      bool
	Previous   time.Time
	AppliedSeq int64
}

// BindShardStream records that the shard's applied sequence counts in the
// command stream that stream describes (its creation time and last
// sequence), and resets it to 0 when it counted in another: one created at
// another time, or one that got further than this stream has (a stream's
// sequences never go back, so it cannot be this one). Without it a
// recreated stream's commands, numbered from 1 again, would be skipped as
// redeliveries. It is fenced like an apply transaction (ErrLeaseLost), and
// asks for the stream's state while it holds the shard's lock, so no
// earlier owner's apply can still move the applied sequence past it.
func BindShardStream(ctx context.Context, db *pgxpool.Pool, owner string, l Lease, stream func(context.Context) (created time.Time, lastSeq uint64, err error)) (StreamBinding, error) {
	var b StreamBinding
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		applied, err := LockShard(ctx, tx, owner, l)
		if err != nil {
			return err
		}
		created, lastSeq, err := stream(ctx)
		if err != nil {
			return err
		}
		var prev *time.Time
		if err := tx.QueryRow(ctx, `SELECT stream_created FROM shard_offsets WHERE shard = $1`, l.Shard).Scan(&prev); err != nil {
			return fmt.Errorf("read stream of shard %d: %w", l.Shard, err)
		}
		created = created.UTC().Truncate(time.Microsecond)
		if prev != nil && prev.Equal(created) && uint64(applied) <= lastSeq {
			b.AppliedSeq = applied
			return nil
		}
		if prev != nil {
			b.Previous = *prev
		}
		b.Reset = applied > 0 && ((prev != nil && !prev.Equal(created)) || uint64(applied) > lastSeq)
		if b.Reset {
			applied = 0
		}
		b.AppliedSeq = applied
		_, err = tx.Exec(ctx, `UPDATE shard_offsets SET stream_created = $2, applied_seq = $3 WHERE shard = $1`, l.Shard, created, applied)
		if err != nil {
			return fmt.Errorf("bind shard %d to its stream: %w", l.Shard, err)
		}
		return nil
	})
	return b, err
}

// ShardFailure is a shard whose applies keep failing.
type ShardFailure struct {
	Shard        int
	FailingSince time.Time
	LastError    string
}

// RecordShardFailure marks shard as failing (since now, unless it was
// already) with err's message.
func RecordShardFailure(ctx context.Context, db DBTX, shard int, msg string) error {
	_, err := db.Exec(ctx, `UPDATE shard_offsets SET failing_since = coalesce(failing_since, now()), last_error = $2 WHERE shard = $1`,
		shard, Storable(msg))
	if err != nil {
		return fmt.Errorf("record failure of shard %d: %w", shard, err)
	}
	return nil
}

// ClearShardFailure marks shard as applying again.
func ClearShardFailure(ctx context.Context, db DBTX, shard int) error {
	_, err := db.Exec(ctx, `UPDATE shard_offsets SET failing_since = NULL, last_error = NULL WHERE shard = $1 AND failing_since IS NOT NULL`, shard)
	if err != nil {
		return fmt.Errorf("clear failure of shard %d: %w", shard, err)
	}
	return nil
}

// FailingShards returns the shards that have been failing for longer
// than longer.
func FailingShards(ctx context.Context, db DBTX, longer time.Duration) ([]ShardFailure, error) {
	rows, err := db.Query(ctx, `SELECT shard, failing_since, coalesce(last_error, '') FROM shard_offsets
		WHERE failing_since IS NOT NULL AND failing_since <= now() - $1::interval ORDER BY shard`, longer)
	if err != nil {
		return nil, fmt.Errorf("read failing shards: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ShardFailure])
	if err != nil {
		return nil, fmt.Errorf("read failing shards: %w", err)
	}
	return out, nil
}
