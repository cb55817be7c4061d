package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/store"
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
	// trace is the W3C traceparent of the command's apply span, "" when
	// tracing is off: the tasks the command leads to carry it.
	trace string
}

// batch is the in-memory state of one apply transaction: the rows it read,
// the rows it changes, and what it publishes after the commit.
type batch struct {
	shard  int
	shards int
	layout placement.Layout
	now    time.Time
	window time.Duration
	// outcomeTTL is how long the batch's outcomes stay readable.
	outcomeTTL time.Duration
	// wftTimeout is a dispatched workflow task's deadline.
	wftTimeout time.Duration
	// stickyState is applyEnv's.
	stickyState func(ctx context.Context, e *store.Execution, taskID int) stickyState
	// retention sets a closing execution's prune_after.
	retention store.Retention
	// cancelGrace, timeouts and knownWorkflow are applyEnv's.
	cancelGrace   map[string]time.Duration
	timeouts      map[string]WorkflowTimeouts
	searchAttrs   searchattr.Schema
	knownWorkflow func(name, taskQueue string) bool
	// lastOut is the outcome of the command applied last, for the
	// reports a child's start or a workflow's signal sends back.
	lastOut wire.Outcome
	// pinned are the workflows whose starts are pinned to a build unless
	// they say otherwise (applyEnv.pinned).
	pinned map[string]bool
	// chainsLatest are the newest runs of the chains of continued runs
	// the batch's executions belong to, by chain (read for the runs that
	// continued as new).
	chainsLatest map[string]*store.Execution
	// loadHistories reads stored history while commands apply
	// (continueAsNew); err is a failure of it, which fails the batch.
	loadHistories func(from map[string]int) (map[string][]wire.Event, error)
	err           error
	// maxTask is the largest task NATS carries; 0 means no limit.
	maxTask int
	// limits are what the executions' histories are held to
	// (checkHistories), with their defaults.
	limits HistoryLimits
	log    *slog.Logger
	// debug says whether log takes debug lines, which tell each applied
	// command and history event; cmd is the command being applied, for
	// the log (logFor).
	debug bool
	cmd   *wire.Command

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
	// updateKeys holds the updates the batch's keyed updates name, by key
	// in their chain, as they stand.
	updateKeys map[store.UpdateKeyRef]string

	// policyKeys holds the state of the start policy keys the batch's
	// starts under a policy use; priorOutcomes the outcomes those starts'
	// command ids had before the batch, policyCmds the command ids the
	// batch applied (see policyStart).
	policyKeys map[store.PolicyRef]*store.PolicyState
	// resetKeysRead are the concurrency keys read for the batch's
	// resets (concurrencyRetake).
	resetKeysRead map[store.PolicyRef]bool
	// schedules are the schedules the batch read (nil: read, and absent
	// or deleted), schedChanged those it changed; priorFires the ledger
	// rows read or written that name an execution.
	// concurrency, while a start under a concurrency policy is applied,
	// is the policy its execution runs under; concurrencyPending says the
	// key has no free slot, so the execution is created Pending.
	concurrency        *store.ConcurrencyRef
	concurrencyPending bool
	schedules          map[string]*store.Schedule
	schedChanged       map[string]bool
	priorFires         map[store.FireRef]*store.ScheduleFire
	priorOutcomes      map[string]wire.Outcome
	policyCmds         map[string]bool

	// curTrace is the trace of the command being applied; traces holds,
	// by execution, the trace of the last command that changed it, which
	// the tasks dispatched for it carry (see traceOf).
	curTrace string
	traces   map[string]string

	writes store.Writes
}

