package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harvest-engine/harvest/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/streams"
	"github.com/harvest-engine/harvest/internal/wire"
)

// seqCommand is a decoded command with the stream sequence that carried it.
type seqCommand struct {
	seq uint64
	cmd wire.Command
	// subject and raw are the message as it came, kept for a dead letter.
	subject string
	raw     []byte
	// dead, when set, sets the command aside instead of applying it.
	dead *deadReason
}

// deadReason is why a command is set aside: code is machine-readable,
// reason for a person.
type deadReason struct {
	code, reason string
}

// Dead letter codes.
const (
	// deadMalformed: the message is not a command the scheduler knows.
	deadMalformed = "malformed"
	// deadUnappliable: applying the command fails for a reason retrying
	// will not fix (PostgreSQL refuses a value it carries).
	deadUnappliable = "unappliable"
)

// batch is the in-memory state of one apply transaction: the rows it read,
// the rows it changes, and what it publishes after the commit.
type batch struct {
	shard  int
	shards int
	now    time.Time
	window time.Duration
	// outcomeTTL is how long the batch's outcomes stay readable.
	outcomeTTL time.Duration
	// wftTimeout is a dispatched workflow task's deadline.
	wftTimeout time.Duration
	// maxTask is the largest task NATS carries; 0 means no limit.
	maxTask int
	log     *slog.Logger

	execs       map[string]*store.Execution
	newExecs    map[string]bool
	changed     map[string]bool
	byWorkflow  map[store.WorkflowRef]*store.Execution
	activities  map[store.ActivityRef]*store.Activity
	newActs     map[store.ActivityRef]bool
	newEvents   map[string][]wire.Event
	needTask    []string
	needTaskSet map[string]bool

	// Claims of the batch's keyed starts, as they stand: claims[ref] is the
	// live claim, claimExec[ref] the execution it resolves to in this batch
	// (nil while the key is unresolved or after its claim was rolled back),
	// tentative[ref] the execution id the batch claimed the key for.
	claims    map[store.ClaimRef]store.Claim
	claimExec map[store.ClaimRef]*store.Execution
	tentative map[store.ClaimRef]string
	// signalClaims holds the keyed signals already delivered.
	signalClaims map[store.SignalRef]bool

	writes store.Writes
}

// apply runs one batch of commands in tx and returns the writes it made,
// including the outbox rows to publish after the commit. Commands at or
// below applied were applied before and are skipped.
// applyEnv is what an apply transaction knows of its scheduler and shard.
type applyEnv struct {
	shard  int
	shards int
	// window is the start idempotency window.
	window time.Duration
	// outcomeTTL is how long outcomes stay readable; zero means
	// streams.DefaultOutcomeTTL.
	outcomeTTL time.Duration
	// wftTimeout is how long a dispatched workflow task may go without
	// completing before the scheduler looks for it; zero means
	// DefaultWorkflowTaskTimeout.
	wftTimeout time.Duration
	// taskQueued says whether the task stream still holds the execution's
	// workflow task taskID (a worker has it, or will get it). Nil, or
	// false, lets a workflow task past its deadline be dispatched again.
	taskQueued func(ctx context.Context, executionID string, taskID int) bool
	// maxTask is the largest task payload NATS carries (its max payload,
	// less room for headers); 0 means no limit. A larger workflow task
	// fails its execution, a larger activity task its activity.
	maxTask int
	log     *slog.Logger
	// lock, when set, makes apply take the shard's lock itself, in the
	// round trip of its first reads, and check that the shard's applied
	// sequence is the one it was given. Without it the caller has locked
	// the shard.
	lock *shardLock
	// known, when set with lock, makes apply read nothing: it takes the
	// executions the batch needs from known (see execCache) and assumes
	// what its reads would have found, leaving the checks to the writes
	// (store.Preconditions). A batch that needs what that cannot give
	// fails with errNeedsReads, having sent nothing.
	known execCache
}

// shardLock is the lease an apply transaction fences itself with.
type shardLock struct {
	owner string
	lease store.Lease
}

// errAppliedMoved says the shard's applied sequence is not the one its
// runner last committed: the runner starts a new session, which reads it.
var errAppliedMoved = errors.New("shard's applied sequence moved under its runner")

// errNeedsReads says a batch cannot be applied without reading
// PostgreSQL first.
var errNeedsReads = errors.New("batch needs reads")

// noReads is the transaction a read-free apply runs in: any read it
// attempts fails with errNeedsReads, and apply is run again with reads.
type noReads struct{}

func (noReads) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNeedsReads
}
func (noReads) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errNeedsReads }
func (noReads) QueryRow(context.Context, string, ...any) pgx.Row        { return errRow{errNeedsReads} }
func (noReads) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	return pgx.FailedBatchResults(b, errNeedsReads)
}

