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
	"strconv"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// MemoryConfig configures a Memory. Zero values mean the scheduler's
// defaults.
type MemoryConfig struct {
	// StartIdempotencyWindow, default DefaultStartIdempotencyWindow.
	StartIdempotencyWindow time.Duration
	// WorkflowTaskTimeout, default DefaultWorkflowTaskTimeout.
	WorkflowTaskTimeout time.Duration
	// Retention, default DefaultRetention; RetentionByWorkflow overrides
	// it per workflow. Neither may be shorter than the start window.
	Retention           time.Duration
	RetentionByWorkflow map[string]time.Duration
	// PinnedWorkflows, HistoryLimits and CancelGraceByWorkflow are as
	// Config's.
	PinnedWorkflows       map[string]bool
	HistoryLimits         HistoryLimits
	CancelGraceByWorkflow map[string]time.Duration
	TimeoutsByWorkflow    map[string]WorkflowTimeouts
	// SearchAttributes are as Config's: the kit checks what workflow code
	// sets against them, and keeps them for describe (SearchAttributes);
	// it has no list to filter by them.
	SearchAttributes searchattr.Schema
	// KnownWorkflow says whether a child workflow's start of name on
	// taskQueue can run (a worker serves it); nil: every one.
	KnownWorkflow func(name, taskQueue string) bool
	// TaskQueued says whether the workflow task taskID of an execution is
	// still held for a worker (see applyEnv.taskQueued); nil means never.
	TaskQueued func(executionID string, taskID int) bool
	Logger     *slog.Logger
	// MaxTask is the largest task the shard dispatches, default 1 MiB
	// less room for headers (NATS's default max payload): a larger
	// workflow task fails its execution, a larger activity task its
	// activity, as in a deployment.
	MaxTask int
}

// Memory is one shard kept in memory instead of PostgreSQL. Commands and
// due timers are applied to it by the code that applies them to
// PostgreSQL (the apply batch), at the time the caller gives; what would
// be the transaction's writes are made to its maps instead. It is what
// the test kit (package harvesttest) runs users' workflows on.
//
// A Memory is not safe for concurrent use.
type Memory struct {
	env        applyEnv
	execs      map[string]*store.Execution
	latest     map[store.WorkflowRef]*store.Execution
	activities map[store.ActivityRef]*store.Activity
	history    map[string][]wire.Event
	timers     map[int64]store.Timer
	lastTimer  int64
	claims     map[store.ClaimRef]store.Claim
	signals    map[store.SignalRef]bool
	updates    map[string]*store.Update
	updateKeys map[store.UpdateKeyRef]string
	// states are the executions' query states, by execution and name.
	states map[string]map[string]store.StateRow
	// search are the executions' search attributes, by execution and
	// name, as indexed.
	search map[string]map[string]wire.SearchValue
	// schedules and fires are the shard's schedules and their ledgers.
	schedules map[string]*store.Schedule
	fires     map[store.FireRef]*store.ScheduleFire
	seq       int64
	// at is the time of the batch being written.
	at time.Time
}

// NewMemory returns an empty shard.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	window := cmp.Or(cfg.StartIdempotencyWindow, DefaultStartIdempotencyWindow)
	retention := cmp.Or(cfg.Retention, DefaultRetention)
	if err := checkRetention(retention, cfg.RetentionByWorkflow, window); err != nil {
		return nil, err
	}
	if err := cfg.HistoryLimits.Validate(); err != nil {
		return nil, err
	}
	env := applyEnv{
		// Tasks as large as NATS's default max payload carries, so that
		// what a deployment refuses as too large is refused here too.
		shards: 1, window: window, maxTask: cmp.Or(cfg.MaxTask, defaultMemoryMaxTask), wftTimeout: cmp.Or(cfg.WorkflowTaskTimeout, DefaultWorkflowTaskTimeout),
		retention: store.Retention{Default: retention, ByWorkflow: cfg.RetentionByWorkflow}, pinned: cfg.PinnedWorkflows,
		log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), historyLimits: cfg.HistoryLimits,
		cancelGrace: cfg.CancelGraceByWorkflow, timeouts: cfg.TimeoutsByWorkflow, knownWorkflow: cfg.KnownWorkflow, searchAttrs: cfg.SearchAttributes,
	}
	if queued := cfg.TaskQueued; queued != nil {
		env.taskQueued = func(_ context.Context, e *store.Execution, taskID int) bool { return queued(e.ExecutionID, taskID) }
	}
	return &Memory{
		env: env, execs: map[string]*store.Execution{}, latest: map[store.WorkflowRef]*store.Execution{},
		activities: map[store.ActivityRef]*store.Activity{}, history: map[string][]wire.Event{}, timers: map[int64]store.Timer{},
		claims: map[store.ClaimRef]store.Claim{}, signals: map[store.SignalRef]bool{}, states: map[string]map[string]store.StateRow{},
		search:  map[string]map[string]wire.SearchValue{},
		updates: map[string]*store.Update{}, updateKeys: map[store.UpdateKeyRef]string{},
		schedules: map[string]*store.Schedule{}, fires: map[store.FireRef]*store.ScheduleFire{},
	}, nil
}

