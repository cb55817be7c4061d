package api

import (
	"encoding/json"
	"time"
)

// Schedules (docs/schedules.md): a workflow started at the times a spec
// gives, each fire an idempotent start keyed by the schedule and its
// nominal time.

// ScheduleSpec is when a schedule fires: at every time one of Cron gives
// and every Every, in Timezone, from StartAt until EndAt, each fire put
// off by up to Jitter.
type ScheduleSpec struct {
	// Cron holds cron expressions: five fields (minute, hour, day of
	// month, month, day of week), or six with seconds first, or one of
	// @yearly, @monthly, @weekly, @daily, @hourly.
	Cron []string `json:"cron,omitempty" yaml:"cron"`
	// Every fires at a fixed interval ("15m", at least 1s), counted from
	// StartAt, or else from the Unix epoch.
	Every string `json:"every,omitempty" yaml:"every"`
	// Timezone is an IANA time zone name ("Europe/Berlin"); empty is UTC.
	Timezone string `json:"timezone,omitempty" yaml:"timezone"`
	// StartAt and EndAt bound the nominal times, both included.
	StartAt *time.Time `json:"start_at,omitempty" yaml:"start_at"`
	EndAt   *time.Time `json:"end_at,omitempty" yaml:"end_at"`
	// Jitter puts each fire off by a fixed amount up to it ("30s"), the
	// same for a nominal time however often it is computed; no longer
	// than the interval between fires.
	Jitter string `json:"jitter,omitempty" yaml:"jitter"`
	// RepeatedTime says which of a local time that occurs twice (as
	// daylight-saving time ends) fires: "first" (the default) or "both".
	RepeatedTime string `json:"repeated_time,omitempty" yaml:"repeated_time"`
}

// The values of ScheduleSpec.RepeatedTime.
const (
	RepeatedTimeFirst = "first"
	RepeatedTimeBoth  = "both"
)

// Overlap policies: what a fire does while an execution an earlier fire
// started still runs (ScheduleRequest.Overlap).
const (
	// OverlapSkip records the fire as skipped_overlap (the default).
	OverlapSkip = "skip"
	// OverlapBufferOne keeps one fire, started when the running ones
	// close; further fires meanwhile are skipped.
	OverlapBufferOne = "buffer_one"
	// OverlapBufferAll keeps every fire, up to MaxBufferedFires, started
	// one after another as each closes.
	OverlapBufferAll = "buffer_all"
	// OverlapCancelOther asks the running ones to cancel, and starts the
	// fire once they close.
	OverlapCancelOther = "cancel_other"
	// OverlapTerminateOther terminates the running ones, and starts the
	// fire once they close.
	OverlapTerminateOther = "terminate_other"
	// OverlapAllowAll starts every fire.
	OverlapAllowAll = "allow_all"
)

// MaxBufferedFires bounds the fires a buffer_all schedule keeps waiting.
const MaxBufferedFires = 100

// ScheduleRequest is the body of PUT /api/harvest/schedules/{id}, and a
// schedule declared in the configuration (schedules:).
type ScheduleRequest struct {
	// Workflow is the workflow each fire starts.
	Workflow  string          `json:"workflow" yaml:"workflow"`
	Input     json.RawMessage `json:"input,omitempty" yaml:"-"`
	TaskQueue string          `json:"task_queue,omitempty" yaml:"task_queue"`
	Spec      ScheduleSpec    `json:"spec" yaml:"spec"`
	// Overlap is one of the Overlap constants; empty is skip.
	Overlap string `json:"overlap,omitempty" yaml:"overlap"`
	// CatchupWindow ("1h", the default) is how late a fire may still
	// start, after the schedule's shard was down: older ones are recorded
	// as missed_catchup.
	CatchupWindow string `json:"catchup_window,omitempty" yaml:"catchup_window"`
	// PauseOnFailure pauses the schedule when an execution it started
	// fails or times out.
	PauseOnFailure bool `json:"pause_on_failure,omitempty" yaml:"pause_on_failure"`
	// WorkflowIDTemplate makes each fire's workflow_id: {schedule_id},
	// {nominal_time} (RFC 3339, UTC) and {nominal_unix} are replaced.
	// Empty is "{schedule_id}-{nominal_time}".
	WorkflowIDTemplate string `json:"workflow_id_template,omitempty" yaml:"workflow_id_template"`
	// Paused creates (or replaces) the schedule paused, with Note.
	Paused bool   `json:"paused,omitempty" yaml:"paused"`
	Note   string `json:"note,omitempty" yaml:"note"`
	// SearchAttributes are each fire's execution's search attributes,
	// as a start's (StartRequest.SearchAttributes; 400
	// invalid_search_attribute).
	SearchAttributes map[string]json.RawMessage `json:"search_attributes,omitempty" yaml:"-"`
}

