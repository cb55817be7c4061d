package wire

import (
	"time"

	"github.com/harvest-engine/harvest/api"
)

// Schedules (docs/schedules.md). A schedule lives on the shard its id
// goes to (placement: "schedule", id), whose scheduler fires it from
// PostgreSQL: each fire puts on the workflow's shard a start keyed by the
// schedule and its nominal time (ScheduleKey), whose execution names the
// schedule (ParentRef.Schedule); that shard reports to the schedule's
// the start and, when the execution's chain closes, how
// (Report.Schedule).

// KindSchedule changes a schedule (ScheduleCommand).
const KindSchedule = "schedule"

// What a ScheduleCommand does (ScheduleCommand.Op).
const (
	ScheduleOpPut      = "put"
	ScheduleOpDelete   = "delete"
	ScheduleOpPause    = "pause"
	ScheduleOpUnpause  = "unpause"
	ScheduleOpTrigger  = "trigger"
	ScheduleOpBackfill = "backfill"
)

// Where a schedule comes from (ScheduleCommand.Source).
const (
	ScheduleSourceAPI    = "api"
	ScheduleSourceConfig = "config"
)

// ScheduleCommand creates, replaces, deletes, pauses, unpauses, triggers
// or backfills the schedule ScheduleID, on its shard.
type ScheduleCommand struct {
	ScheduleID string `json:"schedule_id"`
	Op         string `json:"op"`
	// Definition is a put's schedule, validated and with its defaults
	// filled in by ingest.
	Definition *api.ScheduleRequest `json:"definition,omitempty"`
	Source     string               `json:"source,omitempty"`
	Note       string               `json:"note,omitempty"`
	// At is a trigger's nominal time: when ingest accepted it.
	At time.Time `json:"at,omitzero"`
	// Start, End and Overlap are a backfill's.
	Start   time.Time `json:"start,omitzero"`
	End     time.Time `json:"end,omitzero"`
	Overlap string    `json:"overlap,omitempty"`
}

// ScheduleRef is the schedule fire that started an execution.
type ScheduleRef struct {
	ScheduleID string `json:"schedule_id"`
	// Shard is the schedule's shard, where reports go.
	Shard   int       `json:"shard"`
	Nominal time.Time `json:"nominal"`
}

// What a schedule report tells (ScheduleReport.What).
const (
	ReportScheduleStarted     = "schedule_started"
	ReportScheduleStartFailed = "schedule_start_failed"
	ReportScheduleClosed      = "schedule_closed"
)

// ScheduleReport tells a schedule how one of its fires went: its start
// (the execution, and whether the key found one that existed), its
// refusal, or its execution's close.
type ScheduleReport struct {
	ScheduleID   string    `json:"schedule_id"`
	Nominal      time.Time `json:"nominal"`
	What         string    `json:"what"`
	ExecutionID  string    `json:"execution_id,omitempty"`
	WorkflowID   string    `json:"workflow_id,omitempty"`
	Status       string    `json:"status,omitempty"`
	Deduplicated bool      `json:"deduplicated,omitempty"`
	Error        string    `json:"error,omitempty"`
	Message      string    `json:"message,omitempty"`
}

// ScheduleKey is the idempotency key of a schedule's fire at nominal:
// sched:<id>:<RFC 3339 nominal time, UTC>.
func ScheduleKey(scheduleID string, nominal time.Time) string {
	return "sched:" + scheduleID + ":" + nominal.UTC().Format(time.RFC3339Nano)
}
