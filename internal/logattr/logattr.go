package logattr

import (
	"log/slog"

	"github.com/harvest-engine/harvest/internal/wire"
)

// The attribute keys.
const (
	ExecutionID = "execution_id"
	Workflow    = "workflow"
	CommandID   = "command_id"
	Activity    = "activity"
	ActivityID  = "activity_id"
	Attempt     = "attempt"
)

// Execution returns the attributes of a line about execution executionID
// of workflow, with commandID the command in hand; empty values are left
// out (a start's execution id is not known before the scheduler applies
// it; most lines have no command).
func Execution(executionID, workflow, commandID string) []any {
	args := make([]any, 0, 6)
	if executionID != "" {
		args = append(args, slog.String(ExecutionID, executionID))
	}
	if workflow != "" {
		args = append(args, slog.String(Workflow, workflow))
	}
	if commandID != "" {
		args = append(args, slog.String(CommandID, commandID))
	}
	return args
}

// With returns log with Execution's attributes, and more after them.
func With(log *slog.Logger, executionID, workflow, commandID string, more ...any) *slog.Logger {
	return log.With(append(Execution(executionID, workflow, commandID), more...)...)
}

// Command returns log with the attributes of cmd, as far as cmd tells
// them: its id, the workflow a start names, the execution the other kinds
// name. (Those others do not carry their workflow's name; a caller that
// knows it uses With.)
func Command(log *slog.Logger, cmd *wire.Command) *slog.Logger {
	executionID, workflow := Of(cmd)
	return With(log, executionID, workflow, cmd.CommandID)
}

// Of returns the execution id and the workflow name cmd carries, either
// empty when it does not carry it.
func Of(cmd *wire.Command) (executionID, workflow string) {
	if cmd.Start != nil {
		workflow = cmd.Start.WorkflowName
	}
	switch {
	case cmd.Signal != nil:
		executionID = cmd.Signal.ExecutionID // empty for a signal-with-start
	case cmd.Cancel != nil:
		executionID = cmd.Cancel.ExecutionID
	case cmd.Terminate != nil:
		executionID = cmd.Terminate.ExecutionID
	case cmd.Reset != nil:
		executionID = cmd.Reset.ExecutionID
	case cmd.Activity != nil:
		executionID = cmd.Activity.ExecutionID
	case cmd.WorkflowTask != nil:
		executionID = cmd.WorkflowTask.ExecutionID
	case cmd.Heartbeat != nil:
		executionID = cmd.Heartbeat.ExecutionID
	}
	return executionID, workflow
}

// ActivityAttempt returns the attributes of a line about attempt attempt
// of activity id, named name (left out when empty: not known).
func ActivityAttempt(name string, id, attempt int) []any {
	args := make([]any, 0, 3)
	if name != "" {
		args = append(args, slog.String(Activity, name))
	}
	return append(args, slog.Int(ActivityID, id), slog.Int(Attempt, attempt))
}
