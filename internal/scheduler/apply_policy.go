package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// policyStart applies a start under a start policy (its command carries
// the policy, bound to its input by ingest). A throttle with room begins
// it at once, as any start; otherwise it joins a deferred group, which
// begins one execution when due (releaseGroups): its own (a throttled
// start), or its key's open group (a debounce, a batch). Its outcome then
// says "deferred", until the group's execution replaces it.
//
// A command applied before (a webhook's or binding's event delivered
// again after the broker's duplicate window: its command id is derived
// from the event's) is not applied again; its outcome stands.
func (b *batch) policyStart(c seqCommand) {
	s, p := c.cmd.Start, c.cmd.Start.Policy
	// A keyed start under a concurrency policy is answered by its key's
	// claim, as any keyed start: a fresh outcome for each delivery.
	keyed := p.Kind == wire.PolicyConcurrency && s.IdempotencyKey != ""
	if _, ok := b.priorOutcomes[c.cmd.CommandID]; !keyed && (ok || b.policyCmds[c.cmd.CommandID]) {
		if b.debug {
			logattr.With(b.log, "", s.WorkflowName, c.cmd.CommandID).Debug("start under a policy applied before: dropped", "kind", p.Kind)
		}
		return
	}
	b.policyCmds[c.cmd.CommandID] = true
	ref := store.PolicyRef{WorkflowName: s.WorkflowName, Kind: p.Kind, Key: p.Key}
	st := b.policyKeys[ref]
	if st == nil {
		st = &store.PolicyState{}
		b.policyKeys[ref] = st
	}
	b.keyChanged(ref, st)
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindStart, WorkflowName: s.WorkflowName, AppliedAt: b.now}
	var g *store.DeferredGroup
	switch p.Kind {
	case wire.PolicyThrottle:
		if st.Queued == 0 && !throttleSlot(st.Begun, b.now, p.Limit, p.Period).After(b.now) {
			// Room, and no start waiting ahead of it: it begins now.
			st.Scheduled = throttleRecord(st.Scheduled, b.now, b.now, p.Limit, p.Period)
			st.Begun = throttleRecord(st.Begun, b.now, b.now, p.Limit, p.Period)
			st.StaleAt = throttleStale(st, p.Period)
			start := *s
			start.Policy = nil
			c.cmd.Start = &start
			b.start(c)
			return
		}
		// It waits its turn: after the starts ahead of it, and a period
		// after the limit-th last.
		due := throttleSlot(st.Scheduled, b.now, p.Limit, p.Period)
		if st.Tail.After(due) {
			due = st.Tail
		}
		st.Scheduled = throttleRecord(st.Scheduled, due, b.now, p.Limit, p.Period)
		st.Queued++
		st.StaleAt = throttleStale(st, p.Period)
		g = b.openGroup(c, ref, due)
		g.Input = s.Input
	case wire.PolicyDebounce:
		st.StaleAt = b.now
		if g = st.Open; g != nil && !g.DueAt.After(b.now) {
			// Its period passed with no start, and it begins as soon as
			// the shard fires it: this start is the next burst's.
			g, st.Open = nil, nil
		}
		if g == nil {
			g = b.openGroup(c, ref, b.now.Add(p.Period))
			g.Input = s.Input
			st.Open = g
			break
		}
		g.DueAt = b.now.Add(p.Period)
		if !p.FirstInput {
			// The execution takes the last start's input, and what else
			// came with it.
			g.Input, g.CompletionCallback, g.StartedBy, g.TraceParent = s.Input, optional(s.CompletionCallback), optional(s.StartedBy), optional(c.trace)
		}
		g.Policy = *p
	case wire.PolicyConcurrency:
		b.concurrencyStart(c, ref, st)
		return
	case wire.PolicyBatch:
		st.StaleAt = b.now
		size := int64(len(s.Input))
		if g = st.Open; g != nil && !g.DueAt.After(b.now) {
			// Its max_wait passed: it begins as soon as the shard fires
			// it, and this start is the next batch's.
			g, st.Open = nil, nil
		}
		if g != nil && g.Size > 0 && g.Bytes+size > b.batchBytes() {
			// Full by size: it begins now, before its list of inputs
			// outgrows what a task carries, and this start opens the
			// key's next batch.
			g.DueAt = b.now
			b.writes.Policies.Groups = append(b.writes.Policies.Groups, g)
			g = nil
		}
		if g == nil {
			g = b.openGroup(c, ref, b.now.Add(p.MaxWait))
			st.Open = g
		}
		g.Bytes += size
	default:
		// Ingest sends no other kind; a command that does is refused.
		logattr.With(b.log, "", s.WorkflowName, c.cmd.CommandID).Error("start under a policy of unknown kind", "kind", p.Kind)
		b.refuse(out, http.StatusBadRequest, api.CodeInvalidStartPolicy, "unknown start policy kind "+p.Kind)
		return
	}
	m := store.DeferredMember{GroupID: g.GroupID, Position: g.Size, CommandID: c.cmd.CommandID, StreamSeq: c.seq}
	if p.Kind == wire.PolicyBatch {
		m.Input = wire.OrNull(s.Input)
	}
	g.Size++
	if p.Kind == wire.PolicyBatch && g.Size >= p.MaxSize {
		// Full: it begins now, and the key's next start opens a new one.
		g.DueAt = b.now
		st.Open = nil
	}
	b.writes.Policies.Groups = append(b.writes.Policies.Groups, g)
	b.writes.Policies.Members = append(b.writes.Policies.Members, m)
	out.Deferred = true
	if b.debug {
		logattr.With(b.log, "", s.WorkflowName, c.cmd.CommandID).Debug("start deferred", "kind", p.Kind, "group_id", g.GroupID, "due_at", g.DueAt, "size", g.Size)
	}
	b.deferredOutcome(out, g.DueAt)
}