func apply(ctx context.Context, tx store.Tx, env applyEnv, applied int64, cmds []seqCommand) (*store.Writes, error) {
	shard := env.shard
	b := &batch{
		shard: shard, shards: env.shards, now: time.Now().UTC(), window: env.window, log: env.log,
		outcomeTTL: cmp.Or(env.outcomeTTL, streams.DefaultOutcomeTTL), wftTimeout: cmp.Or(env.wftTimeout, DefaultWorkflowTaskTimeout), maxTask: env.maxTask,
		execs: map[string]*store.Execution{}, newExecs: map[string]bool{}, changed: map[string]bool{},
		byWorkflow: map[store.WorkflowRef]*store.Execution{}, activities: map[store.ActivityRef]*store.Activity{},
		newActs: map[store.ActivityRef]bool{}, newEvents: map[string][]wire.Event{}, needTaskSet: map[string]bool{},
		claimExec: map[store.ClaimRef]*store.Execution{}, tentative: map[store.ClaimRef]string{},
	}
	b.writes.Shard = shard
	b.writes.AppliedSeq = applied

	// Gather what the batch reads, so each table is read once.
	var (
		newClaims   []store.NewClaim
		wfRefs      []store.WorkflowRef
		execIDs     []string
		actRefs     []store.ActivityRef
		sigRefs     []store.SignalRef
		pending     []seqCommand
		seenWf      = map[store.WorkflowRef]bool{}
		seenExecIDs = map[string]bool{}
		// readFree says whether the batch can go without reads: no key
		// used twice, no signal-with-start, no activity or signal rows
		// to read.
		readFree = env.known != nil && env.lock != nil
	)
	addExec := func(id string) {
		if !seenExecIDs[id] {
			seenExecIDs[id] = true
			execIDs = append(execIDs, id)
		}
	}
	for _, c := range cmds {
		if c.seq <= uint64(applied) {
			continue
		}
		b.writes.AppliedSeq = int64(c.seq)
		if c.dead != nil {
			b.deadLetter(c)
			continue
		}
		pending = append(pending, c)
		switch c.cmd.Kind {
		case wire.KindStart:
			s := c.cmd.Start
			if s.IdempotencyKey != "" {
				ref := store.ClaimRef{WorkflowName: s.WorkflowName, IdempotencyKey: s.IdempotencyKey}
				if _, ok := b.tentative[ref]; !ok {
					id := dedup.MintExecutionID(b.shards, shard)
					b.tentative[ref] = id
					newClaims = append(newClaims, store.NewClaim{ClaimRef: ref, ExecutionID: id, Fingerprint: s.Fingerprint})
				} else {
					readFree = false
				}
			}
			ref := store.WorkflowRef{WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID}
			if !seenWf[ref] {
				seenWf[ref] = true
				wfRefs = append(wfRefs, ref)
			}
		case wire.KindWorkflowTaskCompleted:
			addExec(c.cmd.WorkflowTask.ExecutionID)
		case wire.KindActivityResult:
			addExec(c.cmd.Activity.ExecutionID)
			actRefs = append(actRefs, store.ActivityRef{ExecutionID: c.cmd.Activity.ExecutionID, ActivityID: c.cmd.Activity.ActivityID})
		case wire.KindSignal:
			addExec(c.cmd.Signal.ExecutionID)
			if c.cmd.Signal.IdempotencyKey != "" {
				sigRefs = append(sigRefs, store.SignalRef{ExecutionID: c.cmd.Signal.ExecutionID, IdempotencyKey: c.cmd.Signal.IdempotencyKey})
			}
		case wire.KindCancel:
			addExec(c.cmd.Cancel.ExecutionID)
		case wire.KindActivityHeartbeat:
			addExec(c.cmd.Heartbeat.ExecutionID)
			actRefs = append(actRefs, store.ActivityRef{ExecutionID: c.cmd.Heartbeat.ExecutionID, ActivityID: c.cmd.Heartbeat.ActivityID})
		case wire.KindSignalWithStart:
			readFree = false
			ref := store.WorkflowRef{WorkflowName: c.cmd.Start.WorkflowName, WorkflowID: c.cmd.Start.WorkflowID}
			if !seenWf[ref] {
				seenWf[ref] = true
				wfRefs = append(wfRefs, ref)
			}
		}
	}
	if len(pending) == 0 {
		if len(b.writes.DeadCommands) > 0 && env.lock != nil {
			// Nothing to read, so nothing took the shard's lock: the
			// writes take it.
			b.writes.Preconditions = &store.Preconditions{Owner: env.lock.owner, Lease: env.lock.lease, AppliedSeq: applied}
		}
		return &b.writes, nil
	}
	if env.known != nil {
		if !readFree || len(actRefs) > 0 || len(sigRefs) > 0 || !b.assume(env, applied, execIDs, newClaims, wfRefs) {
			return nil, errNeedsReads
		}
		return b.applyAll(ctx, tx, pending)
	}

	// The reads go in one round trip (after the shard's lock, when apply
	// takes it); only what they lead to (executions that claims point to,
	// signal-with-start keys) needs a second.
	var (
		reads     store.Reads
		lockedSeq int64
		latest    = make(map[store.WorkflowRef]*store.Execution, len(wfRefs))
	)
	b.claims = make(map[store.ClaimRef]store.Claim, len(newClaims))
	b.execs = make(map[string]*store.Execution, len(execIDs))
	b.activities = make(map[store.ActivityRef]*store.Activity, len(actRefs))
	b.signalClaims = make(map[store.SignalRef]bool, len(sigRefs))
	if env.lock != nil {
		reads.LockShard(env.lock.owner, env.lock.lease, &lockedSeq)
	}
	reads.ClaimStartKeys(newClaims, env.window, b.claims)
	reads.LoadExecutions(execIDs, b.execs)
	reads.LatestByWorkflowID(wfRefs, latest)
	reads.LoadActivities(actRefs, b.activities)
	reads.LoadSignalClaims(sigRefs, b.signalClaims)
	if err := reads.Send(ctx, tx); err != nil {
		return nil, err
	}
	if env.lock != nil && lockedSeq != applied {
		return nil, fmt.Errorf("shard %d: applied %d, expected %d: %w", shard, lockedSeq, applied, errAppliedMoved)
	}
	if err := store.ClaimsMissed(ctx, tx, newClaims, b.claims); err != nil {
		return nil, err
	}
	var more []string
	for ref, c := range b.claims {
		if c.ExecutionID != b.tentative[ref] && !seenExecIDs[c.ExecutionID] {
			seenExecIDs[c.ExecutionID] = true
			more = append(more, c.ExecutionID)
		}
	}
	reads.LoadExecutions(more, b.execs)
	// A signal-with-start's key is checked against the execution its
	// workflow_id resolves to.
	var swsRefs []store.SignalRef
	for _, c := range pending {
		if c.cmd.Kind == wire.KindSignalWithStart && c.cmd.Signal.IdempotencyKey != "" {
			if e := latest[store.WorkflowRef{WorkflowName: c.cmd.Start.WorkflowName, WorkflowID: c.cmd.Start.WorkflowID}]; e != nil {
				swsRefs = append(swsRefs, store.SignalRef{ExecutionID: e.ExecutionID, IdempotencyKey: c.cmd.Signal.IdempotencyKey})
			}
		}
	}
	reads.LoadSignalClaims(swsRefs, b.signalClaims)
	if err := reads.Send(ctx, tx); err != nil {
		return nil, err
	}
	for ref, e := range latest {
		if have, ok := b.execs[e.ExecutionID]; ok {
			e = have // the row locked by LoadExecutions is the one to change
		} else {
			b.execs[e.ExecutionID] = e
		}
		b.byWorkflow[ref] = e
	}
	return b.applyAll(ctx, tx, pending)
}

// assume fills in, for a read-free apply, what the reads would have
// found if the preconditions it records hold: the executions from
// env.known, every key's claim taken by the batch, no execution under any
// workflow id it starts. It reports false if an execution is not known.
func (b *batch) assume(env applyEnv, applied int64, execIDs []string, claims []store.NewClaim, wfRefs []store.WorkflowRef) bool {
	for _, id := range execIDs {
		e, ok := env.known.get(id)
		if !ok {
			return false
		}
		b.execs[id] = e
	}
	// PostgreSQL's now() sets the claims' times as it writes them; the
	// outcomes carry the scheduler's, a moment apart. (They are shown
	// only for a replay, which a read-free batch has none of, and ingest
	// answers a later duplicate from the stored claim.)
	at := b.now
	exp := at.Add(b.window)
	b.signalClaims = map[store.SignalRef]bool{}
	b.claims = make(map[store.ClaimRef]store.Claim, len(claims))
	for _, c := range claims {
		b.claims[c.ClaimRef] = store.Claim{ExecutionID: c.ExecutionID, Fingerprint: c.Fingerprint, CreatedAt: at, ExpiresAt: exp}
	}
	b.writes.Preconditions = &store.Preconditions{
		Owner: env.lock.owner, Lease: env.lock.lease, AppliedSeq: applied,
		Claims: claims, Window: b.window, Unused: wfRefs,
	}
	return true
}

// applyAll applies the batch's commands to what was read (or assumed).
func (b *batch) applyAll(ctx context.Context, tx store.Tx, pending []seqCommand) (*store.Writes, error) {
	for _, c := range pending {
		switch c.cmd.Kind {
		case wire.KindStart:
			b.start(c)
		case wire.KindWorkflowTaskCompleted:
			b.workflowTaskCompleted(c.cmd.WorkflowTask)
		case wire.KindActivityResult:
			b.activityResult(c.cmd.Activity)
		case wire.KindSignal:
			b.signal(c)
		case wire.KindSignalWithStart:
			b.signalWithStart(c)
		case wire.KindActivityHeartbeat:
			b.heartbeat(c.cmd.Heartbeat)
		case wire.KindCancel:
			b.cancel(c)
		}
	}
	b.settleClaims()
	if err := b.scheduleWorkflowTasks(ctx, tx); err != nil {
		return nil, err
	}
	for id := range b.changed {
		if !b.newExecs[id] {
			b.writes.UpdatedExecutions = append(b.writes.UpdatedExecutions, b.execs[id])
		}
	}
	return &b.writes, nil
}

