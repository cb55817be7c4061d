package scheduler

import (
	"log/slog"

	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/wire"
)

// logFor is b.log with the attributes of a line about execution
// executionID (logattr): its workflow, when the batch has the execution,
// and the command being applied, if any; more follows them.
func (b *batch) logFor(executionID string, more ...any) *slog.Logger {
	workflow := ""
	if e := b.execs[executionID]; e != nil {
		workflow = e.WorkflowName
	}
	commandID := ""
	if b.cmd != nil {
		commandID = b.cmd.CommandID
	}
	return logattr.With(b.log, executionID, workflow, commandID, more...)
}

// eventLogAttrs are the attributes of a history event's debug line that
// its attrs tell: the activity, the signal or the timer it is about.
func eventLogAttrs(typ string, seq int, attrs any) []any {
	args := []any{"event", typ, "seq", seq}
	switch a := attrs.(type) {
	case wire.ActivityScheduledAttrs:
		args = append(args, logattr.Activity, a.ActivityName, logattr.ActivityID, a.ActivityID)
	case wire.ActivityClosedAttrs:
		args = append(args, logattr.ActivityAttempt(a.ActivityName, a.ActivityID, a.Attempt)...)
		if a.Failure != nil {
			args = append(args, "failure", a.Failure.Type)
		}
	case wire.SignalReceivedAttrs:
		args = append(args, "signal", a.SignalName)
	case wire.TimerAttrs:
		args = append(args, "timer_id", a.TimerID)
	}
	return args
}
