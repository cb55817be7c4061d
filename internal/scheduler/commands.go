package scheduler

import (
	"maps"
	"slices"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// commandKind is what the scheduler does with one kind of command. Every
// step of the apply (validating a delivery, gathering the batch's reads,
// applying, counting) goes by this table, so that a new kind of command is
// added here once.
type commandKind struct {
	// valid says whether c carries what applying it needs; one that does
	// not is set aside as dead.
	valid func(c *wire.Command) bool
	// gather adds what applying c reads to the batch's reads; nil for a
	// kind that reads nothing.
	gather func(g *gathering, c seqCommand)
	// apply applies c to the batch.
	apply func(b *batch, c seqCommand)
}

// commandKinds are the commands the scheduler applies, by wire kind.
var commandKinds = map[string]commandKind{
	wire.KindStart: {
		valid: func(c *wire.Command) bool {
			return c.Start != nil && c.Start.WorkflowName != "" && c.Start.WorkflowID != "" && c.Start.TaskQueue != "" && validPolicy(c.Start) && validVersioning(c.Start)
		},
		gather: (*gathering).start,
		apply: func(b *batch, c seqCommand) {
			if c.cmd.Start.Policy != nil {
				b.policyStart(c)
				return
			}
			b.lastOut = wire.Outcome{}
			b.start(c)
			// A child's start tells its parent how it went.
			b.reportChildStart(c.cmd.Start, b.lastOut)
		},
	},
	wire.KindWorkflowTaskCompleted: {
		valid: func(c *wire.Command) bool { return c.WorkflowTask != nil && validUUID(c.WorkflowTask.ExecutionID) },
		gather: func(g *gathering, c seqCommand) {
			g.execution(c.cmd.WorkflowTask.ExecutionID)
			// The activities its decisions give up are read, to close
			// them (and those of the speculative task it carries).
			for r := c.cmd.WorkflowTask; r != nil; r = r.Next {
				for _, d := range r.Decisions {
					if d.Type == wire.DecisionRequestCancelActivity && d.ActivityID > 0 {
						g.activity(r.ExecutionID, d.ActivityID)
					}
				}
			}
		},
		apply: func(b *batch, c seqCommand) { b.workflowTaskCompleted(c.cmd.WorkflowTask) },
	},
	wire.KindActivityResult: {
		valid: func(c *wire.Command) bool { return c.Activity != nil && validUUID(c.Activity.ExecutionID) },
		gather: func(g *gathering, c seqCommand) {
			g.activity(c.cmd.Activity.ExecutionID, c.cmd.Activity.ActivityID)
		},
		apply: func(b *batch, c seqCommand) { b.activityResult(c.cmd.Activity) },
	},
	wire.KindActivityHeartbeat: {
		valid: func(c *wire.Command) bool { return c.Heartbeat != nil && validUUID(c.Heartbeat.ExecutionID) },
		gather: func(g *gathering, c seqCommand) {
			g.activity(c.cmd.Heartbeat.ExecutionID, c.cmd.Heartbeat.ActivityID)
		},
		apply: func(b *batch, c seqCommand) { b.heartbeat(c.cmd.Heartbeat) },
	},
	// A signal's, a cancellation's and a termination's execution id in
	// another form than the canonical one names no execution: the command
	// is valid, its execution is not looked up (PostgreSQL could refuse
	// the id), and it is answered 404, as for an execution that does not
	// exist, so that a caller cannot fill the dead commands with ids
	// (ingest refuses such ids before publishing).
	wire.KindSignal: {
		valid: func(c *wire.Command) bool { return c.Signal != nil && c.Signal.SignalName != "" },
		gather: func(g *gathering, c seqCommand) {
			sg := c.cmd.Signal
			if sg.ExecutionID == "" && sg.WorkflowID != "" {
				// A workflow code's signal to a workflow_id: its latest
				// execution, whose chain's key claim is read after it.
				g.readFree = false
				g.workflow(store.WorkflowRef{WorkflowName: sg.WorkflowName, WorkflowID: sg.WorkflowID})
				return
			}
			if !validUUID(sg.ExecutionID) {
				return
			}
			g.execution(sg.ExecutionID)
			if sg.IdempotencyKey != "" {
				g.sigRefs = append(g.sigRefs, store.SignalRef{ExecutionID: sg.ExecutionID, IdempotencyKey: sg.IdempotencyKey})
			}
		},
		apply: func(b *batch, c seqCommand) {
			b.lastOut = wire.Outcome{}
			b.signal(c)
			// A workflow code's signal tells its sender how it went.
			b.reportSignal(c.cmd.Signal, b.lastOut)
		},
	},
	wire.KindReport: {
		valid: func(c *wire.Command) bool {
			r := c.Report
			if r != nil && r.Batch != nil {
				return r.Child == nil && r.Signal == nil && r.Schedule == nil && validUUID(r.Batch.BatchID) && validUUID(r.Batch.ExecutionID)
			}
			if r != nil && r.Schedule != nil {
				return r.Child == nil && r.Signal == nil && r.Schedule.ScheduleID != ""
			}
			return r != nil && validUUID(r.ExecutionID) && (r.Child != nil) != (r.Signal != nil)
		},
		gather: func(g *gathering, c seqCommand) {
			if r := c.cmd.Report; r.Batch != nil {
				return
			} else if r.Schedule != nil {
				g.schedule(r.Schedule.ScheduleID)
				return
			}
			g.execution(c.cmd.Report.ExecutionID)
		},
		apply: func(b *batch, c seqCommand) {
			if r := c.cmd.Report; r.Batch != nil {
				b.batchReport(r.Batch)
				return
			} else if r.Schedule != nil {
				b.scheduleReport(r.Schedule)
				return
			}
			b.report(c)
		},
	},
	wire.KindSchedule: {
		valid: func(c *wire.Command) bool {
			s := c.Schedule
			return s != nil && s.ScheduleID != "" && (s.Op != wire.ScheduleOpPut || s.Definition != nil)
		},
		gather: func(g *gathering, c seqCommand) {
			s := c.cmd.Schedule
			g.schedule(s.ScheduleID)
			// A trigger or a backfill looks its nominal times up in the
			// ledger: one that started an execution before is not
			// started again.
			switch s.Op {
			case wire.ScheduleOpTrigger:
				g.fireRanges = append(g.fireRanges, store.FireRange{ScheduleID: s.ScheduleID, From: s.At, To: s.At})
			case wire.ScheduleOpBackfill:
				g.fireRanges = append(g.fireRanges, store.FireRange{ScheduleID: s.ScheduleID, From: s.Start, To: s.End})
			}
		},
		apply: (*batch).scheduleCommand,
	},
	wire.KindCancel: {
		valid: func(c *wire.Command) bool { return c.Cancel != nil },
		gather: func(g *gathering, c seqCommand) {
			if validUUID(c.cmd.Cancel.ExecutionID) {
				g.execution(c.cmd.Cancel.ExecutionID)
			}
		},
		apply: (*batch).cancelCommand,
	},
	wire.KindBatch: {
		valid: func(c *wire.Command) bool {
			bc := c.Batch
			if bc == nil || !validUUID(bc.BatchID) {
				return false
			}
			return bc.Op == wire.BatchOpCancel || bc.Op == wire.BatchOpCreate && validBatchSpec(bc.Spec)
		},
		apply: (*batch).batchCommand,
	},
	wire.KindReset: {
		valid: func(c *wire.Command) bool { return c.Reset != nil && (c.Reset.PointSeq > 0 || c.Reset.Target != nil) },
		gather: func(g *gathering, c seqCommand) {
			// It reads the execution's history while it applies.
			g.readFree = false
			if validUUID(c.cmd.Reset.ExecutionID) {
				g.execution(c.cmd.Reset.ExecutionID)
			}
		},
		apply: (*batch).resetCommand,
	},
	wire.KindTerminate: {
		valid: func(c *wire.Command) bool { return c.Terminate != nil },
		gather: func(g *gathering, c seqCommand) {
			if validUUID(c.cmd.Terminate.ExecutionID) {
				g.execution(c.cmd.Terminate.ExecutionID)
			}
		},
		apply: func(b *batch, c seqCommand) {
			b.closeCommand(c, wire.KindTerminate, c.cmd.Terminate.ExecutionID, c.cmd.Terminate.Reason, terminating)
		},
	},
	wire.KindSignalWithStart: {
		valid: func(c *wire.Command) bool {
			return c.Start != nil && c.Signal != nil && c.Start.WorkflowName != "" && c.Start.WorkflowID != "" && c.Signal.SignalName != "" && validVersioning(c.Start)
		},
		gather: func(g *gathering, c seqCommand) {
			// Its signal's key is looked up once its workflow_id's
			// execution is known: a second round trip.
			g.readFree = false
			g.workflow(store.WorkflowRef{WorkflowName: c.cmd.Start.WorkflowName, WorkflowID: c.cmd.Start.WorkflowID})
		},
		apply: (*batch).signalWithStart,
	},
	wire.KindWorkflowTaskFailed: {
		valid: func(c *wire.Command) bool {
			return c.TaskFailure != nil && validUUID(c.TaskFailure.ExecutionID) && c.TaskFailure.Reason != ""
		},
		gather: func(g *gathering, c seqCommand) {
			g.execution(c.cmd.TaskFailure.ExecutionID)
		},
		apply: func(b *batch, c seqCommand) { b.workflowTaskFailed(c.cmd.TaskFailure) },
	},
	wire.KindUpdate: {
		valid: func(c *wire.Command) bool {
			return c.Update != nil && c.Update.Name != "" && validUUID(c.Update.UpdateID)
		},
		gather: func(g *gathering, c seqCommand) {
			// Its key is looked up under its execution's chain once the
			// execution is read: a second round trip.
			g.readFree = false
			if validUUID(c.cmd.Update.ExecutionID) {
				g.execution(c.cmd.Update.ExecutionID)
			}
		},
		apply: (*batch).update,
	},
	wire.KindDuplicate: {
		valid: func(c *wire.Command) bool { return validDuplicate(c.Duplicate) },
		apply: func(b *batch, c seqCommand) { b.duplicate(c.cmd.Duplicate) },
	},
}

// commandKindNames are the kinds of commandKinds, sorted.
func commandKindNames() []string { return slices.Sorted(maps.Keys(commandKinds)) }

// gathering is what a batch's commands read, gathered before the batch
// reads it in one round trip, so that each table is read once.
type gathering struct {
	b            *batch
	newClaims    []store.NewClaim
	wfRefs       []store.WorkflowRef
	execIDs      []string
	actRefs      []store.ActivityRef
	sigRefs      []store.SignalRef
	policyRefs   []store.PolicyRef
	policyCmdIDs []string
	seenPolicy   map[store.PolicyRef]bool
	seenWf       map[store.WorkflowRef]bool
	seenExecIDs  map[string]bool
	scheduleIDs  []string
	fireRanges   []store.FireRange
	// readFree says whether the batch can go without reads: no key used
	// twice, no signal-with-start, no activity or signal rows to read.
	readFree bool
}

func (g *gathering) execution(id string) {
	if !g.seenExecIDs[id] {
		g.seenExecIDs[id] = true
		g.execIDs = append(g.execIDs, id)
	}
}

// schedule gathers a schedule's row: a batch that changes one reads.
func (g *gathering) schedule(id string) {
	g.readFree = false
	if !slices.Contains(g.scheduleIDs, id) {
		g.scheduleIDs = append(g.scheduleIDs, id)
	}
}

func (g *gathering) activity(executionID string, activityID int) {
	g.execution(executionID)
	g.actRefs = append(g.actRefs, store.ActivityRef{ExecutionID: executionID, ActivityID: activityID})
}

func (g *gathering) workflow(ref store.WorkflowRef) {
	if !g.seenWf[ref] {
		g.seenWf[ref] = true
		g.wfRefs = append(g.wfRefs, ref)
	}
}

// start gathers a start's reads: its policy's keys and prior outcomes
// under a start policy; else the claim of its key, taken for an
// execution id minted now, and its workflow_id's latest execution.
func (g *gathering) start(c seqCommand) {
	s := c.cmd.Start
	if p := s.Policy; p != nil {
		g.readFree = false
		ref := store.PolicyRef{WorkflowName: s.WorkflowName, Kind: p.Kind, Key: p.Key}
		if !g.seenPolicy[ref] {
			g.seenPolicy[ref] = true
			g.policyRefs = append(g.policyRefs, ref)
		}
		g.policyCmdIDs = append(g.policyCmdIDs, c.cmd.CommandID)
		if p.Kind == wire.PolicyConcurrency {
			// Its execution is created now, as any start's: its key's
			// claim and its workflow_id are read too.
			g.startReads(c)
			return
		}
		if p.Kind == wire.PolicyThrottle {
			// It may begin at once, as any start, which looks up its
			// workflow_id.
			g.workflow(store.WorkflowRef{WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID})
		}
		return
	}
	g.startReads(c)
}

// startReads gathers a start's claim of its key, taken for an execution
// id minted now, and its workflow_id's latest execution.
func (g *gathering) startReads(c seqCommand) {
	s := c.cmd.Start
	if s.IdempotencyKey != "" {
		ref := store.ClaimRef{WorkflowName: s.WorkflowName, IdempotencyKey: s.IdempotencyKey}
		if _, ok := g.b.tentative[ref]; !ok {
			id := g.b.mintExecutionID()
			g.b.tentative[ref] = id
			g.newClaims = append(g.newClaims, store.NewClaim{ClaimRef: ref, ExecutionID: id, Fingerprint: s.Fingerprint})
		} else {
			g.readFree = false
		}
	}
	g.workflow(store.WorkflowRef{WorkflowName: s.WorkflowName, WorkflowID: s.WorkflowID})
}

// validCommand says whether c is a command the scheduler can apply; one
// that is not is set aside as dead.
func validCommand(c *wire.Command) bool {
	k, ok := commandKinds[c.Kind]
	return ok && k.valid(c)
}