func (b *batch) start(c seqCommand) {
	s := c.cmd.Start
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindStart, Keyed: s.IdempotencyKey != "", AppliedAt: b.now}
	ref := store.ClaimRef{WorkflowName: s.WorkflowName, IdempotencyKey: s.IdempotencyKey}
	if out.Keyed {
		claim := b.claims[ref]
		out.FirstSeenAt, out.ExpiresAt = &claim.CreatedAt, &claim.ExpiresAt
		holder := b.claimExec[ref]
		if holder == nil && claim.ExecutionID != "" && claim.ExecutionID != b.tentative[ref] {
			// Claimed before this batch: a replay.
			if holder = b.execs[claim.ExecutionID]; holder == nil {
				b.log.Error("start claim points to a missing execution", "workflow", s.WorkflowName, "idempotency_key", s.IdempotencyKey, "execution_id", claim.ExecutionID)
				b.refuse(out, http.StatusInternalServerError, "claim_dangling", fmt.Sprintf("idempotency key %q is claimed by execution %s, which does not exist", s.IdempotencyKey, claim.ExecutionID))
				return
			}
			b.claimExec[ref] = holder
		}
		if holder != nil {
			// A keyed replay short-circuits every other rule.
			if s.RejectFingerprintMismatch && claim.Fingerprint != "" && s.Fingerprint != claim.Fingerprint {
				b.refuse(out, http.StatusUnprocessableEntity, "idempotency_key_reused",
					fmt.Sprintf("idempotency key %q was first used with a different input", s.IdempotencyKey))
				return
			}
			b.outcome(out, holder, false, true)
			return
		}
	}
	wref := store.WorkflowRef{WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID}
	if prior := b.byWorkflow[wref]; prior != nil {
		switch s.ReusePolicy {
		case wire.ReuseRejectDuplicate:
			b.rollBackClaim(ref, out.Keyed)
			b.refuse(out, http.StatusConflict, "workflow_id_conflict",
				fmt.Sprintf("workflow %s with workflow_id %q already exists (execution %s, %s)", s.WorkflowName, s.WorkflowID, prior.ExecutionID, prior.Status))
			return
		case wire.ReuseTerminateIfRunning:
			if prior.Status == wire.StatusRunning {
				b.terminate(prior, "terminated by a start with reuse_policy terminate_if_running")
			}
		case wire.ReuseAllowDuplicateFailedOnly:
			if prior.Status != wire.StatusFailed && prior.Status != wire.StatusCancelled {
				b.resolveToExisting(out, ref, prior)
				return
			}
		default: // allow_duplicate
			b.resolveToExisting(out, ref, prior)
			return
		}
	}
	id := dedup.MintExecutionID(b.shards, b.shard)
	if out.Keyed {
		// The execution takes the id the key was claimed for (again, if
		// the batch rolled the claim back for an earlier refused start).
		id = b.tentative[ref]
		claim := b.claims[ref]
		claim.ExecutionID = id
		b.claims[ref] = claim
	}
	e := &store.Execution{
		ExecutionID: id, Shard: b.shard, WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID,
		TaskQueue: s.TaskQueue, Status: wire.StatusRunning, Input: s.Input, CreatedAt: b.now, UpdatedAt: b.now,
	}
	if out.Keyed {
		key := s.IdempotencyKey
		e.IdempotencyKey = &key
		b.claimExec[ref] = e
	}
	if s.CompletionCallback != "" {
		cb := s.CompletionCallback
		e.CompletionCallback = &cb
	}
	b.execs[id] = e
	b.newExecs[id] = true
	b.byWorkflow[wref] = e
	b.writes.NewExecutions = append(b.writes.NewExecutions, e)
	b.appendEvent(e, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{
		WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID, Input: s.Input, IdempotencyKey: s.IdempotencyKey, TaskQueue: s.TaskQueue,
		StartAt: s.StartAt,
	})
	if s.StartAt != nil && s.StartAt.After(b.now) {
		// A delayed start: its first workflow task waits on a durable timer.
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: id, Kind: store.TimerStart, FireAt: *s.StartAt, Attrs: json.RawMessage(`{}`)})
	} else {
		b.needWorkflowTask(e)
	}
	b.outcome(out, e, true, false)
}

// deadLetter sets a command aside, unapplied, with its reason, and
// answers it with an error: a request waiting on it gets that instead of
// 202, and GET /api/harvest/commands/{id} shows it.
func (b *batch) deadLetter(c seqCommand) {
	kind := c.cmd.Kind
	if kind == "" {
		kind = lastToken(c.subject)
	}
	b.writes.DeadCommands = append(b.writes.DeadCommands, store.DeadCommand{
		StreamSeq: c.seq, CommandID: c.cmd.CommandID, Kind: kind, Subject: c.subject, Payload: c.raw,
		Error: c.dead.code, Reason: c.dead.reason,
	})
	b.log.Error("command set aside as dead: it cannot be applied", "command_id", c.cmd.CommandID, "kind", kind,
		"stream_seq", c.seq, "error", c.dead.code, "reason", c.dead.reason)
	if _, err := uuid.Parse(c.cmd.CommandID); err != nil {
		return // no command id to answer under (the message carried none, or garbage)
	}
	b.refuse(wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: c.cmd.Kind, AppliedAt: b.now},
		http.StatusUnprocessableEntity, "command_rejected",
		"the scheduler could not apply this command and set it aside (harvest commands dead lists it): "+c.dead.reason)
}

// lastToken is the last token of a subject: a command subject's kind.
func lastToken(subject string) string {
	for i := len(subject) - 1; i >= 0; i-- {
		if subject[i] == '.' {
			return subject[i+1:]
		}
	}
	return subject
}

// resolveToExisting answers a start with an existing execution of its
// workflow_id; a keyed start's claim then points to that execution.
func (b *batch) resolveToExisting(out wire.Outcome, ref store.ClaimRef, e *store.Execution) {
	if out.Keyed {
		b.claimExec[ref] = e
	}
	b.outcome(out, e, false, false)
}

// rollBackClaim undoes the claim a refused keyed start took.
func (b *batch) rollBackClaim(ref store.ClaimRef, keyed bool) {
	if keyed {
		delete(b.claimExec, ref)
		c := b.claims[ref]
		c.ExecutionID = ""
		b.claims[ref] = c
	}
}

// settleClaims writes what the batch decided about its claims: a claim
// taken for an execution that was not created is moved to the execution
// the key resolved to, or deleted if the start was refused.
func (b *batch) settleClaims() {
	for ref, tentative := range b.tentative {
		if b.claims[ref].ExecutionID != tentative && b.claims[ref].ExecutionID != "" {
			continue // someone else's live claim: untouched
		}
		e := b.claimExec[ref]
		switch {
		case e == nil:
			b.writes.DeleteClaims = append(b.writes.DeleteClaims, ref)
		case e.ExecutionID != tentative:
			if b.writes.RepointClaims == nil {
				b.writes.RepointClaims = map[store.ClaimRef]string{}
			}
			b.writes.RepointClaims[ref] = e.ExecutionID
		}
	}
}

