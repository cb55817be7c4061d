package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimRef names a start idempotency claim.
type ClaimRef struct {
	WorkflowName   string
	IdempotencyKey string
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
	return sweepExpired(ctx, db, "start_claims", "claims", limit)
}

// sweepExpired deletes up to limit rows of table (a table of this
// package's with an expires_at column) whose time has passed, skipping
// rows another transaction holds, and returns how many it deleted; what
// names the rows in its error.
func sweepExpired(ctx context.Context, db DBTX, table, what string, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM `+table+` WHERE ctid IN (
			SELECT ctid FROM `+table+` WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`, limit)
	if err != nil {
		return 0, fmt.Errorf("sweep expired %s: %w", what, err)
	}
	return tag.RowsAffected(), nil
}

// ClaimStartKeys takes each claim for the execution given with it, in one
// statement: a live claim held by another execution is left alone, an
// expired one is taken over. It puts in out, for every key, the claim as
// it now stands, for the keys it took; a key held by a live claim of
// another execution is missing, and ClaimsMissed reads those.
func (r *Reads) ClaimStartKeys(claims []NewClaim, window time.Duration, out map[ClaimRef]Claim) {
	if len(claims) == 0 {
		return
	}
	names, keys, execs, prints := claimColumnsOf(claims)
	// The INSERT returns the claims it took (new keys, and expired claims
	// taken over); a key held by a live claim of another execution is not
	// returned, and ClaimsMissed reads it in a second round trip. Keeping
	// the common statement a plain INSERT matters: PostgreSQL plans it on
	// every call (store.PoolConfig), and planning the earlier form, which
	// also read the held claims in a UNION ALL, cost more than running it.
	r.b.Queue(insertClaims+` RETURNING `+claimColumns, names, keys, execs, prints, window).Query(func(rows pgx.Rows) error {
		if err := collectClaims(rows, out); err != nil {
			return fmt.Errorf("claim start keys: %w", err)
		}
		return nil
	})
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

// insertClaims takes the start claims given as arrays ($1 names, $2 keys,
// $3 execution ids, $4 fingerprints, $5 the window): new keys, and
// expired claims taken over (their duplicate counts start again); a key
// held by a live claim is left alone.
const insertClaims = `
	INSERT INTO start_claims AS c (workflow_name, idempotency_key, execution_id, fingerprint, expires_at)
	SELECT n, k, e::uuid, f, now() + $5::interval FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(n, k, e, f)
	ON CONFLICT (workflow_name, idempotency_key) DO UPDATE
		SET execution_id = EXCLUDED.execution_id, fingerprint = EXCLUDED.fingerprint,
			created_at = now(), expires_at = EXCLUDED.expires_at,
			replay_duplicates = 0, broker_duplicates = 0, claim_duplicates = 0
		WHERE c.expires_at <= now()`

// claimColumnsOf spreads claims into insertClaims' arrays.
func claimColumnsOf(claims []NewClaim) (names, keys, execs, prints []string) {
	names, keys, execs, prints = make([]string, len(claims)), make([]string, len(claims)), make([]string, len(claims)), make([]string, len(claims))
	for i, c := range claims {
		names[i], keys[i], execs[i], prints[i] = c.WorkflowName, c.IdempotencyKey, c.ExecutionID, c.Fingerprint
	}
	return names, keys, execs, prints
}

// KeyClaim is a start key's claim with the duplicates it absorbed, as
// describe shows it.
type KeyClaim struct {
	Claim
	Duplicates Duplicates
}

// ExecutionClaim reads into out the claim of ref if it points to
// executionID, expired or not (an expired claim stays until the sweep
// deletes it); out stays nil when there is none.
func (r *Reads) ExecutionClaim(ref ClaimRef, executionID string, out **KeyClaim) {
	r.b.Queue(`SELECT execution_id::text, fingerprint, created_at, expires_at, replay_duplicates, broker_duplicates, claim_duplicates
		FROM start_claims WHERE workflow_name = $1 AND idempotency_key = $2 AND execution_id = $3`,
		ref.WorkflowName, ref.IdempotencyKey, executionID).Query(func(rows pgx.Rows) error {
		var c KeyClaim
		_, err := pgx.ForEachRow(rows, []any{&c.ExecutionID, &c.Fingerprint, &c.CreatedAt, &c.ExpiresAt,
			&c.Duplicates.Replay, &c.Duplicates.Broker, &c.Duplicates.Claim}, func() error {
			*out = &c
			return nil
		})
		if err != nil {
			return fmt.Errorf("read claim %q: %w", ref.IdempotencyKey, err)
		}
		return nil
	})
}

// DrainReport is what a store holds that a drain of it concerns.
type DrainReport struct {
	// LiveKeys are the start keys inside their idempotency window, and
	// Until when the last of them expires: a same-key retry after a drain
	// may start a second execution on another store.
	LiveKeys int64
	Until    *time.Time
	// Running are the executions still running: they finish where they
	// are.
	Running int64
	// Deferred are the starts start policies hold back there.
	Deferred int64
}

// ReportDrain reads what a drain of the store db concerns.
func ReportDrain(ctx context.Context, db DBTX) (DrainReport, error) {
	var r DrainReport
	err := db.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM start_claims WHERE expires_at > now()),
			(SELECT max(expires_at) FROM start_claims WHERE expires_at > now()),
			(SELECT count(*) FROM executions WHERE status IN ('Running', 'Pending')),
			(SELECT coalesce(sum(size), 0) FROM deferred_starts)`).Scan(&r.LiveKeys, &r.Until, &r.Running, &r.Deferred)
	if err != nil {
		return r, fmt.Errorf("report drain: %w", err)
	}
	return r, nil
}
