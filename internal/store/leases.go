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
// several (placement.Layout): its shards are base to base+n-1. A database
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
		WITH l AS (UPDATE shard_leases SET owner = NULL, expires_at = now() WHERE owner = $1)
		DELETE FROM schedulers WHERE owner = $1`, owner)
	if err != nil {
		return fmt.Errorf("scheduler leave %s: %w", owner, err)
	}
	return nil
}

// RenewLeases extends every lease owner holds and returns them.
func RenewLeases(ctx context.Context, db *pgxpool.Pool, owner string, ttl time.Duration) ([]Lease, error) {
	leases, err := queryRows(ctx, db, pgx.RowToStructByPos[Lease], `
		UPDATE shard_leases SET expires_at = now() + $2::interval
		WHERE owner = $1 RETURNING shard, epoch`, owner, ttl)
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
	leases, err := queryRows(ctx, db, pgx.RowToStructByPos[Lease], `
		UPDATE shard_leases SET owner = $1, epoch = epoch + 1, expires_at = now() + $2::interval
		WHERE shard IN (
			SELECT shard FROM shard_leases
			WHERE owner IS NULL OR expires_at <= now()
			ORDER BY shard LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING shard, epoch`, owner, ttl, max)
	if err != nil {
		return nil, fmt.Errorf("acquire leases for %s: %w", owner, err)
	}
	return leases, nil
}

// ReleaseLease gives a shard up, if owner still holds it at epoch.
func ReleaseLease(ctx context.Context, db *pgxpool.Pool, owner string, l Lease) error {
	_, err := db.Exec(ctx, `
		UPDATE shard_leases SET owner = NULL, expires_at = now()
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
		// A failure mark of an earlier lease no longer counts
		// (FailingShards); it goes, so that shard_offsets shows this
		// lease's health alone.
		if _, err := tx.Exec(ctx, `UPDATE shard_offsets SET `+clearMarkSQL+` WHERE shard = $1 AND failing_since IS NOT NULL
			AND (failing_owner IS DISTINCT FROM $2 OR failing_epoch IS DISTINCT FROM $3)`, l.Shard, owner, l.Epoch); err != nil {
			return fmt.Errorf("clear an earlier lease's failure mark of shard %d: %w", l.Shard, err)
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

// Shard failure marks. A shard's runner marks the shard failing while its
// sessions fail (RecordShardFailure, refreshed every few seconds while
// the failure lasts) and clears the mark when it applies again; every
// apply batch also clears it in its own transaction (Write), whoever
// wrote it. A mark counts (FailingShards) only while it names the shard's
// current lease (owner and epoch) and has been refreshed within
// MarkStaleAfter: one left by a runner that died, lost its lease, or
// never heard its clear answered stops counting on its own.

// MarkStaleAfter is how long a failure mark counts after its runner last
// refreshed it. Runners refresh every few seconds (the scheduler's
// markRefresh) whatever their session does, so a mark older than this
// was left by a runner that no longer sees the failure.
const MarkStaleAfter = 10 * time.Second

// UnownedCause and FailingCause are ShardFailure.Cause's values.
const (
	// FailingCause: the lease holder's sessions keep failing.
	FailingCause = "failing"
	// UnownedCause: no scheduler has held the shard's lease since
	// FailingSince.
	UnownedCause = "unowned"
)

// ShardFailure is a shard whose commands are not applied: its applies
// keep failing, or no scheduler holds it.
type ShardFailure struct {
	Shard        int
	FailingSince time.Time
	LastError    string
	// Cause is FailingCause or UnownedCause.
	Cause string
}

// RecordShardFailure marks shard as failing under owner's lease l with
// msg as its last error, and refreshes the mark: failing since now,
// unless the mark already names this lease and is not stale. It writes
// nothing when owner no longer holds l.
func RecordShardFailure(ctx context.Context, db DBTX, owner string, l Lease, msg string) error {
	_, err := db.Exec(ctx, `
		UPDATE shard_offsets o SET
			failing_since = CASE WHEN o.failing_since IS NOT NULL AND o.failing_owner = $2 AND o.failing_epoch = $3
				AND o.failing_refreshed_at > now() - $5::interval THEN o.failing_since ELSE now() END,
			last_error = $4, failing_owner = $2, failing_epoch = $3, failing_refreshed_at = now()
		FROM shard_leases l
		WHERE o.shard = $1 AND l.shard = $1 AND l.owner = $2 AND l.epoch = $3`,
		l.Shard, owner, l.Epoch, Storable(msg), MarkStaleAfter)
	if err != nil {
		return fmt.Errorf("record failure of shard %d: %w", l.Shard, err)
	}
	return nil
}

// ClearShardFailure marks shard as applying again, if owner still holds
// its lease l.
func ClearShardFailure(ctx context.Context, db DBTX, owner string, l Lease) error {
	_, err := db.Exec(ctx, `
		UPDATE shard_offsets o SET failing_since = NULL, last_error = NULL, failing_owner = NULL, failing_epoch = NULL, failing_refreshed_at = NULL
		FROM shard_leases l
		WHERE o.shard = $1 AND o.failing_since IS NOT NULL AND l.shard = $1 AND l.owner = $2 AND l.epoch = $3`, l.Shard, owner, l.Epoch)
	if err != nil {
		return fmt.Errorf("clear failure of shard %d: %w", l.Shard, err)
	}
	return nil
}

// clearMarkSQL is the SET list that clears a shard's failure mark.
const clearMarkSQL = `failing_since = NULL, last_error = NULL, failing_owner = NULL, failing_epoch = NULL, failing_refreshed_at = NULL`

// FailingShards returns the shards whose commands have not been applied
// for longer than longer: those whose current lease holder has marked
// them failing since then and keeps refreshing the mark (a stale mark,
// or one written under another lease, does not count), and those no
// scheduler has held since then.
func FailingShards(ctx context.Context, db DBTX, longer time.Duration) ([]ShardFailure, error) {
	out, err := queryRows(ctx, db, pgx.RowToStructByPos[ShardFailure], `
		SELECT o.shard, o.failing_since, coalesce(o.last_error, ''), $3::text
		FROM shard_offsets o JOIN shard_leases l USING (shard)
		WHERE o.failing_since IS NOT NULL AND o.failing_since <= now() - $1::interval
			AND l.expires_at > now() AND o.failing_owner = l.owner AND o.failing_epoch = l.epoch
			AND o.failing_refreshed_at > now() - $2::interval
		UNION ALL
		SELECT shard, expires_at, '', $4::text FROM shard_leases
		WHERE expires_at <= now() - $1::interval AND expires_at > '-infinity'
		ORDER BY 1`, longer, MarkStaleAfter, FailingCause, UnownedCause)
	if err != nil {
		return nil, fmt.Errorf("read failing shards: %w", err)
	}
	return out, nil
}