func (b *batch) terminate(e *store.Execution, reason string) {
	b.close(e, wire.StatusTerminated, wire.EventWorkflowTerminated, wire.WorkflowClosedAttrs{Reason: reason})
	e.WFTOutstanding, e.WFTDirty = false, false
}

func (b *batch) refuse(out wire.Outcome, status int, code, message string) {
	out.HTTPStatus, out.Error, out.Message = status, code, message
	b.addOutcome(out)
}

func (b *batch) outcome(out wire.Outcome, e *store.Execution, fresh, dedup bool) {
	out.ExecutionID, out.WorkflowName, out.WorkflowID, out.Status = e.ExecutionID, e.WorkflowName, e.WorkflowID, e.Status
	out.StartedFresh, out.Deduplicated = fresh, dedup
	b.addOutcome(out)
}

// addOutcome stores a command's outcome with the batch; the runner
// announces it once the batch commits.
func (b *batch) addOutcome(out wire.Outcome) {
	data, _ := json.Marshal(out)
	b.writes.Outcomes = append(b.writes.Outcomes, store.OutcomeRow{
		CommandID: out.CommandID, StreamSeq: out.StreamSeq, Payload: data, ExpiresAt: b.now.Add(b.outcomeTTL),
	})
}

// signalWithStart delivers a signal to the running execution of a
// workflow_id, or starts one with the signal in the same transaction.
func (b *batch) signalWithStart(c seqCommand) {
	st, sg := c.cmd.Start, c.cmd.Signal
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindSignalWithStart, AppliedAt: b.now, Keyed: sg.IdempotencyKey != ""}
	wref := store.WorkflowRef{WorkflowName: st.WorkflowName, WorkflowID: st.WorkflowID}
	prior := b.byWorkflow[wref]
	if prior != nil {
		ref := store.SignalRef{ExecutionID: prior.ExecutionID, IdempotencyKey: sg.IdempotencyKey}
		if out.Keyed && b.signalClaims[ref] {
			b.outcome(out, prior, false, false) // landed before: the same execution, nothing appended
			return
		}
		if prior.Status == wire.StatusRunning {
			b.deliverSignal(prior, sg)
			out.SignalDelivered = true
			b.outcome(out, prior, false, false)
			return
		}
		refuse := false
		switch st.ReusePolicy {
		case wire.ReuseRejectDuplicate:
			refuse = true
		case wire.ReuseAllowDuplicateFailedOnly:
			refuse = prior.Status != wire.StatusFailed && prior.Status != wire.StatusCancelled
		}
		if refuse {
			b.refuse(out, http.StatusConflict, "workflow_id_conflict",
				fmt.Sprintf("workflow %s with workflow_id %q already ran (execution %s, %s)", st.WorkflowName, st.WorkflowID, prior.ExecutionID, prior.Status))
			return
		}
	}
	id := dedup.MintExecutionID(b.shards, b.shard)
	e := &store.Execution{
		ExecutionID: id, Shard: b.shard, WorkflowName: st.WorkflowName, WorkflowID: st.WorkflowID,
		TaskQueue: st.TaskQueue, Status: wire.StatusRunning, Input: st.Input, CreatedAt: b.now, UpdatedAt: b.now,
	}
	b.execs[id] = e
	b.newExecs[id] = true
	b.byWorkflow[wref] = e
	b.writes.NewExecutions = append(b.writes.NewExecutions, e)
	b.appendEvent(e, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{
		WorkflowName: st.WorkflowName, WorkflowID: st.WorkflowID, Input: st.Input, TaskQueue: st.TaskQueue,
	})
	sg.ExecutionID = id
	b.deliverSignal(e, sg)
	out.SignalDelivered = true
	b.outcome(out, e, true, false)
}

// deliverSignal appends a signal to a running execution and records its
// key.
func (b *batch) deliverSignal(e *store.Execution, sg *wire.SignalCommand) {
	b.appendEvent(e, wire.EventSignalReceived, wire.SignalReceivedAttrs{SignalName: sg.SignalName, Payload: sg.Payload, IdempotencyKey: sg.IdempotencyKey})
	b.needWorkflowTask(e)
	if sg.IdempotencyKey != "" {
		ref := store.SignalRef{ExecutionID: e.ExecutionID, IdempotencyKey: sg.IdempotencyKey}
		b.signalClaims[ref] = true
		b.writes.SignalClaims = append(b.writes.SignalClaims, ref)
	}
}

// signal delivers a signal: appended once per (execution, key) when keyed,
// every time when not.
func (b *batch) signal(c seqCommand) {
	sg := c.cmd.Signal
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindSignal, ExecutionID: sg.ExecutionID, AppliedAt: b.now}
	e := b.execs[sg.ExecutionID]
	if e == nil {
		b.refuse(out, http.StatusNotFound, "execution_not_found", fmt.Sprintf("no execution %s", sg.ExecutionID))
		return
	}
	out.WorkflowName, out.WorkflowID, out.Status = e.WorkflowName, e.WorkflowID, e.Status
	ref := store.SignalRef{ExecutionID: sg.ExecutionID, IdempotencyKey: sg.IdempotencyKey}
	if sg.IdempotencyKey != "" && b.signalClaims[ref] {
		// Delivered before: acknowledged, even if the run has closed since.
		b.addOutcome(out)
		return
	}
	if e.Status != wire.StatusRunning {
		b.refuse(out, http.StatusConflict, "execution_terminal", fmt.Sprintf("execution %s is %s and takes no signals", e.ExecutionID, e.Status))
		return
	}
	b.deliverSignal(e, sg)
	out.SignalDelivered = true
	b.addOutcome(out)
}

