package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/dedup"
	"github.com/harvest-engine/harvest/store"
	"github.com/harvest-engine/harvest/streams"
	"github.com/harvest-engine/harvest/wire"
)

// seqCommand is a decoded command with the stream sequence that carried it.
type seqCommand struct {
	seq uint64
	cmd wire.Command
}

// batch is the in-memory state of one apply transaction: the rows it read,
// the rows it changes, and what it publishes after the commit.
type batch struct {
	shard  int
	now    time.Time
	window time.Duration
	log    *slog.Logger

	execs       map[string]*store.Execution
	newExecs    map[string]bool
	changed     map[string]bool
	byWorkflow  map[store.WorkflowRef]*store.Execution
	activities  map[store.ActivityRef]*store.Activity
	newActs     map[store.ActivityRef]bool
	newEvents   map[string][]wire.Event
	needTask    []string
	needTaskSet map[string]bool

	writes store.Writes
}

// apply runs one batch of commands in tx and returns the writes it made,
// including the outbox rows to publish after the commit. Commands at or
// below applied were applied before and are skipped.
func apply(ctx context.Context, tx pgx.Tx, shard int, applied int64, cmds []seqCommand, window time.Duration, log *slog.Logger) (*store.Writes, error) {
	b := &batch{
		shard: shard, now: time.Now().UTC(), window: window, log: log,
		execs: map[string]*store.Execution{}, newExecs: map[string]bool{}, changed: map[string]bool{},
		byWorkflow: map[store.WorkflowRef]*store.Execution{}, activities: map[store.ActivityRef]*store.Activity{},
		newActs: map[store.ActivityRef]bool{}, newEvents: map[string][]wire.Event{}, needTaskSet: map[string]bool{},
	}
	b.writes.Shard = shard
	b.writes.AppliedSeq = applied

	// Gather what the batch reads, so each table is read once.
	var (
		claimRefs   []store.ClaimRef
		claimExecs  []string
		tentative   = map[store.ClaimRef]string{}
		wfRefs      []store.WorkflowRef
		execIDs     []string
		actRefs     []store.ActivityRef
		pending     []seqCommand
		seenWf      = map[store.WorkflowRef]bool{}
		seenExecIDs = map[string]bool{}
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
		pending = append(pending, c)
		switch c.cmd.Kind {
		case wire.KindStart:
			s := c.cmd.Start
			if s.IdempotencyKey != "" {
				ref := store.ClaimRef{WorkflowName: s.WorkflowName, IdempotencyKey: s.IdempotencyKey}
				if _, ok := tentative[ref]; !ok {
					id := dedup.NewID()
					tentative[ref] = id
					claimRefs = append(claimRefs, ref)
					claimExecs = append(claimExecs, id)
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
		}
	}
	if len(pending) == 0 {
		return &b.writes, nil
	}

	claims, err := store.ClaimStartKeys(ctx, tx, claimRefs, claimExecs, window)
	if err != nil {
		return nil, err
	}
	for ref, holder := range claims {
		if holder != tentative[ref] {
			addExec(holder)
		}
	}
	if b.execs, err = store.LoadExecutions(ctx, tx, execIDs); err != nil {
		return nil, err
	}
	latest, err := store.LatestByWorkflowID(ctx, tx, wfRefs)
	if err != nil {
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
	if b.activities, err = store.LoadActivities(ctx, tx, actRefs); err != nil {
		return nil, err
	}

	// claimed holds, per key, the execution the key resolved to in this
	// batch, so a second start with the key in the same batch is a replay.
	claimed := map[store.ClaimRef]*store.Execution{}
	for _, c := range pending {
		switch c.cmd.Kind {
		case wire.KindStart:
			b.start(c, claims, tentative, claimed)
		case wire.KindWorkflowTaskCompleted:
			b.workflowTaskCompleted(c.cmd.WorkflowTask)
		case wire.KindActivityResult:
			b.activityResult(c.cmd.Activity)
		}
	}
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

func (b *batch) start(c seqCommand, claims map[store.ClaimRef]string, tentative map[store.ClaimRef]string, claimed map[store.ClaimRef]*store.Execution) {
	s := c.cmd.Start
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindStart, Keyed: s.IdempotencyKey != "", AppliedAt: b.now}
	ref := store.ClaimRef{WorkflowName: s.WorkflowName, IdempotencyKey: s.IdempotencyKey}
	if out.Keyed {
		if e := claimed[ref]; e != nil {
			b.outcome(out, e, false, true)
			return
		}
		if holder := claims[ref]; holder != tentative[ref] {
			e := b.execs[holder]
			if e == nil {
				out.Error, out.Message = "claim_dangling", fmt.Sprintf("idempotency key %q is claimed by execution %s, which does not exist", s.IdempotencyKey, holder)
				b.log.Error("start claim points to a missing execution", "workflow", s.WorkflowName, "idempotency_key", s.IdempotencyKey, "execution_id", holder)
				b.addOutcome(out)
				return
			}
			claimed[ref] = e
			b.outcome(out, e, false, true)
			return
		}
	}
	wref := store.WorkflowRef{WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID}
	if e := b.byWorkflow[wref]; e != nil {
		// Reuse policy allow_duplicate: the existing execution is the answer.
		if out.Keyed {
			claimed[ref] = e
			if b.writes.RepointClaims == nil {
				b.writes.RepointClaims = map[store.ClaimRef]string{}
			}
			b.writes.RepointClaims[ref] = e.ExecutionID
		}
		b.outcome(out, e, false, false)
		return
	}
	id := dedup.NewID()
	if out.Keyed {
		id = tentative[ref]
	}
	e := &store.Execution{
		ExecutionID: id, Shard: b.shard, WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID,
		TaskQueue: s.TaskQueue, Status: wire.StatusRunning, Input: s.Input, CreatedAt: b.now, UpdatedAt: b.now,
	}
	if out.Keyed {
		key := s.IdempotencyKey
		e.IdempotencyKey = &key
		claimed[ref] = e
	}
	b.execs[id] = e
	b.newExecs[id] = true
	b.byWorkflow[wref] = e
	b.writes.NewExecutions = append(b.writes.NewExecutions, e)
	b.appendEvent(e, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{
		WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID, Input: s.Input, IdempotencyKey: s.IdempotencyKey, TaskQueue: s.TaskQueue,
	})
	b.needWorkflowTask(e)
	b.outcome(out, e, true, false)
}

func (b *batch) outcome(out wire.Outcome, e *store.Execution, fresh, dedup bool) {
	out.ExecutionID, out.WorkflowName, out.WorkflowID, out.Status = e.ExecutionID, e.WorkflowName, e.WorkflowID, e.Status
	out.StartedFresh, out.Deduplicated = fresh, dedup
	b.addOutcome(out)
}

func (b *batch) addOutcome(out wire.Outcome) {
	data, _ := json.Marshal(out)
	b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
		Shard: b.shard, Subject: streams.OutcomeSubject(out.CommandID), MsgID: fmt.Sprintf("outcome:%s:%d", out.CommandID, out.StreamSeq), Payload: data,
	})
}

func (b *batch) workflowTaskCompleted(r *wire.WorkflowTaskResult) {
	e := b.execs[r.ExecutionID]
	if e == nil || e.Status != wire.StatusRunning || !e.WFTOutstanding || e.WFTID != r.TaskID {
		b.log.Debug("dropping stale workflow task result", "execution_id", r.ExecutionID, "task_id", r.TaskID)
		return
	}
	e.WFTOutstanding = false
	b.changed[e.ExecutionID] = true
	for _, d := range r.Decisions {
		if e.Status != wire.StatusRunning {
			break
		}
		switch d.Type {
		case wire.DecisionScheduleActivity:
			ref := store.ActivityRef{ExecutionID: e.ExecutionID, ActivityID: d.ActivityID}
			a := &store.Activity{
				ExecutionID: e.ExecutionID, ActivityID: d.ActivityID, ActivityName: d.ActivityName,
				Status: store.ActivityScheduled, Attempt: 1, IdempotencyKey: dedup.NewActivityKey().String(),
			}
			b.activities[ref] = a
			b.newActs[ref] = true
			b.writes.NewActivities = append(b.writes.NewActivities, a)
			b.appendEvent(e, wire.EventActivityScheduled, wire.ActivityScheduledAttrs{
				ActivityID: d.ActivityID, ActivityName: d.ActivityName, Input: d.Input, IdempotencyKey: a.IdempotencyKey,
			})
			task := wire.ActivityTask{
				ExecutionID: e.ExecutionID, Shard: b.shard, WorkflowName: e.WorkflowName, TaskQueue: e.TaskQueue,
				ActivityID: d.ActivityID, ActivityName: d.ActivityName, Input: d.Input, IdempotencyKey: a.IdempotencyKey,
				Attempt: 1, ScheduledAt: b.now,
			}
			data, _ := json.Marshal(task)
			b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
				Shard: b.shard, Subject: streams.TaskSubject(e.TaskQueue, wire.TaskActivity),
				MsgID: fmt.Sprintf("act:%s:%d:%d", e.ExecutionID, d.ActivityID, 1), Payload: data,
			})
		case wire.DecisionCompleteWorkflow:
			b.close(e, wire.StatusCompleted, wire.EventWorkflowCompleted, wire.WorkflowClosedAttrs{Result: d.Result})
			e.Result = d.Result
		case wire.DecisionFailWorkflow:
			b.close(e, wire.StatusFailed, wire.EventWorkflowFailed, wire.WorkflowClosedAttrs{Failure: d.Failure})
			e.Error, _ = json.Marshal(d.Failure)
		default:
			b.log.Warn("ignoring unknown decision", "execution_id", e.ExecutionID, "decision", d.Type)
		}
	}
	if e.Status == wire.StatusRunning && e.WFTDirty {
		e.WFTDirty = false
		b.needWorkflowTask(e)
	}
}