// defaultMemoryMaxTask is NATS's default max payload less the room a
// task's headers take.
const defaultMemoryMaxTask = 1<<20 - taskHeaderRoom

// Dispatched is what an apply sent out: outcomes of the commands applied,
// and tasks for workers.
type Dispatched struct {
	Outcomes      []wire.Outcome
	WorkflowTasks []*wire.WorkflowTask
	ActivityTasks []*wire.ActivityTask
	// Cancelled are executions whose running activities are to stop.
	Cancelled []string
	// CancelledActivities are activities the workflow gave up
	// (request_cancel_activity), whose running attempts are to stop.
	CancelledActivities []store.ActivityRef
	// Commands are the commands the apply sent to shards (a child's
	// start, a report to its parent, a workflow's signal, a parent-close
	// policy's cancel or terminate): the caller applies them next, as
	// the command stream would deliver them. A Memory is every shard.
	Commands []*wire.Command
}

// Apply applies one command at now.
func (m *Memory) Apply(ctx context.Context, now time.Time, cmd *wire.Command) (Dispatched, error) {
	if cmd.Start != nil && cmd.Start.Policy != nil {
		// Deferred starts are kept in PostgreSQL tables a Memory does
		// not model: refused rather than left waiting forever.
		return Dispatched{}, errors.New("memory shard: starts under a start policy are not supported")
	}
	m.seq++
	m.at = now.UTC()
	b := newBatch(ctx, m.env, now.UTC(), m.seq-1)
	// The batch works on the shard's own rows, as a transaction works on
	// the rows it locked: every execution, activity and key is "read".
	b.execs, b.activities, b.byWorkflow, b.signalClaims = m.execs, m.activities, m.latest, m.signals
	b.updateKeys = maps.Clone(m.updateKeys) // the write records the batch's
	b.schedules, b.priorFires = m.schedules, m.fires
	b.claims = map[store.ClaimRef]store.Claim{}
	if s := cmd.Start; s != nil && cmd.Kind == wire.KindStart && s.IdempotencyKey != "" {
		// ClaimStartKeys: a new key, or an expired claim, is taken for a
		// fresh execution id; a live claim is left as it is.
		ref := store.ClaimRef{WorkflowName: s.WorkflowName, IdempotencyKey: s.IdempotencyKey}
		id := b.mintExecutionID()
		b.tentative[ref] = id
		if c, ok := m.claims[ref]; !ok || !c.ExpiresAt.After(b.now) {
			m.claims[ref] = store.Claim{ExecutionID: id, Fingerprint: s.Fingerprint, CreatedAt: b.now, ExpiresAt: b.now.Add(m.env.window)}
		}
		b.claims[ref] = m.claims[ref]
	}
	w, err := b.applyAll(ctx, m.histories, []seqCommand{{seq: uint64(m.seq), cmd: *cmd}})
	if err != nil {
		return Dispatched{}, err
	}
	return m.write(w)
}

// NextTimer is when the shard's earliest timer, or schedule, is due.
func (m *Memory) NextTimer() (time.Time, bool) {
	var next time.Time
	for _, tm := range m.timers {
		if next.IsZero() || tm.FireAt.Before(next) {
			next = tm.FireAt
		}
	}
	for _, sc := range m.schedules {
		if sc.NextDue != nil && (next.IsZero() || sc.NextDue.Before(next)) {
			next = *sc.NextDue
		}
	}
	return next, !next.IsZero()
}

// FireDue fires, in one batch at now, every timer due by then, and then,
// in another, the schedules due by then.
func (m *Memory) FireDue(ctx context.Context, now time.Time) (Dispatched, error) {
	d, err := m.fireTimers(ctx, now)
	if err != nil {
		return d, err
	}
	var due []*store.Schedule
	for _, sc := range m.schedules {
		if sc.NextDue != nil && !sc.NextDue.After(now) {
			due = append(due, sc)
		}
	}
	if len(due) == 0 {
		return d, nil
	}
	slices.SortFunc(due, func(a, b *store.Schedule) int {
		return cmp.Or(a.NextDue.Compare(*b.NextDue), strings.Compare(a.ScheduleID, b.ScheduleID))
	})
	m.at = now.UTC()
	b := newBatch(ctx, m.env, now.UTC(), m.seq)
	b.schedules, b.priorFires = m.schedules, m.fires
	for _, sc := range due {
		b.advanceDue(sc)
	}
	b.finishSchedules()
	more, err := m.write(&b.writes)
	if err != nil {
		return d, err
	}
	d.Outcomes = append(d.Outcomes, more.Outcomes...)
	d.Commands = append(d.Commands, more.Commands...)
	return d, nil
}