func (b *batch) workflowTaskCompleted(r *wire.WorkflowTaskResult) {
	e := b.execs[r.ExecutionID]
	if e == nil || e.Status != wire.StatusRunning || !e.WFTOutstanding || e.WFTID != r.TaskID {
		b.log.Debug("dropping stale workflow task result", "execution_id", r.ExecutionID, "task_id", r.TaskID)
		return
	}
	e.WFTOutstanding = false
	b.changed[e.ExecutionID] = true
	b.writes.WorkflowTasksDone = append(b.writes.WorkflowTasksDone, store.WorkflowTaskRef{ExecutionID: e.ExecutionID, TaskID: r.TaskID})
	eager := b.eagerAttempts(r)
	// The worker's speculative next task holds only when the history it
	// ran over is the execution's: nothing (a signal, a timer, a
	// cancellation) was added since this task, and every eager attempt
	// completed.
	speculate := r.Next != nil && len(eager) > 0 && len(eager) == len(r.Eager) && r.BaseSeq == e.LastSeq && !e.WFTDirty
	for _, res := range eager {
		if res.Failure != nil {
			speculate = false
		}
	}
	for _, d := range r.Decisions {
		if e.Status != wire.StatusRunning {
			break
		}
		switch d.Type {
		case wire.DecisionScheduleActivity:
			opts := wire.ActivityOptions{Retry: wire.DefaultRetryPolicy()}
			if d.Options != nil {
				opts = *d.Options
			}
			rawOpts, _ := json.Marshal(opts)
			ref := store.ActivityRef{ExecutionID: e.ExecutionID, ActivityID: d.ActivityID}
			a := &store.Activity{
				ExecutionID: e.ExecutionID, ActivityID: d.ActivityID, ActivityName: d.ActivityName,
				Status: store.ActivityScheduled, Attempt: 1, IdempotencyKey: dedup.ActivityKeyFor(e.ExecutionID, d.ActivityID).String(),
				Input: d.Input, Options: rawOpts, ScheduledAt: b.now,
			}
			b.activities[ref] = a
			b.newActs[ref] = true
			b.writes.NewActivities = append(b.writes.NewActivities, a)
			b.appendEvent(e, wire.EventActivityScheduled, wire.ActivityScheduledAttrs{
				ActivityID: d.ActivityID, ActivityName: d.ActivityName, Input: d.Input, IdempotencyKey: a.IdempotencyKey, Options: opts,
			})
			switch {
			case eager[d.ActivityID] != nil:
				// Its attempt 1 ran on the worker; the result follows.
			case d.PossiblyStarted:
				// Attempt 1 may have run on a worker that vanished: it
				// counts, as an attempt whose worker vanished does, and
				// the next one reconciles first. An activity allowed one
				// attempt is thus never run twice.
				b.attemptFailed(e, a, &wire.Failure{Type: "WorkerLost", Message: "attempt 1 may have run eagerly on a worker that vanished before reporting it"})
			default:
				b.dispatchAttempt(e, a)
			}
		case wire.DecisionStartTimer:
			fireAt := b.now.Add(time.Duration(d.DurationMS) * time.Millisecond)
			b.appendEvent(e, wire.EventTimerStarted, wire.TimerAttrs{TimerID: d.TimerID, FireAt: &fireAt})
			attrs, _ := json.Marshal(wire.TimerAttrs{TimerID: d.TimerID})
			b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerWorkflow, FireAt: fireAt, Attrs: attrs})
		case wire.DecisionCompleteWorkflow:
			e.Result = d.Result
			b.close(e, wire.StatusCompleted, wire.EventWorkflowCompleted, wire.WorkflowClosedAttrs{Result: d.Result})
		case wire.DecisionFailWorkflow:
			e.Error, _ = json.Marshal(d.Failure)
			b.close(e, wire.StatusFailed, wire.EventWorkflowFailed, wire.WorkflowClosedAttrs{Failure: d.Failure})
		default:
			b.log.Warn("ignoring unknown decision", "execution_id", e.ExecutionID, "decision", d.Type)
		}
	}
	// The eager attempts' results follow the decisions, in the worker's
	// order, as they do in the history its next task ran over.
	for i := range r.Eager {
		res := &r.Eager[i]
		if eager[res.ActivityID] != res || e.Status != wire.StatusRunning {
			continue
		}
		ref := store.ActivityRef{ExecutionID: e.ExecutionID, ActivityID: res.ActivityID}
		a := b.activities[ref]
		if res.Failure != nil {
			b.attemptFailed(e, a, res.Failure)
			continue
		}
		a.Status = store.ActivityCompleted
		b.appendEvent(e, wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: a.ActivityID, ActivityName: a.ActivityName, Attempt: 1, Result: res.Result})
		if !speculate {
			b.needWorkflowTask(e)
		}
	}
	if speculate && e.Status == wire.StatusRunning {
		if n := r.Next; n.ExecutionID != e.ExecutionID || n.TaskID != e.WFTID+1 || n.BaseSeq != e.LastSeq {
			// Not the task the scheduler would dispatch now: dispatch it.
			b.log.Warn("dropping speculative workflow task that does not follow its history", "execution_id", e.ExecutionID, "task_id", n.TaskID, "base_seq", n.BaseSeq)
			b.needWorkflowTask(e)
			return
		}
		// The next task is the one the worker already ran: take its
		// decisions as if it had been dispatched.
		e.WFTID++
		e.WFTOutstanding = true
		b.workflowTaskCompleted(r.Next)
		return
	}
	if e.Status == wire.StatusRunning && e.WFTDirty {
		e.WFTDirty = false
		b.needWorkflowTask(e)
	}
}

// eagerAttempts returns r's eager attempts by activity id, keeping only
// attempt 1 of activities r's own decisions schedule, once each.
func (b *batch) eagerAttempts(r *wire.WorkflowTaskResult) map[int]*wire.ActivityResult {
	if len(r.Eager) == 0 {
		return nil
	}
	scheduled := map[int]bool{}
	for _, d := range r.Decisions {
		if d.Type == wire.DecisionScheduleActivity {
			scheduled[d.ActivityID] = true
		}
	}
	out := make(map[int]*wire.ActivityResult, len(r.Eager))
	for i := range r.Eager {
		res := &r.Eager[i]
		if !scheduled[res.ActivityID] || res.Attempt != 1 || out[res.ActivityID] != nil {
			b.log.Warn("ignoring eager attempt its task did not schedule", "execution_id", r.ExecutionID, "activity", res.ActivityID, "attempt", res.Attempt)
			continue
		}
		out[res.ActivityID] = res
	}
	return out
}

func (b *batch) close(e *store.Execution, status, event string, attrs wire.WorkflowClosedAttrs) {
	e.Status = status
	now := b.now
	e.ClosedAt = &now
	b.writes.ExecutionsClosed = append(b.writes.ExecutionsClosed, e.ExecutionID)
	b.appendEvent(e, event, attrs)
	if e.CompletionCallback != nil {
		payload, _ := json.Marshal(CallbackPayload{
			ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID, Status: status,
			Result: wire.OrNull(e.Result), Error: wire.OrNull(e.Error), ClosedAt: now,
		})
		b.writes.Callbacks = append(b.writes.Callbacks, store.CallbackDelivery{ExecutionID: e.ExecutionID, URL: *e.CompletionCallback, Payload: payload})
	}
}

// CallbackPayload is the body of a completion callback.
type CallbackPayload struct {
	ExecutionID  string          `json:"execution_id"`
	WorkflowName string          `json:"workflow_name"`
	WorkflowID   string          `json:"workflow_id"`
	Status       string          `json:"status"`
	Result       json.RawMessage `json:"result"`
	Error        json.RawMessage `json:"error"`
	ClosedAt     time.Time       `json:"closed_at"`
}

func (b *batch) activityResult(r *wire.ActivityResult) {
	ref := store.ActivityRef{ExecutionID: r.ExecutionID, ActivityID: r.ActivityID}
	a, e := b.activities[ref], b.execs[r.ExecutionID]
	if a == nil || e == nil || a.Status != store.ActivityScheduled || a.Attempt != r.Attempt || e.Status != wire.StatusRunning {
		b.log.Debug("dropping stale activity result", "execution_id", r.ExecutionID, "activity", r.ActivityID, "attempt", r.Attempt)
		return
	}
	if r.Failure != nil {
		b.attemptFailed(e, a, r.Failure)
		return
	}
	a.Status = store.ActivityCompleted
	b.activityChanged(ref, a)
	b.writes.ActivityDone = append(b.writes.ActivityDone, ref)
	b.appendEvent(e, wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: a.ActivityID, ActivityName: a.ActivityName, Attempt: r.Attempt, Result: r.Result})
	b.needWorkflowTask(e)
}