// applyEnv is what an apply transaction knows of its scheduler and shard.
type applyEnv struct {
	shard  int
	shards int
	// layout mints the ids of the executions the shard creates so that
	// they name its store; zero is a single store of shards.
	layout placement.Layout
	// window is the start idempotency window.
	window time.Duration
	// outcomeTTL is how long outcomes stay readable; zero means
	// broker.DefaultOutcomeTTL.
	outcomeTTL time.Duration
	// wftTimeout is how long a dispatched workflow task may go without
	// completing before the scheduler looks for it; zero means
	// DefaultWorkflowTaskTimeout.
	wftTimeout time.Duration
	// taskQueued says whether the task stream still holds the execution's
	// workflow task taskID (a worker has it, or will get it). Nil, or
	// false, lets a workflow task past its deadline be dispatched again.
	taskQueued func(ctx context.Context, e *store.Execution, taskID int) bool
	// stickyState says what became of a sticky workflow task (sticky.go);
	// nil moves every sticky task whose deadline passes.
	stickyState func(ctx context.Context, e *store.Execution, taskID int) stickyState
	// maxTask is the largest task payload NATS carries (its max payload,
	// less room for headers); 0 means no limit. A larger workflow task
	// fails its execution, a larger activity task its activity.
	maxTask int
	// retention is how long closed executions stay.
	retention store.Retention
	// cancelGrace bounds, by workflow, how long an execution asked to
	// cancel may run before it is terminated (Config.CancelGraceByWorkflow).
	cancelGrace map[string]time.Duration
	// timeouts are the workflows' configured run and execution timeouts
	// (Config.TimeoutsByWorkflow).
	timeouts map[string]WorkflowTimeouts
	// searchAttrs are the workflows' declared search attributes
	// (Config.SearchAttributes).
	searchAttrs searchattr.Schema
	// knownWorkflow says whether a child workflow's start can run: a
	// live worker serves its workflow on its queue, or the configuration
	// declares it there; nil takes every start as known.
	knownWorkflow func(name, taskQueue string) bool
	// pinned are the workflows configured with versioning: pinned
	// (Config.PinnedWorkflows): a start of one that says no versioning is
	// pinned.
	pinned map[string]bool
	// historyLimits are what the executions' histories are held to;
	// zero fields mean the defaults.
	historyLimits HistoryLimits
	log           *slog.Logger
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

// mintWorkflowID returns a fresh workflow_id of workflowName that routes to
// the batch's shard.
func (b *batch) mintWorkflowID(workflowName string) string {
	if b.layout.Set == nil {
		return placement.MintWorkflowID(b.shards, b.shard, workflowName)
	}
	return b.layout.MintWorkflowID(b.shard, workflowName)
}

// mintExecutionID returns a fresh id of an execution of the batch's shard.
func (b *batch) mintExecutionID() string {
	if b.layout.Set == nil {
		return placement.MintExecutionID(b.shards, b.shard)
	}
	return b.layout.MintExecutionID(b.shard)
}

func (env applyEnv) outcomeTTLOrDefault() time.Duration {
	return cmp.Or(env.outcomeTTL, broker.DefaultOutcomeTTL)
}

func (env applyEnv) wftTimeoutOrDefault() time.Duration {
	return cmp.Or(env.wftTimeout, DefaultWorkflowTaskTimeout)
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

// historyLoader loads the stored histories of executions, each from the
// event whose seq from gives it on.
type historyLoader func(ctx context.Context, from map[string]int) (map[string][]wire.Event, error)

// txHistories loads histories from PostgreSQL in tx.
func txHistories(tx store.Tx) historyLoader {
	return func(ctx context.Context, from map[string]int) (map[string][]wire.Event, error) {
		return store.LoadHistories(ctx, tx, from)
	}
}

// apply runs one batch of commands in tx and returns the writes it made,
// including the outbox rows to publish after the commit. Commands at or
// below applied were applied before and are skipped.
func apply(ctx context.Context, tx store.Tx, env applyEnv, applied int64, cmds []seqCommand) (*store.Writes, error) {
	shard := env.shard
	b := newBatch(ctx, env, time.Now().UTC(), applied)

	// Gather what the batch reads, so each table is read once.
	g := gathering{b: b, readFree: env.known != nil && env.lock != nil, seenWf: map[store.WorkflowRef]bool{},
		seenExecIDs: map[string]bool{}, seenPolicy: map[store.PolicyRef]bool{}}
	var pending []seqCommand
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
		if k := commandKinds[c.cmd.Kind]; k.gather != nil {
			k.gather(&g, c)
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
		if !g.readFree || len(g.actRefs) > 0 || len(g.sigRefs) > 0 || !b.assume(env, applied, g.execIDs, g.newClaims, g.wfRefs) {
			return nil, errNeedsReads
		}
		return b.applyAll(ctx, txHistories(tx), pending)
	}

	// The reads go in one round trip (after the shard's lock, when apply
	// takes it); only what they lead to (executions that claims point to,
	// signal-with-start keys) needs a second.
	var (
		reads     store.Reads
		lockedSeq int64
		latest    = make(map[store.WorkflowRef]*store.Execution, len(g.wfRefs))
	)
	b.claims = make(map[store.ClaimRef]store.Claim, len(g.newClaims))
	b.execs = make(map[string]*store.Execution, len(g.execIDs))
	b.activities = make(map[store.ActivityRef]*store.Activity, len(g.actRefs))
	b.signalClaims = make(map[store.SignalRef]bool, len(g.sigRefs))
	if env.lock != nil {
		reads.LockShard(env.lock.owner, env.lock.lease, &lockedSeq)
	}
	reads.ClaimStartKeys(g.newClaims, env.window, b.claims)
	reads.LoadExecutions(g.execIDs, b.execs)
	reads.LatestByWorkflowID(g.wfRefs, latest)
	reads.LoadActivities(g.actRefs, b.activities)
	reads.LoadSignalClaims(g.sigRefs, b.signalClaims)
	reads.LoadPolicyKeys(g.policyRefs, b.policyKeys)
	reads.LoadOutcomes(g.policyCmdIDs, b.priorOutcomes)
	reads.LoadSchedules(g.scheduleIDs, b.schedules)
	reads.LoadFires(g.fireRanges, b.priorFires)
	if err := reads.Send(ctx, tx); err != nil {
		return nil, err
	}
	if env.lock != nil && lockedSeq != applied {
		return nil, fmt.Errorf("shard %d: applied %d, expected %d: %w", shard, lockedSeq, applied, errAppliedMoved)
	}
	if err := store.ClaimsMissed(ctx, tx, g.newClaims, b.claims); err != nil {
		return nil, err
	}
	var more []string
	for ref, c := range b.claims {
		if c.ExecutionID != b.tentative[ref] && !g.seenExecIDs[c.ExecutionID] {
			g.seenExecIDs[c.ExecutionID] = true
			more = append(more, c.ExecutionID)
		}
	}
	reads.LoadExecutions(more, b.execs)
	// A signal-with-start's key is checked against the execution its
	// workflow_id resolves to; a signal's against its execution's chain
	// of continued runs, whose newest run it reaches.
	var swsRefs []store.SignalRef
	var updRefs []store.UpdateKeyRef
	chains := map[string]bool{}
	for _, c := range pending {
		switch {
		case c.cmd.Kind == wire.KindUpdate:
			if e := b.execs[c.cmd.Update.ExecutionID]; e != nil && c.cmd.Update.IdempotencyKey != "" {
				updRefs = append(updRefs, store.UpdateKeyRef{ChainID: e.Chain(), IdempotencyKey: c.cmd.Update.IdempotencyKey})
			}
		case c.cmd.Kind == wire.KindSignalWithStart && c.cmd.Signal.IdempotencyKey != "":
			if e := latest[store.WorkflowRef{WorkflowName: c.cmd.Start.WorkflowName, WorkflowID: c.cmd.Start.WorkflowID}]; e != nil {
				swsRefs = append(swsRefs, store.SignalRef{ExecutionID: e.Chain(), IdempotencyKey: c.cmd.Signal.IdempotencyKey})
			}
		case c.cmd.Kind == wire.KindSignal:
			e := b.execs[c.cmd.Signal.ExecutionID]
			if c.cmd.Signal.ExecutionID == "" {
				// A workflow code's signal to a workflow_id: its latest
				// execution's chain.
				e = latest[store.WorkflowRef{WorkflowName: c.cmd.Signal.WorkflowName, WorkflowID: c.cmd.Signal.WorkflowID}]
			}
			if key := c.cmd.Signal.IdempotencyKey; e != nil && key != "" && (e.Chain() != e.ExecutionID || c.cmd.Signal.ExecutionID == "") {
				swsRefs = append(swsRefs, store.SignalRef{ExecutionID: e.Chain(), IdempotencyKey: key})
			}
		}
	}
	// A reset of a closed run under a concurrency policy takes a slot
	// of its key again: the key's state is read, for a run that is
	// running too, which may close earlier in the batch.
	var resetKeys []store.PolicyRef
	for _, c := range pending {
		if c.cmd.Kind != wire.KindReset {
			continue
		}
		if e := b.execs[c.cmd.Reset.ExecutionID]; e != nil && e.Concurrency != nil {
			ref := concurrencyRef(e)
			if b.resetKeysRead == nil {
				b.resetKeysRead = map[store.PolicyRef]bool{}
			}
			if !b.resetKeysRead[ref] {
				b.resetKeysRead[ref] = true
				if b.policyKeys[ref] == nil {
					resetKeys = append(resetKeys, ref)
				}
			}
		}
	}
	reads.LoadPolicyKeys(resetKeys, b.policyKeys)
	// A signal, cancel or terminate naming a run that continued as new,
	// or that a reset replaced, reaches the newest run of its chain.
	for _, e := range b.execs {
		if e.ContinuedAs != "" {
			chains[e.Chain()] = true
		}
	}
	reads.LoadSignalClaims(swsRefs, b.signalClaims)
	reads.LoadUpdateKeys(updRefs, b.updateKeys)
	b.chainsLatest = make(map[string]*store.Execution, len(chains))
	reads.LoadChainsLatest(slices.Collect(maps.Keys(chains)), b.chainsLatest)
	if err := reads.Send(ctx, tx); err != nil {
		return nil, err
	}
	for chain, e := range b.chainsLatest {
		if have, ok := b.execs[e.ExecutionID]; ok {
			b.chainsLatest[chain] = have
		} else {
			b.execs[e.ExecutionID] = e
		}
	}
	for ref, e := range latest {
		if have, ok := b.execs[e.ExecutionID]; ok {
			e = have // the row locked by LoadExecutions is the one to change
		} else {
			b.execs[e.ExecutionID] = e
		}
		b.byWorkflow[ref] = e
	}
	return b.applyAll(ctx, txHistories(tx), pending)
}

// assume fills in, for a read-free apply, what the reads would have
// found if the preconditions it records hold: the executions from
// env.known, every key's claim taken by the batch, no execution under any
// workflow id it starts. It reports false if an execution is not known.
func (b *batch) assume(env applyEnv, applied int64, execIDs []string, claims []store.NewClaim, wfRefs []store.WorkflowRef) bool {
	for _, id := range execIDs {
		e, ok := env.known.get(id)
		if !ok || e.Status == wire.StatusContinuedAsNew {
			// A run that continued: what a command to it reaches is read.
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
func (b *batch) applyAll(ctx context.Context, histories historyLoader, pending []seqCommand) (*store.Writes, error) {
	b.loadHistories = historiesIn(ctx, histories)
	for _, c := range pending {
		b.cmd = &c.cmd
		b.curTrace = c.trace
		if k, ok := commandKinds[c.cmd.Kind]; ok {
			b.lastOut = wire.Outcome{}
			k.apply(b, c)
			if c.cmd.FromBatch != nil && b.lastOut.CommandID == c.cmd.CommandID {
				// A batch's operation: the batch is told how it went.
				b.reportToBatch(c, b.lastOut)
			}
		}
	}
	b.cmd = nil
	b.curTrace = ""
	if b.err != nil {
		return nil, b.err
	}
	b.settleClaims()
	b.finishSchedules()
	if err := b.scheduleWorkflowTasks(ctx, histories); err != nil {
		return nil, err
	}
	for id := range b.changed {
		if !b.newExecs[id] {
			b.writes.UpdatedExecutions = append(b.writes.UpdatedExecutions, b.execs[id])
		}
	}
	return &b.writes, nil
}

func (b *batch) appendEvent(e *store.Execution, typ string, attrs any) {
	data, err := json.Marshal(attrs)
	if err != nil {
		data = []byte(`{}`)
	}
	e.LastSeq++
	e.HistoryBytes += eventBytes(typ, data)
	e.UpdatedAt = b.now
	ev := wire.Event{Seq: e.LastSeq, Type: typ, At: b.now, Attrs: data}
	b.newEvents[e.ExecutionID] = append(b.newEvents[e.ExecutionID], ev)
	b.writes.Events = append(b.writes.Events, store.EventRow{ExecutionID: e.ExecutionID, Event: ev})
	b.changed[e.ExecutionID] = true
	if b.debug {
		b.logFor(e.ExecutionID).Debug("history event", eventLogAttrs(typ, ev.Seq, attrs)...)
	}
	if b.curTrace != "" {
		if b.traces == nil {
			b.traces = map[string]string{}
		}
		b.traces[e.ExecutionID] = b.curTrace
	}
}

// traceOf is the trace a task dispatched for e carries: that of the
// batch's last command to change e, else the one e was started under (a
// timer firing, a task sent again).
func (b *batch) traceOf(e *store.Execution) string {
	if t, ok := b.traces[e.ExecutionID]; ok {
		return t
	}
	return e.TraceParent
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
	if b.debug {
		executionID, workflow := out.ExecutionID, out.WorkflowName
		if b.cmd != nil {
			// A refused command's outcome names no execution or workflow
			// but what its command does.
			id, wf := logattr.Of(b.cmd)
			executionID, workflow = cmp.Or(executionID, id), cmp.Or(workflow, wf)
		}
		args := []any{"kind", out.Kind, "status", out.Status, "started_fresh", out.StartedFresh, "deduplicated", out.Deduplicated}
		if out.Kind == wire.KindSignal || out.Kind == wire.KindSignalWithStart {
			args = append(args, "signal_delivered", out.SignalDelivered)
		}
		if out.Error != "" {
			args = append(args, "error", out.Error)
		}
		logattr.With(b.log, executionID, workflow, out.CommandID).Debug("command applied", args...)
	}
	b.lastOut = out
	data, _ := json.Marshal(out)
	b.writes.Outcomes = append(b.writes.Outcomes, store.OutcomeRow{
		CommandID: out.CommandID, StreamSeq: out.StreamSeq, Payload: data, ExpiresAt: b.now.Add(b.outcomeTTL),
	})
}
