package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/schedspec"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Schedules (docs/schedules.md). A schedule lives on the shard its id
// goes to. Its shard fires it from its row, in the transaction that
// advances it: every nominal time up to the row's fired_through was
// decided once, and each fire that starts puts, through the outbox, a
// start keyed by the schedule and the nominal time on the workflow's
// shard. That shard reports back the start (or its refusal) and, when
// the execution's chain closes, how; the schedule keeps the fires whose
// executions run, which its overlap policy reads.

// maxFiresPerRound bounds the nominal times one transaction decides for
// one schedule (missed ones after a long outage, or a paused schedule's):
// the rest are decided by the next round, at once.
const maxFiresPerRound = 500

// scheduleCommand applies a schedule command: it creates or replaces,
// deletes, pauses, unpauses, triggers or backfills its schedule.
func (b *batch) scheduleCommand(c seqCommand) {
	cmd := c.cmd.Schedule
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindSchedule, AppliedAt: b.now}
	sc := b.schedules[cmd.ScheduleID]
	if sc == nil && cmd.Op != wire.ScheduleOpPut {
		b.refuse(out, http.StatusNotFound, api.CodeScheduleNotFound, fmt.Sprintf("schedule %q does not exist", cmd.ScheduleID))
		return
	}
	if cmd.Op == wire.ScheduleOpDelete {
		// Whatever its definition: a schedule can always be deleted.
		b.schedules[cmd.ScheduleID] = nil
		b.schedChanged[cmd.ScheduleID] = true
		out.Status = "deleted"
		b.addOutcome(out)
		return
	}
	if sc != nil && sc.Unreadable {
		if cmd.Op != wire.ScheduleOpPut {
			b.refuse(out, http.StatusUnprocessableEntity, api.CodeCommandRejected,
				fmt.Sprintf("schedule %q cannot be read (a row no version of this scheduler wrote): replace it or delete it", cmd.ScheduleID))
			return
		}
		sc = nil // replaced whole, as a new one
		b.schedules[cmd.ScheduleID] = nil
	}
	def := cmd.Definition
	if def == nil {
		def = &sc.Definition
	}
	spec, err := schedspec.Parse(def.Spec)
	if err != nil {
		// Ingest validated it: a definition that fails here is not one
		// this version of the scheduler can fire.
		b.refuse(out, http.StatusBadRequest, api.CodeInvalidScheduleSpec, err.Error())
		return
	}
	switch cmd.Op {
	case wire.ScheduleOpPut:
		stored := *def
		stored.Paused, stored.Note = false, ""
		out.Status = "replaced"
		if sc == nil {
			sc = &store.Schedule{ScheduleID: cmd.ScheduleID, Shard: b.shard, FiredThrough: b.now, CreatedAt: b.now}
			b.schedules[cmd.ScheduleID] = sc
			out.Status = "created"
		} else if cmd.Source == wire.ScheduleSourceConfig {
			// The configuration's put, made at every start-up, leaves
			// alone what operators did (a pause and its note), unless
			// it pauses the schedule itself.
			if sameDefinition(sc.Definition, stored) && sc.Source == cmd.Source && (sc.Paused || !def.Paused) {
				out.Status = "unchanged"
				b.addOutcome(out)
				return
			}
			paused, note := sc.Paused, sc.Note
			if def.Paused && !paused {
				paused, note = true, def.Note
			}
			def = &api.ScheduleRequest{Paused: paused, Note: note}
		} else if sameDefinition(sc.Definition, stored) && sc.Source == cmd.Source && sc.Paused == def.Paused && sc.Note == def.Note {
			out.Status = "unchanged"
			b.addOutcome(out)
			return
		}
		// A replaced schedule keeps where its firing stands: the new
		// spec's times after it fire, and what it started still counts
		// for its overlap policy. A new spec's times before now were never
		// due: they are not fired as missed.
		if !sameSpec(sc.Definition.Spec, stored.Spec) && sc.FiredThrough.Before(b.now) {
			sc.FiredThrough = b.now
		}
		sc.Definition, sc.Source, sc.Paused, sc.Note = stored, cmd.Source, def.Paused, def.Note
	case wire.ScheduleOpPause:
		sc.Paused, sc.Note, out.Status = true, cmd.Note, "paused"
	case wire.ScheduleOpUnpause:
		sc.Paused, sc.Note, out.Status = false, cmd.Note, "unpaused"
		b.startBuffered(sc)
	case wire.ScheduleOpTrigger:
		b.fireSchedule(sc, cmd.At.UTC(), api.FireByTrigger, sc.Definition.Overlap)
		out.Status = "triggered"
	case wire.ScheduleOpBackfill:
		overlap := cmp0(cmd.Overlap, sc.Definition.Overlap)
		t := cmd.Start.Add(-time.Nanosecond)
		for n := 0; n < api.MaxBackfillFires; n++ {
			var ok bool
			// Up to the times the spec decided: a later one fires when it
			// comes (ingest refuses an end in the future).
			if t, ok = spec.Next(t); !ok || t.After(cmd.End) || t.After(sc.FiredThrough) {
				break
			}
			b.fireSchedule(sc, t, api.FireByBackfill, overlap)
		}
		out.Status = "backfilled"
	default:
		b.refuse(out, http.StatusBadRequest, api.CodeInvalidScheduleSpec, "unknown schedule operation "+cmd.Op)
		return
	}
	sc.UpdatedAt = b.now
	b.advanceSchedule(sc, spec)
	b.schedChanged[sc.ScheduleID] = true
	b.addOutcome(out)
}