// Schedule is a schedule as GET /api/harvest/schedules/{id} answers it,
// and as PUT answers (201 created, 200 replaced).
type Schedule struct {
	ScheduleID         string          `json:"schedule_id"`
	Workflow           string          `json:"workflow"`
	Input              json.RawMessage `json:"input,omitempty"`
	TaskQueue          string          `json:"task_queue"`
	Spec               ScheduleSpec    `json:"spec"`
	Overlap            string          `json:"overlap"`
	CatchupWindow      string          `json:"catchup_window"`
	PauseOnFailure     bool            `json:"pause_on_failure"`
	WorkflowIDTemplate string          `json:"workflow_id_template"`
	Paused             bool            `json:"paused"`
	Note               string          `json:"note,omitempty"`
	// SearchAttributes are each fire's execution's, if the schedule
	// sets any.
	SearchAttributes map[string]json.RawMessage `json:"search_attributes,omitempty"`
	// Source is "api", or "config" for a schedule the configuration
	// declares (reconciled at start-up).
	Source string `json:"source"`
	// NextFires are the next nominal times, up to five (none once past
	// the spec's end_at), and when each is due, jitter added.
	NextFires []ScheduleNextFire `json:"next_fires"`
	// Running are the fires whose executions have not closed (or whose
	// start is not yet known); Buffered the fires waiting for them.
	Running   []ScheduleFire `json:"running"`
	Buffered  []time.Time    `json:"buffered"`
	LastFire  *ScheduleFire  `json:"last_fire,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
}

// ScheduleNextFire is one of a schedule's next fires.
type ScheduleNextFire struct {
	NominalTime time.Time `json:"nominal_time"`
	DueAt       time.Time `json:"due_at"`
}

// Outcomes of a fire (ScheduleFire.Outcome).
const (
	// FireStarting: its start is on its way to the workflow's shard.
	FireStarting = "starting"
	// FireStarted: it started ExecutionID.
	FireStarted = "started"
	// FireDeduplicated: an execution its key names existed already (a
	// backfill or trigger over a fired time): ExecutionID.
	FireDeduplicated = "deduplicated"
	// FireSkippedOverlap: an earlier fire's execution still ran.
	FireSkippedOverlap = "skipped_overlap"
	// FireBuffered: it waits for an earlier fire's execution to close.
	FireBuffered = "buffered"
	// FireMissedCatchup: it was due longer ago than the catch-up window
	// when the schedule's shard could fire it.
	FireMissedCatchup = "missed_catchup"
	// FirePaused: the schedule was paused at its time.
	FirePaused = "paused"
	// FireStartFailed: its start was refused (Error, Message).
	FireStartFailed = "start_failed"
)

// What made a fire (ScheduleFire.Trigger).
const (
	FireBySpec     = "spec"
	FireByTrigger  = "trigger"
	FireByBackfill = "backfill"
)

// ScheduleFire is one entry of a schedule's ledger of fires
// (GET /api/harvest/schedules/{id}/fires).
type ScheduleFire struct {
	NominalTime time.Time `json:"nominal_time"`
	// Trigger is what made it: the spec, a trigger or a backfill.
	Trigger string `json:"trigger"`
	Outcome string `json:"outcome"`
	// IdempotencyKey is its start's key: sched:<id>:<nominal time>.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	WorkflowID     string `json:"workflow_id,omitempty"`
	ExecutionID    string `json:"execution_id,omitempty"`
	// ExecutionStatus is its execution's status once it closed.
	ExecutionStatus string    `json:"execution_status,omitempty"`
	Error           string    `json:"error,omitempty"`
	Message         string    `json:"message,omitempty"`
	RecordedAt      time.Time `json:"recorded_at"`
}

// ScheduleList answers GET /api/harvest/schedules: a page of schedules
// by id, and the cursor of the next page ("" on the last).
type ScheduleList struct {
	Schedules  []Schedule `json:"schedules"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

// ScheduleFireList answers GET /api/harvest/schedules/{id}/fires: a
// page of its ledger, newest nominal time first.
type ScheduleFireList struct {
	Fires      []ScheduleFire `json:"fires"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// SchedulePauseRequest is the optional body of POST
// /api/harvest/schedules/{id}/pause and …/unpause.
type SchedulePauseRequest struct {
	Note string `json:"note,omitempty"`
}

// ScheduleBackfillRequest is the body of POST
// /api/harvest/schedules/{id}/backfill: every nominal time of the spec
// from Start to End (both included, at most MaxBackfillFires) fires
// now, under Overlap (empty: the schedule's).
type ScheduleBackfillRequest struct {
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Overlap string    `json:"overlap,omitempty"`
}

// MaxBackfillFires bounds the nominal times one backfill fires.
const MaxBackfillFires = 1000

// ScheduleActionResponse answers pause, unpause, trigger, backfill and
// DELETE: the schedule's id, and what was done.
type ScheduleActionResponse struct {
	ScheduleID string `json:"schedule_id"`
	// Action: "paused", "unpaused", "triggered", "backfilled", "deleted".
	Action string `json:"action"`
	// Fires are the nominal times a trigger or backfill fired.
	Fires []time.Time `json:"fires,omitempty"`
}