func (b *batch) close(e *store.Execution, status, event string, attrs wire.WorkflowClosedAttrs) {
	e.Status = status
	now := b.now
	e.ClosedAt = &now
	b.appendEvent(e, event, attrs)
}

func (b *batch) activityResult(r *wire.ActivityResult) {
	ref := store.ActivityRef{ExecutionID: r.ExecutionID, ActivityID: r.ActivityID}
	a, e := b.activities[ref], b.execs[r.ExecutionID]
	if a == nil || e == nil || a.Status != store.ActivityScheduled || a.Attempt != r.Attempt || e.Status != wire.StatusRunning {
		b.log.Debug("dropping stale activity result", "execution_id", r.ExecutionID, "activity", r.ActivityID, "attempt", r.Attempt)
		return
	}
	attrs := wire.ActivityClosedAttrs{ActivityID: a.ActivityID, ActivityName: a.ActivityName, Attempt: r.Attempt, Result: r.Result, Failure: r.Failure}
	if r.Failure != nil {
		a.Status = store.ActivityFailed
		b.appendEvent(e, wire.EventActivityFailed, attrs)
	} else {
		a.Status = store.ActivityCompleted
		b.appendEvent(e, wire.EventActivityCompleted, attrs)
	}
	if !b.newActs[ref] {
		b.writes.UpdatedActivities = append(b.writes.UpdatedActivities, a)
	}
	b.needWorkflowTask(e)
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
func (b *batch) scheduleWorkflowTasks(ctx context.Context, tx pgx.Tx) error {
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
		b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
			Shard: b.shard, Subject: streams.TaskSubject(e.TaskQueue, wire.TaskWorkflow),
			MsgID: fmt.Sprintf("wft:%s:%d", id, e.WFTID), Payload: data,
		})
	}
	return nil
}