func (b *batch) activityChanged(ref store.ActivityRef, a *store.Activity) {
	if !b.newActs[ref] {
		b.writes.UpdatedActivities = append(b.writes.UpdatedActivities, a)
	}
}

func activityOptions(a *store.Activity) wire.ActivityOptions {
	opts := wire.ActivityOptions{Retry: wire.DefaultRetryPolicy()}
	if len(a.Options) > 0 {
		_ = json.Unmarshal(a.Options, &opts)
	}
	return opts
}

// attemptFailed decides what follows a failed attempt: the next attempt
// after the policy's backoff, on a durable timer, or the activity's
// failure, which the workflow sees.
func (b *batch) attemptFailed(e *store.Execution, a *store.Activity, f *wire.Failure) {
	ref := store.ActivityRef{ExecutionID: a.ExecutionID, ActivityID: a.ActivityID}
	opts := activityOptions(a)
	delay := opts.Retry.Delay(a.Attempt)
	retry := opts.Retry.Retries(a.Attempt, f.Type, f.NonRetryable)
	if total := opts.ScheduleToClose(); total > 0 && b.now.Add(delay).After(a.ScheduledAt.Add(total)) {
		retry = false
		if f.Type == "StartToCloseTimeout" {
			// The attempt ran out of time and the activity has none left
			// for another: whichever side noticed first (the worker at its
			// deadline, or the timer), the bound that ended it is the
			// schedule-to-close one.
			f = &wire.Failure{Type: "ScheduleToCloseTimeout", Message: fmt.Sprintf("activity did not finish within its schedule-to-close timeout of %s", total), NonRetryable: true}
		}
	}
	if retry {
		// An attempt that ended without a result may have had its effect:
		// the next one reconciles first.
		a.OutcomeUnknown = outcomeUnknown(f.Type)
		// The failed attempt is over: the next one's number is taken now,
		// so a late result or heartbeat of the old one is stale.
		a.Attempt++
		b.activityChanged(ref, a)
		attrs, _ := json.Marshal(activityTimerAttrs{ActivityID: a.ActivityID, Attempt: a.Attempt})
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: a.ExecutionID, Kind: store.TimerActivityRetry, FireAt: b.now.Add(delay), Attrs: attrs})
		b.log.Debug("activity attempt failed; retrying", "execution_id", a.ExecutionID, "activity", a.ActivityName, "attempt", a.Attempt-1, "retry_in", delay, "err", f.Message)
		return
	}
	a.Status = store.ActivityFailed
	b.activityChanged(ref, a)
	b.writes.ActivityDone = append(b.writes.ActivityDone, ref)
	b.appendEvent(e, wire.EventActivityFailed, wire.ActivityClosedAttrs{ActivityID: a.ActivityID, ActivityName: a.ActivityName, Attempt: a.Attempt, Failure: f})
	b.needWorkflowTask(e)
}

// cancel closes a running execution as Cancelled, and tells workers, so
// they cancel the contexts of its running activities.
func (b *batch) cancel(c seqCommand) {
	cc := c.cmd.Cancel
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindCancel, ExecutionID: cc.ExecutionID, AppliedAt: b.now}
	e := b.execs[cc.ExecutionID]
	if e == nil {
		b.refuse(out, http.StatusNotFound, "execution_not_found", fmt.Sprintf("no execution %s", cc.ExecutionID))
		return
	}
	if e.Status == wire.StatusRunning {
		reason := cc.Reason
		if reason == "" {
			reason = "cancelled"
		}
		e.Error, _ = json.Marshal(wire.Failure{Type: "Cancelled", Message: reason})
		b.close(e, wire.StatusCancelled, wire.EventWorkflowCancelled, wire.WorkflowClosedAttrs{Reason: reason})
		e.WFTOutstanding, e.WFTDirty = false, false
		data, _ := json.Marshal(map[string]string{"execution_id": e.ExecutionID, "reason": reason})
		b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
			Shard: b.shard, Subject: streams.CancelledSubject(e.ExecutionID), MsgID: "cancel:" + e.ExecutionID, Payload: data,
		})
	}
	// Cancelling a closed execution changes nothing: the answer says how it
	// ended.
	b.outcome(out, e, false, false)
}

// outcomeUnknown says whether a failure of type typ leaves the attempt's
// effect unknown: it ended without the activity reporting.
func outcomeUnknown(typ string) bool {
	switch typ {
	case "StartToCloseTimeout", "HeartbeatTimeout", "WorkerShutdown", "ReconcileFailed", "WorkerLost":
		return true
	}
	return false
}

// heartbeat records that the current attempt is alive, with its details.
func (b *batch) heartbeat(h *wire.ActivityHeartbeat) {
	ref := store.ActivityRef{ExecutionID: h.ExecutionID, ActivityID: h.ActivityID}
	a := b.activities[ref]
	if a == nil || a.Status != store.ActivityScheduled || a.Attempt != h.Attempt {
		return
	}
	now := b.now
	a.LastHeartbeatAt = &now
	if len(h.Details) > 0 {
		a.HeartbeatDetails = h.Details
	}
	b.activityChanged(ref, a)
}

// activityTimerAttrs are the attributes of activity timers.
type activityTimerAttrs struct {
	ActivityID int `json:"activity_id"`
	Attempt    int `json:"attempt"`
}

// dispatchAttempt publishes the activity's current attempt and sets the
// timer that ends it if no result comes in time: the scheduler owns
// attempts, so a vanished worker's attempt is retried, never run twice.
func (b *batch) dispatchAttempt(e *store.Execution, a *store.Activity) {
	opts := activityOptions(a)
	deadline := b.now.Add(opts.StartToClose())
	if total := opts.ScheduleToClose(); total > 0 && a.ScheduledAt.Add(total).Before(deadline) {
		deadline = a.ScheduledAt.Add(total)
	}
	task := wire.ActivityTask{
		ExecutionID: e.ExecutionID, Shard: b.shard, WorkflowName: e.WorkflowName, TaskQueue: e.TaskQueue,
		ActivityID: a.ActivityID, ActivityName: a.ActivityName, Input: a.Input, IdempotencyKey: a.IdempotencyKey,
		Attempt: a.Attempt, ScheduledAt: a.ScheduledAt, Deadline: deadline,
		HeartbeatTimeoutMS: opts.HeartbeatTimeoutMS, HeartbeatDetails: a.HeartbeatDetails, PreviousOutcomeUnknown: a.OutcomeUnknown,
	}
	data, _ := json.Marshal(task)
	if b.maxTask > 0 && len(data) > b.maxTask {
		// Every attempt's task would be as large (its input): the
		// activity fails, and the workflow sees it.
		b.log.Error("failing an activity whose task is too large for NATS", "execution_id", e.ExecutionID, "activity", a.ActivityName,
			"bytes", len(data), "limit", b.maxTask)
		b.attemptFailed(e, a, &wire.Failure{Type: "ActivityTaskTooLarge", NonRetryable: true,
			Message: fmt.Sprintf("the activity's task (its input) is %d bytes: more than the %d NATS carries", len(data), b.maxTask)})
		return
	}
	b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
		Shard: b.shard, Subject: streams.TaskSubject(e.TaskQueue, wire.TaskActivity),
		MsgID: fmt.Sprintf("act:%s:%d:%d", e.ExecutionID, a.ActivityID, a.Attempt), Payload: data,
	})
	attrs, _ := json.Marshal(activityTimerAttrs{ActivityID: a.ActivityID, Attempt: a.Attempt})
	b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerActivityTimeout, FireAt: deadline, Attrs: attrs})
	if hb := time.Duration(opts.HeartbeatTimeoutMS) * time.Millisecond; hb > 0 {
		now := b.now
		a.LastHeartbeatAt = &now
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerActivityHeartbeat, FireAt: b.now.Add(hb), Attrs: attrs})
	}
}

