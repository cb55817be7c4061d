package api

import (
	"encoding/json"
	"time"
)

// ResetRequest is the body of POST
// /api/harvest/executions/{execution_id}/reset (docs/reset.md).
type ResetRequest struct {
	// To is the point: {"seq": N} (a WorkflowTaskCompleted's seq),
	// {"activity": "charge_card", "occurrence": "first" | "last" |
	// "last_failed"} (the task that scheduled it; occurrence defaults to
	// "last"), or the string "first_task" or "last_task".
	To json.RawMessage `json:"to"`
	// ReapplySignals says whether the new run receives again, with their
	// keys, the signals the run received after the point; default true.
	ReapplySignals *bool  `json:"reapply_signals,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

// ResetPoint is a reset's "to" when it is an object: {"seq": N}, or
// {"activity": NAME, "occurrence": OCCURRENCE}.
type ResetPoint struct {
	Seq        *int   `json:"seq,omitempty"`
	Activity   string `json:"activity,omitempty"`
	Occurrence string `json:"occurrence,omitempty"`
}

// ResetResponse answers a reset (201): the new run, and the run it
// replaced.
type ResetResponse struct {
	ExecutionID  string `json:"execution_id"`
	Status       string `json:"status,omitempty"`
	WorkflowID   string `json:"workflow_id"`
	WorkflowName string `json:"workflow_name"`
	ResetFrom    string `json:"reset_from"`
	// PointSeq is the WorkflowTaskCompleted the run was reset to.
	PointSeq int `json:"point_seq"`
	// Deduplicated says the reset had been applied before: the answer
	// names the run it made then.
	Deduplicated bool `json:"deduplicated,omitempty"`
}

// ResetPlan answers a reset with ?dry_run=true (200): what the reset
// would do, changing nothing.
type ResetPlan struct {
	DryRun      bool   `json:"dry_run"`
	ExecutionID string `json:"execution_id"`
	// PointSeq is the WorkflowTaskCompleted of the task run again, TaskID
	// that task's number.
	PointSeq int `json:"point_seq"`
	TaskID   int `json:"task_id"`
	// EventsKept are the events the new run starts with (seq 1 to
	// EventsKept); EventsDropped those after them that are not.
	EventsKept    int `json:"events_kept"`
	EventsDropped int `json:"events_dropped"`
	// ActivitiesPending were scheduled before the point and had not
	// closed there: they are dispatched again at once, with their keys.
	ActivitiesPending []ResetActivity `json:"activities_pending"`
	// ActivitiesRerun were scheduled after the point: the new run's code
	// schedules them again, each keeping its key where it is the same
	// activity at the same position.
	ActivitiesRerun []ResetActivity `json:"activities_rerun"`
	// TimersPending are set again, to fire when they were to.
	TimersPending []ResetTimer `json:"timers_pending"`
	// SignalsReapplied are received again by the new run, in order.
	SignalsReapplied []ResetSignal `json:"signals_reapplied"`
	// ValidPoints are every point this execution can be reset to.
	ValidPoints []int `json:"valid_points"`
}

// ResetActivity is an activity a reset runs again.
type ResetActivity struct {
	ActivityID     int    `json:"activity_id"`
	ActivityName   string `json:"activity_name"`
	IdempotencyKey string `json:"idempotency_key"`
}

// ResetTimer is a timer a reset sets again.
type ResetTimer struct {
	TimerID int       `json:"timer_id"`
	FireAt  time.Time `json:"fire_at"`
}

// ResetSignal is a signal a reset delivers again.
type ResetSignal struct {
	Seq            int    `json:"seq"`
	SignalName     string `json:"signal_name"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}