func cmp0(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// sameDefinition says whether two definitions are the same schedule.
// Their inputs are compared as JSON values: PostgreSQL keeps a stored
// one's members in its own order.
func sameDefinition(a, b api.ScheduleRequest) bool {
	a.Input, b.Input = canonicalJSON(a.Input), canonicalJSON(b.Input)
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// sameSpec says whether two specs give the same times.
func sameSpec(a, b api.ScheduleSpec) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// canonicalJSON is raw with its objects' members in one order (encoding
// json sorts a map's keys), or raw itself when it does not decode.
func canonicalJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}

// advanceSchedule decides the nominal times of sc's spec that are due,
// in order: a paused schedule records each as paused, one due longer
// ago than the catch-up window as missed, any other fires. It then sets
// when sc is next due.
func (b *batch) advanceSchedule(sc *store.Schedule, spec *schedspec.Spec) {
	catchup := schedspec.DefaultCatchupWindow
	if d, err := time.ParseDuration(sc.Definition.CatchupWindow); err == nil && d > 0 {
		catchup = d
	}
	for n := 0; ; n++ {
		t, ok := spec.Next(sc.FiredThrough)
		if !ok {
			sc.NextDue = nil
			return
		}
		due := t
		if !sc.Paused {
			due = t.Add(spec.Jitter(sc.ScheduleID, t))
		}
		if due.After(b.now) {
			sc.NextDue = &due
			return
		}
		if n == maxFiresPerRound {
			now := b.now
			sc.NextDue = &now
			return
		}
		sc.FiredThrough = t
		switch {
		case sc.Paused:
			b.recordFire(sc, &store.ScheduleFire{Nominal: t, Trigger: api.FireBySpec, Outcome: api.FirePaused})
		case b.now.Sub(due) > catchup:
			b.recordFire(sc, &store.ScheduleFire{Nominal: t, Trigger: api.FireBySpec, Outcome: api.FireMissedCatchup,
				Message: fmt.Sprintf("due %s ago, beyond the catch-up window of %s", b.now.Sub(due).Round(time.Millisecond), catchup)})
		default:
			b.fireSchedule(sc, t, api.FireBySpec, sc.Definition.Overlap)
		}
	}
}

// fireSchedule fires sc at nominal t, made by trigger, under overlap:
// while an execution an earlier fire started runs, the policy decides;
// otherwise it starts.
func (b *batch) fireSchedule(sc *store.Schedule, t time.Time, trigger, overlap string) {
	b.dropUnanswered(sc)
	if len(sc.Running) == 0 || overlap == api.OverlapAllowAll || b.deduplicated(sc, t, trigger) {
		b.startFire(sc, t, trigger)
		return
	}
	skip := func() {
		b.recordFire(sc, &store.ScheduleFire{Nominal: t, Trigger: trigger, Outcome: api.FireSkippedOverlap,
			Message: fmt.Sprintf("an execution of an earlier fire still runs (overlap %s)", cmp0(overlap, api.OverlapSkip))})
	}
	buffer := func() {
		sc.Buffered = append(sc.Buffered, store.BufferedFire{Nominal: t, Trigger: trigger, Overlap: overlap})
		b.recordFire(sc, &store.ScheduleFire{Nominal: t, Trigger: trigger, Outcome: api.FireBuffered})
	}
	switch overlap {
	case api.OverlapBufferOne:
		if len(sc.Buffered) > 0 {
			skip()
			return
		}
		buffer()
	case api.OverlapBufferAll:
		if len(sc.Buffered) >= api.MaxBufferedFires {
			skip()
			return
		}
		buffer()
	case api.OverlapCancelOther, api.OverlapTerminateOther:
		// The newest fire waits for the running ones to stop; one that
		// waited before it is skipped.
		for _, old := range sc.Buffered {
			b.recordFire(sc, &store.ScheduleFire{Nominal: old.Nominal, Trigger: old.Trigger, Outcome: api.FireSkippedOverlap,
				Message: "a later fire replaced it while the earlier one stopped"})
		}
		sc.Buffered = nil
		buffer()
		for i := range sc.Running {
			r := &sc.Running[i]
			if !r.Stopping {
				r.Stopping, r.StopWith = true, overlap
				b.stopFire(sc, r)
			}
		}
	default:
		skip()
	}
}

// deduplicated says whether the fire of sc at t started an execution
// already (it runs, or the ledger names it): its fire is recorded as
// deduplicated, whatever the overlap policy.
func (b *batch) deduplicated(sc *store.Schedule, t time.Time, trigger string) bool {
	return trigger != api.FireBySpec && (runningAt(sc, t) >= 0 || b.priorFire(sc.ScheduleID, t) != nil)
}

// unansweredAfter is how long a fire's start may go without a word from
// the workflow's shard before the fire is taken as failed: its start was
// set aside there, or the shard runs a scheduler that does not report.
const unansweredAfter = time.Hour

// dropUnanswered records as start_failed the fires of sc whose start
// was sent longer ago than unansweredAfter and never answered, so that
// they do not hold a skip schedule's slot for ever.
func (b *batch) dropUnanswered(sc *store.Schedule) {
	sc.Running = slices.DeleteFunc(sc.Running, func(r store.RunningFire) bool {
		if r.ExecutionID != "" || r.SentAt.IsZero() || b.now.Sub(r.SentAt) < unansweredAfter {
			return false
		}
		b.recordFire(sc, &store.ScheduleFire{Nominal: r.Nominal, Trigger: r.Trigger, WorkflowID: r.WorkflowID, Outcome: api.FireStartFailed,
			Error: api.CodeUnavailable, Message: fmt.Sprintf("the workflow's shard did not answer its start within %s", unansweredAfter)})
		return true
	})
}

// runningAt is the index of sc's running fire of nominal time t, -1
// when it has none.
func runningAt(sc *store.Schedule, t time.Time) int {
	return slices.IndexFunc(sc.Running, func(r store.RunningFire) bool { return r.Nominal.Equal(t) })
}

// stopFire asks the execution of running fire r to cancel, or
// terminates it, as its overlap policy says; one whose start is not
// known yet is asked once it is.
func (b *batch) stopFire(sc *store.Schedule, r *store.RunningFire) {
	if r.ExecutionID == "" || !validUUID(r.ExecutionID) {
		return
	}
	reason := fmt.Sprintf("schedule %s fired again (overlap %s)", sc.ScheduleID, r.StopWith)
	if r.StopWith == api.OverlapTerminateOther {
		id := dedup.TerminateCommandID(r.ExecutionID)
		b.sendCommand(b.executionShard(r.ExecutionID), &wire.Command{CommandID: id, Kind: wire.KindTerminate,
			Terminate: &wire.TerminateCommand{ExecutionID: r.ExecutionID, Reason: reason}}, id)
		return
	}
	id := "schedule-cancel:" + r.ExecutionID
	b.sendCommand(b.executionShard(r.ExecutionID), &wire.Command{CommandID: id, Kind: wire.KindCancel,
		Cancel: &wire.CancelCommand{ExecutionID: r.ExecutionID, Reason: reason}}, id)
}

// startFire starts the execution of sc's fire at nominal t: a start
// keyed by the schedule and t goes to the workflow's shard, which
// reports how it went. A fire whose nominal time started an execution
// before (a backfill or trigger over it) is recorded as deduplicated,
// with that execution.
func (b *batch) startFire(sc *store.Schedule, t time.Time, trigger string) {
	def := &sc.Definition
	key := wire.ScheduleKey(sc.ScheduleID, t)
	wfid := schedspec.WorkflowID(def.WorkflowIDTemplate, sc.ScheduleID, t)
	fire := &store.ScheduleFire{Nominal: t, Trigger: trigger, IdempotencyKey: key, WorkflowID: wfid}
	if i := runningAt(sc, t); i >= 0 {
		// The fire of this nominal time runs already (a backfill or a
		// trigger over it): its key would find the same execution.
		fire.Outcome, fire.WorkflowID, fire.ExecutionID = api.FireDeduplicated, sc.Running[i].WorkflowID, sc.Running[i].ExecutionID
		b.recordFire(sc, fire)
		return
	}
	if prior := b.priorFire(sc.ScheduleID, t); prior != nil {
		fire.Outcome, fire.WorkflowID, fire.ExecutionID, fire.ExecutionStatus = api.FireDeduplicated, prior.WorkflowID, prior.ExecutionID, prior.ExecutionStatus
		b.recordFire(sc, fire)
		return
	}
	failed := func(code, msg string) {
		fire.Outcome, fire.Error, fire.Message = api.FireStartFailed, code, msg
		b.recordFire(sc, fire)
	}
	shard, err := b.startShard(def.Workflow, wfid, key)
	if err != nil {
		failed(api.CodeUnavailable, fmt.Sprintf("no store takes the start: %v", err))
		return
	}
	s := &wire.StartCommand{WorkflowName: def.Workflow, WorkflowID: wfid, Input: def.Input, IdempotencyKey: key, TaskQueue: cmp0(def.TaskQueue, wire.DefaultTaskQueue),
		AcceptedAt: b.now, Fingerprint: dedup.Fingerprint(def.Input), StartedBy: "schedule:" + sc.ScheduleID, SearchAttributes: def.SearchAttributes,
		Parent: &wire.ParentRef{Schedule: &wire.ScheduleRef{ScheduleID: sc.ScheduleID, Shard: b.shard, Nominal: t}}}
	// Each fire is its own command: one sent again for the same nominal
	// time (a backfill after a refused start) must not be taken for the
	// first by the broker. The key is what dedupes the execution.
	id := dedup.NewID()
	if !b.sendCommand(shard, &wire.Command{CommandID: id, Kind: wire.KindStart, Start: s}, "sched-start:"+id) {
		failed(api.CodePayloadTooLarge, tooLarge("the schedule's start (its input)"))
		return
	}
	sc.Running = append(sc.Running, store.RunningFire{Nominal: t, Trigger: trigger, WorkflowID: wfid, SentAt: b.now})
	fire.Outcome = api.FireStarting
	b.recordFire(sc, fire)
}

// priorFire is the ledger's fire of schedule id at nominal t that
// started an execution, nil when there is none.
func (b *batch) priorFire(id string, t time.Time) *store.ScheduleFire {
	for _, trigger := range []string{api.FireBySpec, api.FireByTrigger, api.FireByBackfill} {
		if f := b.priorFires[store.FireRef{ScheduleID: id, Nominal: t.UTC(), Trigger: trigger}]; f != nil && f.ExecutionID != "" {
			return f
		}
	}
	return nil
}

// recordFire writes f to sc's ledger, and counts its outcome once it is
// one (a fire starting or buffered is counted when its outcome comes).
func (b *batch) recordFire(sc *store.Schedule, f *store.ScheduleFire) {
	f.ScheduleID, f.Nominal, f.RecordedAt = sc.ScheduleID, f.Nominal.UTC(), b.now
	if f.IdempotencyKey == "" && f.Outcome != api.FirePaused && f.Outcome != api.FireMissedCatchup {
		f.IdempotencyKey = wire.ScheduleKey(sc.ScheduleID, f.Nominal)
	}
	b.priorFires[f.Ref()] = f
	b.writes.Schedules.Fires = append(b.writes.Schedules.Fires, f)
	if f.Outcome != api.FireStarting && f.Outcome != api.FireBuffered && f.ExecutionStatus == "" {
		b.writes.Schedules.Counted = append(b.writes.Schedules.Counted, f.Outcome)
	}
	b.schedChanged[sc.ScheduleID] = true
}

// startBuffered starts sc's buffered fires once none runs: the first,
// and the next each time one closes (or at once, for one whose start
// fails at once). A paused schedule keeps them until it is unpaused.
func (b *batch) startBuffered(sc *store.Schedule) {
	for len(sc.Running) == 0 && len(sc.Buffered) > 0 && !sc.Paused {
		next := sc.Buffered[0]
		sc.Buffered = sc.Buffered[1:]
		b.startFire(sc, next.Nominal, next.Trigger)
	}
}

// scheduleReport applies a report from a fire's workflow shard: the
// start (or its refusal), or the close of its execution's chain.
func (b *batch) scheduleReport(r *wire.ScheduleReport) {
	sc := b.schedules[r.ScheduleID]
	if sc == nil || sc.Unreadable {
		return // deleted since, or set aside
	}
	i := runningAt(sc, r.Nominal)
	if i < 0 {
		return // told before
	}
	run := &sc.Running[i]
	fire := &store.ScheduleFire{Nominal: run.Nominal, Trigger: run.Trigger, WorkflowID: cmp0(r.WorkflowID, run.WorkflowID), ExecutionID: run.ExecutionID,
		Outcome: run.Outcome}
	switch r.What {
	case wire.ReportScheduleStarted:
		if run.ExecutionID != "" {
			return
		}
		run.ExecutionID, run.WorkflowID, run.Outcome = r.ExecutionID, fire.WorkflowID, api.FireStarted
		if r.Deduplicated {
			run.Outcome = api.FireDeduplicated
		}
		fire.ExecutionID, fire.Outcome = r.ExecutionID, run.Outcome
		if r.Status != "" && r.Status != wire.StatusRunning {
			// The key found an execution that has closed since.
			fire.ExecutionStatus = r.Status
			b.recordFire(sc, fire)
			b.counted(fire.Outcome)
			b.fireClosed(sc, i, r.Status)
			return
		}
		b.recordFire(sc, fire)
		if run.Stopping {
			b.stopFire(sc, run)
		}
	case wire.ReportScheduleStartFailed:
		fire.Outcome, fire.Error, fire.Message = api.FireStartFailed, r.Error, r.Message
		sc.Running = slices.Delete(sc.Running, i, i+1)
		b.recordFire(sc, fire)
		b.startBuffered(sc)
	case wire.ReportScheduleClosed:
		fire.ExecutionID = cmp0(fire.ExecutionID, r.ExecutionID)
		if fire.Outcome == "" {
			// Its start was not told (a close can overtake it only if
			// the start's report was lost): it started.
			fire.Outcome = api.FireStarted
			b.counted(fire.Outcome)
		}
		fire.ExecutionStatus = r.Status
		b.recordFire(sc, fire)
		b.fireClosed(sc, i, r.Status)
	}
}

// counted counts an outcome recordFire did not (one written with the
// execution's close at once).
func (b *batch) counted(outcome string) {
	b.writes.Schedules.Counted = append(b.writes.Schedules.Counted, outcome)
}

// fireClosed drops sc's running fire i, whose execution closed with
// status: a failure pauses a schedule that pauses on failure, and the
// buffered fires start.
func (b *batch) fireClosed(sc *store.Schedule, i int, status string) {
	nominal := sc.Running[i].Nominal
	sc.Running = slices.Delete(sc.Running, i, i+1)
	if sc.Definition.PauseOnFailure && (status == wire.StatusFailed || status == wire.StatusTimedOut) && !sc.Paused {
		sc.Paused = true
		sc.Note = fmt.Sprintf("paused on failure: the execution of the fire at %s closed %s", nominal.Format(time.RFC3339Nano), status)
		spec, err := schedspec.Parse(sc.Definition.Spec)
		if err == nil {
			// Its next due time loses its jitter: paused times are
			// recorded as they pass.
			b.advanceSchedule(sc, spec)
		}
	}
	sc.UpdatedAt = b.now
	b.startBuffered(sc)
}

// reportScheduleStart tells the schedule whose fire s is how it went:
// out is its outcome.
func (b *batch) reportScheduleStart(s *wire.StartCommand, out wire.Outcome) {
	ref := s.Parent.Schedule
	r := &wire.ScheduleReport{ScheduleID: ref.ScheduleID, Nominal: ref.Nominal, What: wire.ReportScheduleStarted, ExecutionID: out.ExecutionID,
		WorkflowID: out.WorkflowID, Status: out.Status, Deduplicated: out.Deduplicated}
	if r.Status == wire.StatusContinuedAsNew {
		// The key found the first run of a chain: the chain stands as its
		// newest run does, as far as the batch knows it; one not known
		// runs on, and its close is told when its last run closes.
		r.Status = wire.StatusRunning
		if e := b.newest(b.execs[out.ExecutionID]); e != nil && e.Status != wire.StatusContinuedAsNew {
			r.Status = e.Status
		}
	}
	if out.Error != "" {
		r.What, r.ExecutionID, r.Status, r.Error, r.Message = wire.ReportScheduleStartFailed, "", "", out.Error, out.Message
	}
	id := "report:schedule-start:" + out.CommandID
	b.sendCommand(ref.Shard, &wire.Command{CommandID: id, Kind: wire.KindReport, Report: &wire.Report{What: r.What, Schedule: r}}, id)
}

// reportScheduleClosed tells the schedule that started e's chain that
// it closed as it did.
func (b *batch) reportScheduleClosed(e *store.Execution) {
	ref := e.Parent.Schedule
	r := &wire.ScheduleReport{ScheduleID: ref.ScheduleID, Nominal: ref.Nominal, What: wire.ReportScheduleClosed, ExecutionID: e.Chain(),
		WorkflowID: e.WorkflowID, Status: e.Status}
	id := "report:schedule-closed:" + e.ExecutionID
	b.sendCommand(ref.Shard, &wire.Command{CommandID: id, Kind: wire.KindReport, Report: &wire.Report{What: r.What, Schedule: r}}, id)
}

// finishSchedules puts what the batch changed of schedules in its
// writes: each changed schedule whole, or its deletion, and no ledger
// row of a schedule deleted.
func (b *batch) finishSchedules() {
	w := &b.writes.Schedules
	for id := range b.schedChanged {
		if sc := b.schedules[id]; sc != nil {
			w.Put = append(w.Put, sc)
		} else {
			w.Deleted = append(w.Deleted, id)
		}
	}
	slices.SortFunc(w.Put, func(a, c *store.Schedule) int { return strings.Compare(a.ScheduleID, c.ScheduleID) })
	slices.Sort(w.Deleted)
	w.Fires = slices.DeleteFunc(w.Fires, func(f *store.ScheduleFire) bool { return b.schedules[f.ScheduleID] == nil })
}

// fireSchedules decides the nominal times due at now of up to limit of
// the shard's schedules, in tx; it returns what to write (nil: none was
// due) and how many schedules it advanced.
func fireSchedules(ctx context.Context, tx store.Tx, env applyEnv, applied int64, now time.Time, limit int) (*store.Writes, int, error) {
	due, bad, err := store.DueSchedules(ctx, tx, env.shard, now, limit)
	if err != nil || len(due)+len(bad) == 0 {
		return nil, 0, err
	}
	b := newBatch(ctx, env, now.UTC(), applied)
	for id, why := range bad {
		// Not one this version can read: set aside, so that it does not
		// stop the shard's other schedules.
		b.log.Error("a schedule's row cannot be read: it fires no more until it is replaced", "schedule_id", id, "err", why)
		b.writes.Schedules.SetAside = append(b.writes.Schedules.SetAside, id)
	}
	for _, sc := range due {
		b.schedules[sc.ScheduleID] = sc
		b.advanceDue(sc)
		// Its ledger keeps what the executions it started are kept for.
		b.writes.Schedules.Prune = append(b.writes.Schedules.Prune, store.FirePrune{ScheduleID: sc.ScheduleID,
			Before: b.now.Add(-b.retention.For(sc.Definition.Workflow))})
	}
	b.finishSchedules()
	return &b.writes, len(due) + len(bad), nil
}

// advanceDue advances sc, which is due.
func (b *batch) advanceDue(sc *store.Schedule) {
	b.schedChanged[sc.ScheduleID] = true
	spec, err := schedspec.Parse(sc.Definition.Spec)
	if err != nil {
		// Not one this version can fire (ingest validated it): it is
		// left alone, not retried, and does not stop the shard.
		b.log.Error("a schedule's spec does not parse: it does not fire", "schedule_id", sc.ScheduleID, "err", err)
		sc.NextDue = nil
		return
	}
	b.advanceSchedule(sc, spec)
}