// throttleSlot is the earliest time at or after now that a start may
// begin under a throttle of limit starts in any period, given the times
// (oldest first) of the latest starts: not before the last of them (they
// begin in order), nor before a period has passed since the limit-th
// last.
func throttleSlot(times []time.Time, now time.Time, limit int, period time.Duration) time.Time {
	at := now
	if n := len(times); n > 0 && times[n-1].After(at) {
		at = times[n-1]
	}
	if n := len(times); n >= limit {
		if t := times[n-limit].Add(period); t.After(at) {
			at = t
		}
	}
	return at
}

// throttleRecord adds t to times and keeps those that still count at
// now: the last limit, less those a period or more ago (the newest
// always stays, to keep the order).
func throttleRecord(times []time.Time, t, now time.Time, limit int, period time.Duration) []time.Time {
	times = append(times, t)
	first := max(0, len(times)-limit)
	for first < len(times)-1 && !times[first].Add(period).After(now) {
		first++
	}
	return append([]time.Time(nil), times[first:]...)
}

// throttleStale is when a throttle key's state no longer counts: a period
// after its last start, scheduled or begun, and after the time its
// waiting starts were put off to.
func throttleStale(st *store.PolicyState, period time.Duration) time.Time {
	last := st.Tail
	for _, ts := range [][]time.Time{st.Scheduled, st.Begun} {
		if n := len(ts); n > 0 && ts[n-1].After(last) {
			last = ts[n-1]
		}
	}
	return last.Add(period)
}

// keyChanged records that the batch rewrites the state of a policy key.
func (b *batch) keyChanged(ref store.PolicyRef, st *store.PolicyState) {
	if b.writes.Policies.Keys == nil {
		b.writes.Policies.Keys = map[store.PolicyRef]*store.PolicyState{}
	}
	b.writes.Policies.Keys[ref] = st
}

// openGroup opens a deferred group for the start c, due at due.
func (b *batch) openGroup(c seqCommand, ref store.PolicyRef, due time.Time) *store.DeferredGroup {
	s := c.cmd.Start
	return &store.DeferredGroup{
		GroupID: dedup.NewID(), Shard: b.shard, WorkflowName: ref.WorkflowName, Kind: ref.Kind, Key: ref.Key,
		DueAt: due, FirstSeq: c.seq, Policy: *s.Policy, TaskQueue: s.TaskQueue,
		Versioning: optional(s.Versioning), PinnedBuild: optional(s.PinnedBuild), Priority: optionalPriority(s.Priority),
		CompletionCallback: optional(s.CompletionCallback), StartedBy: optional(s.StartedBy), TraceParent: optional(c.trace), CreatedAt: b.now,
	}
}