// Schedule returns the schedule id, and its ledger, newest nominal time
// first.
func (m *Memory) Schedule(id string) (store.Schedule, []store.ScheduleFire, bool) {
	sc := m.schedules[id]
	if sc == nil {
		return store.Schedule{}, nil, false
	}
	var fires []store.ScheduleFire
	for _, f := range m.fires {
		if f.ScheduleID == id {
			fires = append(fires, *f)
		}
	}
	slices.SortFunc(fires, func(a, b store.ScheduleFire) int {
		return cmp.Or(b.Nominal.Compare(a.Nominal), strings.Compare(b.Trigger, a.Trigger))
	})
	return *sc, fires, true
}

// fireTimers fires, in one batch at now, every timer due by then.
func (m *Memory) fireTimers(ctx context.Context, now time.Time) (Dispatched, error) {
	var due []store.Timer
	for _, tm := range m.timers {
		if !tm.FireAt.After(now) {
			due = append(due, tm)
		}
	}
	if len(due) == 0 {
		return Dispatched{}, nil
	}
	slices.SortFunc(due, func(a, b store.Timer) int { return cmp.Or(a.FireAt.Compare(b.FireAt), cmp.Compare(a.ID, b.ID)) })
	m.at = now.UTC()
	b := newBatch(ctx, m.env, now.UTC(), m.seq)
	b.execs, b.activities = m.execs, m.activities
	w, err := b.fire(ctx, m.histories, m.env.taskQueued, due)
	if err != nil {
		return Dispatched{}, err
	}
	return m.write(w)
}

// Prune deletes the closed executions whose retention ended before now,
// with every row that names them (store.PrunedTables), and returns their
// ids.
func (m *Memory) Prune(now time.Time) []string {
	var pruned []string
	for id, e := range m.execs {
		if e.PruneAfter == nil || !e.PruneAfter.Before(now) {
			continue
		}
		pruned = append(pruned, id)
		delete(m.execs, id)
		delete(m.history, id)
		delete(m.states, id)
		delete(m.search, id)
		for ref := range m.activities {
			if ref.ExecutionID == id {
				delete(m.activities, ref)
			}
		}
		for tid, tm := range m.timers {
			if tm.ExecutionID == id {
				delete(m.timers, tid)
			}
		}
		maps.DeleteFunc(m.fires, func(_ store.FireRef, f *store.ScheduleFire) bool { return f.ExecutionID == id })
		if e.IdempotencyKey != nil {
			// A claim since taken over by a newer execution stays.
			ref := store.ClaimRef{WorkflowName: e.WorkflowName, IdempotencyKey: *e.IdempotencyKey}
			if c, ok := m.claims[ref]; ok && c.ExecutionID == id {
				delete(m.claims, ref)
			}
		}
		if ref := (store.WorkflowRef{WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID}); m.latest[ref] == e {
			delete(m.latest, ref)
		}
	}
	// Keyed signals are claimed under a chain's first run: they go once
	// no run of the chain is left (store.PruneShard does the same).
	live := map[string]bool{}
	for _, e := range m.execs {
		live[e.Chain()] = true
	}
	for ref := range m.signals {
		if !live[ref.ExecutionID] {
			delete(m.signals, ref)
		}
	}
	for id, u := range m.updates {
		if !live[u.ChainID] {
			delete(m.updates, id)
			delete(m.updateKeys, store.UpdateKeyRef{ChainID: u.ChainID, IdempotencyKey: u.IdempotencyKey})
		}
	}
	slices.Sort(pruned)
	return pruned
}

// Execution returns a copy of an execution and its history.
func (m *Memory) Execution(id string) (store.Execution, []wire.Event, bool) {
	e, ok := m.execs[id]
	if !ok {
		return store.Execution{}, nil, false
	}
	return *e, slices.Clone(m.history[id]), true
}

// Update returns a copy of an update.
func (m *Memory) Update(id string) (store.Update, bool) {
	u, ok := m.updates[id]
	if !ok {
		return store.Update{}, false
	}
	return *u, true
}