// activityTimer handles an attempt's timeout or the end of a retry
// backoff; timers of attempts that finished since are ignored.
func (b *batch) activityTimer(e *store.Execution, tm store.Timer) {
	var at activityTimerAttrs
	if err := json.Unmarshal(tm.Attrs, &at); err != nil {
		b.log.Warn("dropping undecodable activity timer", "execution_id", tm.ExecutionID, "err", err)
		return
	}
	ref := store.ActivityRef{ExecutionID: tm.ExecutionID, ActivityID: at.ActivityID}
	a := b.activities[ref]
	if a == nil || a.Status != store.ActivityScheduled {
		return
	}
	switch tm.Kind {
	case store.TimerActivityTimeout:
		if a.Attempt != at.Attempt {
			return
		}
		typ, msg := "StartToCloseTimeout", fmt.Sprintf("attempt %d did not finish within its start-to-close timeout", a.Attempt)
		if total := activityOptions(a).ScheduleToClose(); total > 0 && !b.now.Before(a.ScheduledAt.Add(total)) {
			typ, msg = "ScheduleToCloseTimeout", fmt.Sprintf("activity did not finish within its schedule-to-close timeout of %s", total)
		}
		b.attemptFailed(e, a, &wire.Failure{Type: typ, Message: msg, NonRetryable: typ == "ScheduleToCloseTimeout"})
	case store.TimerActivityHeartbeat:
		if a.Attempt != at.Attempt {
			return
		}
		hb := time.Duration(activityOptions(a).HeartbeatTimeoutMS) * time.Millisecond
		last := a.ScheduledAt
		if a.LastHeartbeatAt != nil {
			last = *a.LastHeartbeatAt
		}
		if due := last.Add(hb); b.now.Before(due) {
			// Heartbeats came in: check again when the newest one runs out.
			b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: a.ExecutionID, Kind: store.TimerActivityHeartbeat, FireAt: due, Attrs: tm.Attrs})
			return
		}
		b.attemptFailed(e, a, &wire.Failure{Type: "HeartbeatTimeout", Message: fmt.Sprintf("attempt %d sent no heartbeat for %s", a.Attempt, hb)})
	case store.TimerActivityRetry:
		if a.Attempt != at.Attempt {
			return
		}
		b.activityChanged(ref, a)
		b.dispatchAttempt(e, a)
	}
}

func (b *batch) appendEvent(e *store.Execution, typ string, attrs any) {
	data, err := json.Marshal(attrs)
	if err != nil {
		data = []byte(`{}`)
	}
	e.LastSeq++
	e.UpdatedAt = b.now
	ev := wire.Event{Seq: e.LastSeq, Type: typ, At: b.now, Attrs: data}
	b.newEvents[e.ExecutionID] = append(b.newEvents[e.ExecutionID], ev)
	b.writes.Events = append(b.writes.Events, store.EventRow{ExecutionID: e.ExecutionID, Event: ev})
	b.changed[e.ExecutionID] = true
}

// needWorkflowTask asks for a workflow task for e: at the end of the batch
// if none is outstanding, else as soon as the outstanding one completes.
func (b *batch) needWorkflowTask(e *store.Execution) {
	if e.WFTOutstanding {
		e.WFTDirty = true
		b.changed[e.ExecutionID] = true
		return
	}
	if !b.needTaskSet[e.ExecutionID] {
		b.needTaskSet[e.ExecutionID] = true
		b.needTask = append(b.needTask, e.ExecutionID)
	}
}

// scheduleWorkflowTasks puts one workflow task per execution that needs one
// into the outbox, carrying the execution's whole history.
func (b *batch) scheduleWorkflowTasks(ctx context.Context, tx store.Tx) error {
	var load []string
	for _, id := range b.needTask {
		if !b.newExecs[id] && b.execs[id].Status == wire.StatusRunning {
			load = append(load, id)
		}
	}
	stored, err := store.LoadHistories(ctx, tx, load)
	if err != nil {
		return err
	}
	for _, id := range b.needTask {
		e := b.execs[id]
		if e.Status != wire.StatusRunning || e.WFTOutstanding {
			continue
		}
		e.WFTID++
		e.WFTOutstanding = true
		e.WFTDirty = false
		b.changed[id] = true
		task := wire.WorkflowTask{
			ExecutionID: id, Shard: b.shard, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID,
			TaskQueue: e.TaskQueue, TaskID: e.WFTID, History: append(stored[id], b.newEvents[id]...),
		}
		data, err := json.Marshal(task)
		if err != nil {
			return fmt.Errorf("encode workflow task of %s: %w", id, err)
		}
		if b.tooLarge(e, data) {
			continue
		}
		b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
			Shard: b.shard, Subject: streams.TaskSubject(e.TaskQueue, wire.TaskWorkflow),
			MsgID: workflowTaskMsgID(id, e.WFTID, 0), Payload: data,
		})
		b.workflowTaskDeadline(id, wftTimerAttrs{TaskID: e.WFTID}, b.wftTimeout)
	}
	return nil
}

// tooLarge fails e, and says so, when its workflow task (data) is larger
// than NATS carries: the task carries the whole history, which only
// grows, so no later task would fit either, and publishing it would fail
// the shard's every attempt.
func (b *batch) tooLarge(e *store.Execution, data []byte) bool {
	if b.maxTask <= 0 || len(data) <= b.maxTask {
		return false
	}
	f := wire.Failure{Type: "WorkflowTaskTooLarge", NonRetryable: true,
		Message: fmt.Sprintf("the execution's workflow task (its history) is %d bytes: more than the %d NATS carries", len(data), b.maxTask)}
	b.log.Error("failing an execution whose workflow task is too large for NATS", "execution_id", e.ExecutionID, "workflow", e.WorkflowName,
		"bytes", len(data), "limit", b.maxTask)
	e.WFTOutstanding, e.WFTDirty = false, false
	e.Error, _ = json.Marshal(f)
	b.close(e, wire.StatusFailed, wire.EventWorkflowFailed, wire.WorkflowClosedAttrs{Failure: &f})
	return true
}

// DefaultWorkflowTaskTimeout is how long a dispatched workflow task may go
// without completing before the scheduler looks for it (Config).
const DefaultWorkflowTaskTimeout = 10 * time.Second

// maxWorkflowTaskCheck caps the wait between two looks at a workflow task
// the task stream still holds.
const maxWorkflowTaskCheck = 5 * time.Minute

// wftTimerAttrs are the attributes of a workflow task's deadline.
type wftTimerAttrs struct {
	TaskID int `json:"task_id"`
	// Redispatch counts the task's dispatches after its deadline; Checks
	// the looks that found it still queued, which space the next look.
	Redispatch int `json:"redispatch,omitempty"`
	Checks     int `json:"checks,omitempty"`
}