// optionalPriority is a deferred start's priority as its group keeps it:
// nil for the default, or one out of range (validPriority).
func optionalPriority(p int) *int {
	if p = validPriority(p); p == wire.DefaultPriority {
		return nil
	}
	return &p
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// deferredOutcome stores a deferred start's outcome, kept until the
// outcome TTL after its group is due (its execution's outcome replaces it
// then).
func (b *batch) deferredOutcome(out wire.Outcome, due time.Time) {
	b.addOutcome(out)
	row := &b.writes.Outcomes[len(b.writes.Outcomes)-1]
	if due.After(b.now) {
		row.ExpiresAt = due.Add(b.outcomeTTL)
	}
}

// releaseGroups begins the executions of due deferred groups in tx, in
// the order they are due: one per group, whose input is the group's (a
// throttled or debounced start) or the list of its members' inputs (a
// batch); every member's outcome then names it. applied is the shard's
// applied sequence: the outcomes carry it, so that they replace the
// members' deferred ones. keys holds the states of the throttled groups'
// keys: a throttled start that would begin within a period of limit
// others (its schedule slipped: the shard was not applied for a while)
// is put off until it may, and those behind it wait for it.
func releaseGroups(ctx context.Context, tx store.Tx, env applyEnv, applied int64, now time.Time, groups []*store.DeferredGroup,
	members map[string][]store.DeferredMember, keys map[store.PolicyRef]*store.PolicyState) (*store.Writes, error) {
	b := newBatch(ctx, env, now.UTC(), applied)
	for _, g := range groups {
		switch g.Kind {
		case wire.PolicyThrottle, wire.PolicyDebounce, wire.PolicyBatch:
		default:
			// A row no version of the scheduler writes: set aside.
			return nil, fmt.Errorf("deferred start group %s of kind %q: %w", g.GroupID, g.Kind, errUnappliable)
		}
		if g.Kind == wire.PolicyThrottle && !b.throttleRelease(g, keys) {
			continue
		}
		input := g.Input
		if g.Kind == wire.PolicyBatch {
			list := make([]json.RawMessage, 0, len(members[g.GroupID]))
			for _, m := range members[g.GroupID] {
				list = append(list, wire.OrNull(m.Input))
			}
			var err error
			if input, err = json.Marshal(list); err != nil {
				return nil, fmt.Errorf("the inputs of deferred start group %s: %w", g.GroupID, errUnappliable)
			}
		}
		// Its workflow_id is minted now: no answer has named it (a
		// deferred start is answered without), and none can be taken.
		s := &wire.StartCommand{WorkflowName: g.WorkflowName, WorkflowID: b.mintWorkflowID(g.WorkflowName), WorkflowIDMinted: true, Input: input,
			TaskQueue: g.TaskQueue, AcceptedAt: g.CreatedAt}
		if g.CompletionCallback != nil {
			s.CompletionCallback = *g.CompletionCallback
		}
		if g.StartedBy != nil {
			s.StartedBy = *g.StartedBy
		}
		if g.Versioning != nil {
			s.Versioning = *g.Versioning
		}
		if g.Priority != nil {
			s.Priority = *g.Priority
		}
		if g.PinnedBuild != nil {
			s.PinnedBuild = *g.PinnedBuild
		}
		b.curTrace = ""
		if g.TraceParent != nil {
			b.curTrace = *g.TraceParent
		}
		e := b.newExecution(s, b.mintExecutionID())
		for _, m := range members[g.GroupID] {
			b.outcome(wire.Outcome{CommandID: m.CommandID, StreamSeq: uint64(applied), Kind: wire.KindStart, AppliedAt: b.now}, e, true, false)
		}
		if b.debug {
			b.logFor(e.ExecutionID).Debug("deferred starts began an execution", "kind", g.Kind, "group_id", g.GroupID, "starts", len(members[g.GroupID]))
		}
		b.writes.Policies.Released = append(b.writes.Policies.Released, g.GroupID)
	}
	b.curTrace = ""
	if err := b.scheduleWorkflowTasks(ctx, txHistories(tx)); err != nil {
		return nil, err
	}
	for id := range b.changed {
		if !b.newExecs[id] {
			b.writes.UpdatedExecutions = append(b.writes.UpdatedExecutions, b.execs[id])
		}
	}
	return &b.writes, nil
}

// throttleRelease says whether throttled group g may begin now, and
// records it in its key's state; if it may not, it puts g off until it
// may.
func (b *batch) throttleRelease(g *store.DeferredGroup, keys map[store.PolicyRef]*store.PolicyState) bool {
	p := g.Policy
	st := keys[g.Ref()]
	if st == nil {
		// Not there (it always is while a start waits): the group
		// begins, and the key starts afresh.
		st = &store.PolicyState{Queued: 1}
		keys[g.Ref()] = st
	}
	b.keyChanged(g.Ref(), st)
	if at := throttleSlot(st.Begun, b.now, p.Limit, p.Period); at.After(b.now) {
		g.DueAt = at
		if at.After(st.Tail) {
			st.Tail = at
		}
		st.StaleAt = throttleStale(st, p.Period)
		b.writes.Policies.Groups = append(b.writes.Policies.Groups, g)
		return false
	}
	st.Begun = throttleRecord(st.Begun, b.now, b.now, p.Limit, p.Period)
	st.Queued = max(0, st.Queued-1)
	st.StaleAt = throttleStale(st, p.Period)
	return true
}

// newBatch returns an empty batch of env's shard applied at now, after
// the command stream's sequence applied.
func newBatch(ctx context.Context, env applyEnv, now time.Time, applied int64) *batch {
	b := &batch{
		shard: env.shard, shards: env.shards, layout: env.layout, now: now, window: env.window, log: env.log, debug: env.log.Enabled(ctx, slog.LevelDebug),
		outcomeTTL: env.outcomeTTLOrDefault(), wftTimeout: env.wftTimeoutOrDefault(), maxTask: env.maxTask, retention: env.retention, pinned: env.pinned,
		cancelGrace: env.cancelGrace, timeouts: env.timeouts, knownWorkflow: env.knownWorkflow, searchAttrs: env.searchAttrs,
		execs: map[string]*store.Execution{}, newExecs: map[string]bool{}, changed: map[string]bool{}, limits: env.historyLimits.WithDefaults(),
		byWorkflow: map[store.WorkflowRef]*store.Execution{}, activities: map[store.ActivityRef]*store.Activity{},
		newActs: map[store.ActivityRef]bool{}, newEvents: map[string][]wire.Event{}, needTaskSet: map[string]bool{},
		claimExec: map[store.ClaimRef]*store.Execution{}, tentative: map[store.ClaimRef]string{},
		policyKeys: map[store.PolicyRef]*store.PolicyState{}, priorOutcomes: map[string]wire.Outcome{}, policyCmds: map[string]bool{},
		updateKeys: map[store.UpdateKeyRef]string{}, stickyState: env.stickyState,
		schedules: map[string]*store.Schedule{}, schedChanged: map[string]bool{}, priorFires: map[store.FireRef]*store.ScheduleFire{},
	}
	b.writes.Shard, b.writes.AppliedSeq = env.shard, applied
	return b
}

// errUnappliable says what a group of deferred starts holds cannot begin
// an execution, whatever is tried again: poisonous sets it aside.
var errUnappliable = errors.New("cannot be applied")

// batchBytes bounds the inputs of a batch: its execution's first task
// carries them, and must stay under the largest task NATS carries.
func (b *batch) batchBytes() int64 {
	if b.maxTask > 0 {
		return int64(b.maxTask) * 3 / 4
	}
	return 768 << 10
}

// refuseGroups sets aside due groups of deferred starts that cannot begin
// (cause): their starts are answered command_rejected, the groups are
// deleted, and a throttle counts their starts as waiting no more.
func refuseGroups(ctx context.Context, env applyEnv, applied int64, now time.Time, groups []*store.DeferredGroup,
	members map[string][]store.DeferredMember, keys map[store.PolicyRef]*store.PolicyState, cause error) *store.Writes {
	b := newBatch(ctx, env, now.UTC(), applied)
	for _, g := range groups {
		if st := keys[g.Ref()]; g.Kind == wire.PolicyThrottle && st != nil {
			st.Queued = max(0, st.Queued-1)
			b.keyChanged(g.Ref(), st)
		}
		for _, m := range members[g.GroupID] {
			b.refuse(wire.Outcome{CommandID: m.CommandID, StreamSeq: uint64(applied), Kind: wire.KindStart, WorkflowName: g.WorkflowName, AppliedAt: b.now},
				http.StatusUnprocessableEntity, api.CodeCommandRejected, fmt.Sprintf("the start was deferred by its %s start policy and could not begin: %v", g.Kind, cause))
		}
		b.writes.Policies.Released = append(b.writes.Policies.Released, g.GroupID)
	}
	return &b.writes
}