// States returns an execution's query states, by name.
func (m *Memory) States(id string) []store.StateRow {
	var out []store.StateRow
	for _, st := range m.states[id] {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b store.StateRow) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// SearchAttributes returns an execution's search attributes, by name, as
// the API answers them; nil for none.
func (m *Memory) SearchAttributes(id string) map[string]any {
	e := m.execs[id]
	if e == nil || len(m.search[id]) == 0 {
		return nil
	}
	out := map[string]any{}
	for name, v := range m.search[id] {
		if val := store.SearchAttributeValue(v, m.env.searchAttrs[e.WorkflowName][name]); val != nil {
			out[name] = val
		}
	}
	if len(out) == 0 {
		return nil // every one removed: as a deployment's describe
	}
	return out
}

// LiveClaim returns the execution a start key resolves to at now.
func (m *Memory) LiveClaim(workflowName, key string, now time.Time) (string, bool) {
	c, ok := m.claims[store.ClaimRef{WorkflowName: workflowName, IdempotencyKey: key}]
	if !ok || !c.ExpiresAt.After(now) {
		return "", false
	}
	return c.ExecutionID, true
}

func (m *Memory) histories(_ context.Context, from map[string]int) (map[string][]wire.Event, error) {
	out := make(map[string][]wire.Event, len(from))
	for id, seq := range from {
		h := m.history[id]
		i, _ := slices.BinarySearchFunc(h, seq, func(ev wire.Event, seq int) int { return ev.Seq - seq })
		out[id] = slices.Clone(h[i:])
	}
	return out, nil
}

// write makes a batch's writes to the shard (what store.Write makes to
// PostgreSQL; the rows the batch changed in place are the shard's own)
// and returns what it sends out.
func (m *Memory) write(w *store.Writes) (Dispatched, error) {
	for _, e := range w.NewExecutions {
		m.execs[e.ExecutionID] = e
	}
	for _, a := range w.NewActivities {
		m.activities[store.ActivityRef{ExecutionID: a.ExecutionID, ActivityID: a.ActivityID}] = a
	}
	for _, ev := range w.Events {
		m.history[ev.ExecutionID] = append(m.history[ev.ExecutionID], ev.Event)
	}
	for ref, id := range w.RepointClaims {
		c := m.claims[ref]
		c.ExecutionID = id
		m.claims[ref] = c
	}
	for _, ref := range w.DeleteClaims {
		delete(m.claims, ref)
	}
	for _, ref := range w.SignalClaims {
		m.signals[ref] = true
	}
	for _, u := range w.NewUpdates {
		kept := *u
		kept.Status, kept.CreatedAt, kept.UpdatedAt = store.UpdateRequested, m.at, m.at
		m.updates[u.UpdateID] = &kept
		if u.IdempotencyKey != "" {
			m.updateKeys[store.UpdateKeyRef{ChainID: u.ChainID, IdempotencyKey: u.IdempotencyKey}] = u.UpdateID
		}
	}
	for _, c := range w.UpdateChanges {
		if u := m.updates[c.UpdateID]; u != nil {
			u.ExecutionID, u.Status, u.Result, u.Failure, u.ErrorCode, u.UpdatedAt = c.ExecutionID, c.Status, c.Result, c.Failure, c.ErrorCode, m.at
		}
	}
	for _, a := range w.SearchAttributes {
		// As store.Write's upsert: the last value of a name wins.
		if m.search[a.ExecutionID] == nil {
			m.search[a.ExecutionID] = map[string]wire.SearchValue{}
		}
		m.search[a.ExecutionID][a.Name] = a.Value
	}
	for _, c := range w.SearchAttributeCopies {
		// As store.Write's copy: after the rows, and what the new run
		// set itself stays.
		for name, v := range m.search[c.From] {
			if c.Only != nil && !searchattr.Holds(v, c.Only[name]) {
				continue
			}
			if m.search[c.To] == nil {
				m.search[c.To] = map[string]wire.SearchValue{}
			}
			if _, ok := m.search[c.To][name]; !ok {
				m.search[c.To][name] = v
			}
		}
	}
	for _, st := range w.States {
		// As store.Write's upsert: a greater seq replaces.
		byName := m.states[st.ExecutionID]
		if byName == nil {
			byName = map[string]store.StateRow{}
			m.states[st.ExecutionID] = byName
		}
		if old, ok := byName[st.Name]; !ok || old.Seq < st.Seq {
			byName[st.Name] = st
		}
	}
	// The batch changed the schedules in place; those it deleted go,
	// with their ledgers.
	for _, id := range w.Schedules.Deleted {
		delete(m.schedules, id)
		maps.DeleteFunc(m.fires, func(ref store.FireRef, _ *store.ScheduleFire) bool { return ref.ScheduleID == id })
	}
	for _, sc := range w.Schedules.Put {
		m.schedules[sc.ScheduleID] = sc
	}
	for _, f := range w.Schedules.Fires {
		m.fires[f.Ref()] = f
	}
	// Inserted, then deleted, in store.Write's order.
	for _, tm := range w.NewTimers {
		m.lastTimer++
		tm.ID = m.lastTimer
		m.timers[tm.ID] = tm
	}
	m.deleteTimers(w)
	var d Dispatched
	for _, o := range w.Outcomes {
		var out wire.Outcome
		if err := json.Unmarshal(o.Payload, &out); err != nil {
			return d, fmt.Errorf("decode outcome of %s: %w", o.CommandID, err)
		}
		d.Outcomes = append(d.Outcomes, out)
	}
	for _, msg := range w.Outbox {
		if strings.HasPrefix(msg.Subject, "harvest.cmd.") {
			var c wire.Command
			if err := json.Unmarshal(msg.Payload, &c); err != nil {
				return d, fmt.Errorf("decode command %s: %w", msg.MsgID, err)
			}
			d.Commands = append(d.Commands, &c)
			continue
		}
		kind, _ := broker.TaskKind(msg.Subject)
		switch kind {
		case wire.TaskWorkflow:
			var t wire.WorkflowTask
			if err := json.Unmarshal(msg.Payload, &t); err != nil {
				return d, fmt.Errorf("decode workflow task %s: %w", msg.MsgID, err)
			}
			d.WorkflowTasks = append(d.WorkflowTasks, &t)
		case wire.TaskActivity:
			var t wire.ActivityTask
			if err := json.Unmarshal(msg.Payload, &t); err != nil {
				return d, fmt.Errorf("decode activity task %s: %w", msg.MsgID, err)
			}
			d.ActivityTasks = append(d.ActivityTasks, &t)
		default:
			var c struct {
				ExecutionID string `json:"execution_id"`
				ActivityID  int    `json:"activity_id"`
				Requested   bool   `json:"cancel_requested"`
			}
			switch {
			case json.Unmarshal(msg.Payload, &c) != nil || c.ExecutionID == "" || c.Requested:
				// The test kit runs no eager attempts.
			case c.ActivityID > 0:
				d.CancelledActivities = append(d.CancelledActivities, store.ActivityRef{ExecutionID: c.ExecutionID, ActivityID: c.ActivityID})
			default:
				d.Cancelled = append(d.Cancelled, c.ExecutionID)
			}
		}
	}
	return d, nil
}

// deleteTimers deletes the timers a batch fired, and those of the
// activities, executions and workflow tasks it finished and the workflow
// timers it cancelled (as
// store.queueDeleteTimers does).
func (m *Memory) deleteTimers(w *store.Writes) {
	for _, id := range w.FiredTimers {
		delete(m.timers, id)
	}
	done := map[string]bool{}
	for _, ref := range w.ActivityDone {
		done[ref.ExecutionID+"/"+strconv.Itoa(ref.ActivityID)] = true
	}
	tasks := map[string]bool{}
	for _, ref := range w.WorkflowTasksDone {
		tasks[ref.ExecutionID+"/"+strconv.Itoa(ref.TaskID)] = true
	}
	closed := map[string]bool{}
	for _, id := range w.ExecutionsClosed {
		closed[id] = true
	}
	cancelled := map[string]bool{}
	for _, ref := range w.CancelledTimers {
		cancelled[ref.ExecutionID+"/"+strconv.Itoa(ref.TimerID)] = true
	}
	for id, tm := range m.timers {
		var at struct {
			ActivityID int `json:"activity_id"`
			TaskID     int `json:"task_id"`
			TimerID    int `json:"timer_id"`
		}
		_ = json.Unmarshal(tm.Attrs, &at)
		switch {
		case closed[tm.ExecutionID]:
		case tm.Kind == store.TimerWorkflow && cancelled[tm.ExecutionID+"/"+strconv.Itoa(at.TimerID)]:
		case (tm.Kind == store.TimerActivityTimeout || tm.Kind == store.TimerActivityRetry || tm.Kind == store.TimerActivityHeartbeat) &&
			done[tm.ExecutionID+"/"+strconv.Itoa(at.ActivityID)]:
		case tm.Kind == store.TimerWorkflowTask && tasks[tm.ExecutionID+"/"+strconv.Itoa(at.TaskID)]:
		default:
			continue
		}
		delete(m.timers, id)
	}
}
