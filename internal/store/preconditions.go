package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Preconditions are what an apply that read nothing assumed: the shard
// fence, every key it claims free, every workflow id it starts unused.
// Write sends them first, in the batch that writes and commits; the first
// that does not hold aborts the transaction (harvest_assert, migration
// 012) with ErrFenced, ErrClaimHeld or ErrWorkflowIDTaken, and nothing is
// written.
type Preconditions struct {
	// Owner and Lease fence the transaction as LockShard does, and
	// AppliedSeq is the applied sequence the batch started from.
	Owner      string
	Lease      Lease
	AppliedSeq int64
	// Claims are taken for Window, as ClaimStartKeys takes them; each
	// key must be free or its claim expired.
	Claims []NewClaim
	Window time.Duration
	// Unused are workflow ids that must have no execution.
	Unused []WorkflowRef
}

// Errors of unmet preconditions.
var (
	// ErrFenced: the lease is lost, or the shard's applied sequence is
	// not the one the batch started from.
	ErrFenced = errors.New("shard fence failed: lease lost or applied sequence moved")
	// ErrClaimHeld: a key the batch claimed is held by a live claim.
	ErrClaimHeld = errors.New("a start key assumed free is claimed")
	// ErrWorkflowIDTaken: a workflow id the batch started has an
	// execution.
	ErrWorkflowIDTaken = errors.New("a workflow id assumed unused has an execution")
)

// SQLSTATEs harvest_assert raises for each precondition, in a class
// PostgreSQL does not use.
var preconditionCodes = map[string]error{"HX001": ErrFenced, "HX002": ErrClaimHeld, "HX003": ErrWorkflowIDTaken}

// preconditionError returns the unmet precondition err names, or nil.
func preconditionError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return preconditionCodes[pgErr.Code]
	}
	return nil
}

func queuePreconditions(b *pgx.Batch, p *Preconditions) {
	if p == nil {
		return
	}
	b.Queue(`
		SELECT harvest_assert(count(*) = 1, 'HX001', 'shard lease lost or applied sequence moved') FROM (
			SELECT 1 FROM shard_leases l JOIN shard_offsets o USING (shard)
			WHERE l.shard = $1 AND l.owner = $2 AND l.epoch = $3 AND o.applied_seq = $4
			FOR UPDATE OF o FOR SHARE OF l) AS fence`, p.Lease.Shard, p.Owner, p.Lease.Epoch, p.AppliedSeq)
	if n := len(p.Claims); n > 0 {
		names, keys, execs, prints := claimColumnsOf(p.Claims)
		b.Queue(`WITH taken AS (`+insertClaims+` RETURNING 1)
			SELECT harvest_assert(count(*) = $6, 'HX002', 'a start key is claimed') FROM taken`,
			names, keys, execs, prints, p.Window, n)
	}
	if n := len(p.Unused); n > 0 {
		names, ids := make([]string, n), make([]string, n)
		for i, ref := range p.Unused {
			names[i], ids[i] = ref.WorkflowName, ref.WorkflowID
		}
		b.Queue(`
			SELECT harvest_assert(NOT EXISTS (
				SELECT 1 FROM unnest($1::text[], $2::text[]) AS u(n, id)
				WHERE EXISTS (SELECT 1 FROM executions WHERE workflow_name = u.n AND workflow_id = u.id)),
				'HX003', 'a workflow id has an execution')`, names, ids)
	}
}

// wrapPrecondition names the unmet precondition in err, if one is.
func wrapPrecondition(err error) error {
	if perr := preconditionError(err); perr != nil {
		return fmt.Errorf("%w: %w", perr, err)
	}
	return err
}