// workflowTaskMsgID is the Nats-Msg-Id of a workflow task: a task
// dispatched again gets a fresh one, so the broker's duplicate window does
// not drop it.
func workflowTaskMsgID(executionID string, taskID, redispatch int) string {
	if redispatch == 0 {
		return fmt.Sprintf("wft:%s:%d", executionID, taskID)
	}
	return fmt.Sprintf("wft:%s:%d:r%d", executionID, taskID, redispatch)
}

// parseWorkflowTaskMsgID is workflowTaskMsgID's inverse; ok is false for
// other message ids.
func parseWorkflowTaskMsgID(msgID string) (executionID string, taskID int, ok bool) {
	rest, found := strings.CutPrefix(msgID, "wft:")
	if !found || len(rest) < 38 || rest[36] != ':' {
		return "", 0, false
	}
	executionID, rest = rest[:36], rest[37:]
	if i := strings.IndexByte(rest, ':'); i >= 0 {
		rest = rest[:i]
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return "", 0, false
	}
	return executionID, n, true
}

func (b *batch) workflowTaskDeadline(executionID string, at wftTimerAttrs, after time.Duration) {
	attrs, _ := json.Marshal(at)
	b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: executionID, Kind: store.TimerWorkflowTask, FireAt: b.now.Add(after), Attrs: attrs})
}

// workflowTaskTimer handles a workflow task's deadline. A task that
// completed since is done with. One the task stream still holds has not
// been lost (no worker took it yet, or one is running it and keeps it
// alive): it is looked at again later, the wait doubling. One the stream
// no longer holds, without a completion, was lost with its message or its
// result: it is dispatched again, under a fresh message id, marked so
// that its worker runs nothing eagerly.
func (b *batch) workflowTaskTimer(ctx context.Context, e *store.Execution, tm store.Timer, queued func(context.Context, string, int) bool, again map[string]wftTimerAttrs) {
	var at wftTimerAttrs
	if err := json.Unmarshal(tm.Attrs, &at); err != nil {
		b.log.Warn("dropping undecodable workflow task deadline", "execution_id", tm.ExecutionID, "err", err)
		return
	}
	if !e.WFTOutstanding || e.WFTID != at.TaskID {
		return
	}
	if queued != nil && queued(ctx, e.ExecutionID, at.TaskID) {
		at.Checks++
		b.workflowTaskDeadline(e.ExecutionID, at, min(b.wftTimeout<<min(at.Checks, 16), maxWorkflowTaskCheck))
		return
	}
	at.Redispatch++
	at.Checks = 0
	b.log.Warn("workflow task not completed by its deadline and no longer in the task stream: dispatching it again",
		"execution_id", e.ExecutionID, "workflow", e.WorkflowName, "task_id", at.TaskID, "redispatch", at.Redispatch)
	again[e.ExecutionID] = at
}

// redispatchWorkflowTasks dispatches again the outstanding workflow tasks
// of again, with their histories.
func (b *batch) redispatchWorkflowTasks(ctx context.Context, tx store.Tx, again map[string]wftTimerAttrs) error {
	if len(again) == 0 {
		return nil
	}
	ids := make([]string, 0, len(again))
	for id := range again {
		ids = append(ids, id)
	}
	stored, err := store.LoadHistories(ctx, tx, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		e, at := b.execs[id], again[id]
		task := wire.WorkflowTask{
			ExecutionID: id, Shard: b.shard, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID,
			TaskQueue: e.TaskQueue, TaskID: at.TaskID, History: append(stored[id], b.newEvents[id]...), Redispatch: at.Redispatch,
		}
		data, err := json.Marshal(task)
		if err != nil {
			return fmt.Errorf("encode workflow task of %s: %w", id, err)
		}
		if b.tooLarge(e, data) {
			b.changed[id] = true
			continue
		}
		b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
			Shard: b.shard, Subject: streams.TaskSubject(e.TaskQueue, wire.TaskWorkflow),
			MsgID: workflowTaskMsgID(id, at.TaskID, at.Redispatch), Payload: data,
		})
		b.workflowTaskDeadline(id, at, b.wftTimeout)
	}
	return nil
}

// fireTimers applies due timers in tx: each start timer asks for its
// execution's first workflow task.
func fireTimers(ctx context.Context, tx store.Tx, env applyEnv, applied int64, timers []store.Timer) (*store.Writes, error) {
	shard, log := env.shard, env.log
	b := &batch{
		shard: shard, shards: env.shards, now: time.Now().UTC(), log: log, wftTimeout: cmp.Or(env.wftTimeout, DefaultWorkflowTaskTimeout), maxTask: env.maxTask,
		newExecs: map[string]bool{}, changed: map[string]bool{}, newEvents: map[string][]wire.Event{}, needTaskSet: map[string]bool{},
		newActs: map[store.ActivityRef]bool{},
	}
	again := map[string]wftTimerAttrs{}
	b.writes.Shard, b.writes.AppliedSeq = shard, applied
	ids := make([]string, 0, len(timers))
	for _, tm := range timers {
		ids = append(ids, tm.ExecutionID)
		b.writes.FiredTimers = append(b.writes.FiredTimers, tm.ID)
	}
	var err error
	if b.execs, err = store.LoadExecutions(ctx, tx, ids); err != nil {
		return nil, err
	}
	var actRefs []store.ActivityRef
	for _, tm := range timers {
		if tm.Kind == store.TimerActivityTimeout || tm.Kind == store.TimerActivityRetry || tm.Kind == store.TimerActivityHeartbeat {
			var at activityTimerAttrs
			if json.Unmarshal(tm.Attrs, &at) == nil {
				actRefs = append(actRefs, store.ActivityRef{ExecutionID: tm.ExecutionID, ActivityID: at.ActivityID})
			}
		}
	}
	if b.activities, err = store.LoadActivities(ctx, tx, actRefs); err != nil {
		return nil, err
	}
	for _, tm := range timers {
		e := b.execs[tm.ExecutionID]
		if e == nil || e.Status != wire.StatusRunning {
			continue
		}
		switch tm.Kind {
		case store.TimerStart:
			b.needWorkflowTask(e)
		case store.TimerWorkflow:
			var a wire.TimerAttrs
			if err := json.Unmarshal(tm.Attrs, &a); err != nil {
				log.Warn("dropping undecodable timer", "execution_id", tm.ExecutionID, "err", err)
				continue
			}
			b.appendEvent(e, wire.EventTimerFired, wire.TimerAttrs{TimerID: a.TimerID})
			b.needWorkflowTask(e)
		case store.TimerActivityTimeout, store.TimerActivityRetry, store.TimerActivityHeartbeat:
			b.activityTimer(e, tm)
		case store.TimerWorkflowTask:
			b.workflowTaskTimer(ctx, e, tm, env.taskQueued, again)
		default:
			log.Warn("dropping timer of unknown kind", "execution_id", tm.ExecutionID, "kind", tm.Kind)
		}
	}
	if err := b.scheduleWorkflowTasks(ctx, tx); err != nil {
		return nil, err
	}
	if err := b.redispatchWorkflowTasks(ctx, tx, again); err != nil {
		return nil, err
	}
	for id := range b.changed {
		b.writes.UpdatedExecutions = append(b.writes.UpdatedExecutions, b.execs[id])
	}
	return &b.writes, nil
}
