package scheduler

import (
	"time"

	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/wire"
)

// validCommand says whether c is a command the scheduler can apply; one
// that is not is set aside as dead. A signal, cancellation or termination
// whose execution id is not in the canonical form is valid: it names no
// execution, and is answered 404 as one naming an execution that does
// not exist, so that a caller cannot fill the dead commands with ids
// (ingest refuses such ids before publishing).
func validCommand(c *wire.Command) bool {
	switch c.Kind {
	case wire.KindStart:
		return c.Start != nil && c.Start.WorkflowName != "" && c.Start.WorkflowID != "" && c.Start.TaskQueue != "" && validPolicy(c.Start)
	case wire.KindWorkflowTaskCompleted:
		return c.WorkflowTask != nil && validUUID(c.WorkflowTask.ExecutionID)
	case wire.KindActivityResult:
		return c.Activity != nil && validUUID(c.Activity.ExecutionID)
	case wire.KindSignal:
		return c.Signal != nil && c.Signal.SignalName != ""
	case wire.KindActivityHeartbeat:
		return c.Heartbeat != nil && validUUID(c.Heartbeat.ExecutionID)
	case wire.KindCancel:
		return c.Cancel != nil
	case wire.KindTerminate:
		return c.Terminate != nil
	case wire.KindSignalWithStart:
		return c.Start != nil && c.Signal != nil && c.Start.WorkflowName != "" && c.Start.WorkflowID != "" && c.Signal.SignalName != ""
	case wire.KindDuplicate:
		return validDuplicate(c.Duplicate)
	}
	return false
}

// validUUID says whether s is an execution id in its canonical form: 36
// characters, lower-case hex digits with hyphens, as the scheduler mints
// them and as they are stored. The stores, the caches and the subjects
// compare ids as strings, so another spelling of the same UUID would not
// find its execution.
func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// validDuplicate says whether d names one layer and one key: a start's,
// an execution's signal's, or a signal-with-start's signal's.
func validDuplicate(d *wire.DuplicateCommand) bool {
	if d == nil || (d.Layer != wire.DuplicateBroker && d.Layer != wire.DuplicateReplay) {
		return false
	}
	switch {
	case d.IdempotencyKey != "":
		return d.WorkflowName != "" && d.ExecutionID == "" && d.WorkflowID == "" && d.SignalKey == ""
	case d.ExecutionID != "":
		return validUUID(d.ExecutionID) && d.SignalKey != "" && d.WorkflowName == "" && d.WorkflowID == ""
	default:
		return d.WorkflowName != "" && d.WorkflowID != "" && d.SignalKey != ""
	}
}

// validPolicy says whether a start's policy, if it has one, is one the
// scheduler can apply: a known kind with its parameters in range, on a
// start as ingest makes them under a policy (no idempotency key, reuse
// policy or delay; a minted workflow_id).
func validPolicy(s *wire.StartCommand) bool {
	p := s.Policy
	if p == nil {
		return true
	}
	if s.IdempotencyKey != "" || !s.WorkflowIDMinted || s.ReusePolicy != "" || s.StartAt != nil || len(p.Key) > startpolicy.MaxKeyBytes {
		return false
	}
	inRange := func(d time.Duration) bool { return d > 0 && d <= startpolicy.MaxPeriod }
	switch p.Kind {
	case wire.PolicyThrottle:
		return p.Limit > 0 && p.Limit <= startpolicy.MaxLimit && inRange(p.Period)
	case wire.PolicyDebounce:
		return inRange(p.Period)
	case wire.PolicyBatch:
		return p.MaxSize > 0 && p.MaxSize <= startpolicy.MaxBatchSize && inRange(p.MaxWait)
	}
	return false
}
