package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"
)

// Execution is an execution as the API describes it.
type Execution struct {
	ExecutionID  string `json:"execution_id"`
	WorkflowName string `json:"workflow_name"`
	WorkflowID   string `json:"workflow_id"`
	Status       string `json:"status"`
	// TaskQueue is the task queue the execution's tasks go to, chosen
	// when it started.
	TaskQueue string `json:"task_queue"`
	// Priority is its tasks' priority on that queue, from MinPriority to
	// MaxPriority (docs/start-policies.md#priorities).
	Priority int `json:"priority"`
	// Versioning is "pinned" for an execution whose workflow tasks go
	// only to the workers of one build; absent for one that moves to the
	// newest build (auto_upgrade; docs/versioning.md#pinned-workflows).
	Versioning string `json:"versioning,omitempty"`
	// PinnedBuild is the build a pinned execution's workflow tasks go
	// to, once known (the start's build_id, else the build that ran its
	// first workflow task).
	PinnedBuild string          `json:"pinned_build,omitempty"`
	Input       json.RawMessage `json:"input"`
	Result      json.RawMessage `json:"result"`
	// Error is the failure of an execution that did not complete, null
	// otherwise: {"message", "type"?, "non_retryable"?}.
	Error     json.RawMessage `json:"error"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	ClosedAt  *time.Time      `json:"closed_at"`
	// StartedBy names the API token whose request started the execution;
	// empty when the API has no tokens, or for a webhook's start.
	StartedBy string `json:"started_by,omitempty"`
	// IdempotencyKey is the key the execution was started with, if any.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// ContinuedFrom is the run this one continues, ContinuedAs the run
	// that continued this one (status ContinuedAsNew): the same
	// workflow_id, linked both ways (docs/long-workflows.md).
	ContinuedFrom string `json:"continued_from,omitempty"`
	ContinuedAs   string `json:"continued_as,omitempty"`
	// SearchAttributes are the execution's search attributes, by name
	// (docs/search-attributes.md); describe only.
	SearchAttributes map[string]any `json:"search_attributes,omitempty"`
	// PendingActivities are a running execution's activities scheduled
	// and not closed (the first 100, by id), each with its attempt and,
	// while it waits to be tried again, when and why; describe only.
	PendingActivities []PendingActivity `json:"pending_activities,omitempty"`
	// ResetFrom is the run this one was reset from, at ResetPoint (a
	// WorkflowTaskCompleted of that run's history); ResetTo the run that
	// replaced this one (docs/reset.md).
	ResetFrom  string `json:"reset_from,omitempty"`
	ResetPoint int    `json:"reset_point,omitempty"`
	ResetTo    string `json:"reset_to,omitempty"`
	// ParentExecutionID is the execution that started this one as its
	// child workflow (docs/children.md), if any; GET
	// /api/harvest/executions/{id}/children lists an execution's children.
	ParentExecutionID string `json:"parent_execution_id,omitempty"`
	// CancelRequestedAt is when the execution was asked to cancel
	// (docs/cancellation.md): its workflow code is told, and closes it
	// Cancelled once it has cleaned up.
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
	// RunDeadline and ExecutionDeadline are when the run's timeout and
	// its chain's end (docs/cancellation.md#timeouts), if it has them.
	RunDeadline       *time.Time `json:"run_deadline,omitempty"`
	ExecutionDeadline *time.Time `json:"execution_deadline,omitempty"`
	// TaskFailing, while the execution's last workflow task failed on its
	// worker, says why and when it is tried again.
	TaskFailing *TaskFailing `json:"task_failing,omitempty"`
	// HistoryLength and HistoryBytes are the execution's history: its
	// events, and their size in bytes (their types and attributes as the
	// scheduler recorded them).
	HistoryLength int   `json:"history_length"`
	HistoryBytes  int64 `json:"history_bytes"`
	// HistoryWarning says that the history has passed its warning
	// threshold: at its hard limit the execution fails with
	// HistoryLimitExceeded (docs/reliability.md#history-limits).
	HistoryWarning *HistoryWarning `json:"history_warning,omitempty"`
	// WaitingForWorker says that the execution is Running and no live
	// worker serves its workflow on its task queue: it makes no progress
	// until one starts.
	WaitingForWorker bool `json:"waiting_for_worker,omitempty"`
	// WaitingFor says what a Pending execution waits for:
	// WaitingForConcurrency, a slot of its concurrency start policy's key
	// (ConcurrencyKey).
	WaitingFor string `json:"waiting_for,omitempty"`
	// WaitingOn is what a Running execution's workflow code waits for, as
	// its last workflow task left it: a signal by name, a timer, an
	// activity, a child, a condition (docs/operations.md#what-an-execution-waits-for).
	// Absent before its first task completes, and once it closes.
	WaitingOn *Waiting `json:"waiting_on,omitempty"`
	// ConcurrencyKey is the value of the concurrency start policy's key
	// the execution runs under ("" for the whole workflow), when it was
	// started under one.
	ConcurrencyKey *string `json:"concurrency_key,omitempty"`
	// WaitingForActivityWorkers names the activities the execution has
	// scheduled and waits for that no live worker registers on its task
	// queue: they make no progress until one starts (a misspelt name, a
	// worker not deployed). Sent by describe only.
	WaitingForActivityWorkers []string `json:"waiting_for_activity_workers,omitempty"`
	// WaitingForWorkers says what the execution waits for that no live
	// worker serves, each workflow or activity with the task queue its
	// tasks go to: its workflow's (as WaitingForWorker says) and its
	// activities' (as WaitingForActivityWorkers says, an activity sent to
	// another queue with that queue). Sent by describe only.
	WaitingForWorkers []WaitingFor `json:"waiting_for_workers,omitempty"`
	// IdempotencyClaim is the claim of the start's idempotency key, while
	// PostgreSQL keeps it (until the sweep after it expires): its window
	// and the duplicates it absorbed. Sent by describe only.
	IdempotencyClaim *KeyClaim `json:"idempotency_claim,omitempty"`
	// SignalKeys are the keyed signals the execution received, oldest
	// first, each with the duplicates of it that were dropped. Sent by
	// describe only.
	SignalKeys []SignalKey `json:"signal_keys,omitempty"`
	// CompletionCallback is the start's completion_callback and the
	// delivery of the outcome to it (which begins when the execution
	// closes). Sent by describe only.
	CompletionCallback *CallbackDelivery `json:"completion_callback,omitempty"`
	// Raw is the server's JSON for the execution.
	Raw json.RawMessage `json:"-"`
}

// TaskFailing is why a running execution's last workflow task failed on
// its worker, and what follows: the task is dispatched again at
// NextAttemptAt, and a task that completes (code that replays deployed,
// or the panic gone) clears it. The execution is not failed: it waits.
type TaskFailing struct {
	// Reason is nondeterminism (the replay decided otherwise than the
	// history records), version_unsupported (harvest.GetVersion met a
	// recorded version the code no longer supports) or panic (the
	// workflow code panicked).
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// EventSeq, History and Code say where a replay diverged: the history
	// event, what it records, and what the code asked for instead.
	EventSeq int    `json:"event_seq,omitempty"`
	History  string `json:"history,omitempty"`
	Code     string `json:"code,omitempty"`
	// BuildID is the build of the worker whose task failed last.
	BuildID string `json:"build_id,omitempty"`
	// TaskID is the workflow task that failed last; Attempts counts the
	// tasks that failed in a row, since Since.
	TaskID        int       `json:"task_id"`
	Attempts      int       `json:"attempts"`
	Since         time.Time `json:"since"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
}

// FailureHistoryLimitExceeded is the failure type of an execution whose
// history passed its hard limit, of events or of bytes: it failed, and
// its error's message names the limit.
const FailureHistoryLimitExceeded = "HistoryLimitExceeded"

// HistoryWarning says that an execution's history is past the warning
// threshold of its length or size, and what its hard limits are: past
// either, the execution fails with HistoryLimitExceeded. A workflow that
// runs for ever continues as new before then.
type HistoryWarning struct {
	// Message says it for a person.
	Message string `json:"message"`
	// Events and Bytes are the history's length and size now.
	Events int   `json:"events"`
	Bytes  int64 `json:"bytes"`
	// WarnEvents and WarnBytes are the warning thresholds, MaxEvents and
	// MaxBytes the hard limits, as the scheduler had them when the
	// history passed one of the thresholds.
	WarnEvents int   `json:"warn_events"`
	WarnBytes  int64 `json:"warn_bytes"`
	MaxEvents  int   `json:"max_events"`
	MaxBytes   int64 `json:"max_bytes"`
}

// KeyClaim is the claim of an execution's start idempotency key: while
// it lasts (first_seen_at to expires_at) every start with the key is
// answered with this execution.
type KeyClaim struct {
	FirstSeenAt time.Time `json:"first_seen_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Expired says the window has passed: a start with the key now starts
	// a new execution.
	Expired    bool            `json:"expired"`
	Duplicates DuplicateCounts `json:"duplicates"`
}

// DuplicateCounts are the duplicates of a key that Harvest absorbed, by
// the layer that caught each: Replay, ingest answered a keyed start
// from its claim without publishing it (the start also failed a check,
// which a keyed replay skips); Broker, JetStream dropped the message as
// a duplicate of a message id it held (a retry within its duplicate
// window); Claim, the scheduler found the key claimed, or the signal
// delivered, before. Signals have no replay layer.
type DuplicateCounts struct {
	Replay int64 `json:"replay"`
	Broker int64 `json:"broker"`
	Claim  int64 `json:"claim"`
}

// Total is the duplicates of every layer.
func (d DuplicateCounts) Total() int64 { return d.Replay + d.Broker + d.Claim }

// SignalKey is a keyed signal an execution received.
type SignalKey struct {
	IdempotencyKey string    `json:"idempotency_key"`
	ReceivedAt     time.Time `json:"received_at"`
	// Deduplicated says duplicates of it arrived and were dropped;
	// Duplicates counts them.
	Deduplicated bool            `json:"deduplicated"`
	Duplicates   DuplicateCounts `json:"duplicates"`
}

// Completion callback delivery states: CallbackDelivery.Status.
const (
	CallbackWaiting   = "waiting"
	CallbackPending   = "pending"
	CallbackDelivered = "delivered"
	CallbackFailed    = "failed"
)

// CallbackDelivery is the delivery of an execution's outcome to its
// completion callback.
type CallbackDelivery struct {
	// URL is where the outcome is POSTed, its password (if any) hidden.
	URL string `json:"url"`
	// Status is waiting (for the execution to close), pending (an
	// attempt is due at NextAttemptAt), delivered or failed (given up).
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	// LastError is why the last attempt failed.
	LastError     string     `json:"last_error,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
	FailedAt      *time.Time `json:"failed_at,omitempty"`
	// CreatedAt is when the delivery was scheduled: when the execution
	// closed (absent while it waits).
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// Terminal reports whether the execution has closed.
func (e *Execution) Terminal() bool { return IsTerminal(e.Status) }

// UnmarshalJSON decodes an execution as the API sends it, keeping data
// as Raw.
func (e *Execution) UnmarshalJSON(data []byte) error {
	type plain Execution
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*e = Execution(p)
	e.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// Event is one entry of an execution's history.
type Event struct {
	Seq  int
	Type string
	At   time.Time
	// Attrs are the event's other fields (activity_name, failure, …),
	// decoded as encoding/json decodes into any.
	Attrs map[string]any
	// Raw is the server's JSON for the event.
	Raw json.RawMessage `json:"-"`
}

// The members of an event's JSON that are not Attrs.
const (
	eventSeq  = "seq"
	eventType = "type"
	eventAt   = "at"
)

// MarshalJSON encodes the event as the API sends it: one object of Attrs
// with seq, type and at beside them. Raw is not encoded.
func (e Event) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(e.Attrs)+3)
	maps.Copy(m, e.Attrs)
	m[eventSeq], m[eventType], m[eventAt] = e.Seq, e.Type, e.At
	return json.Marshal(m)
}

// UnmarshalJSON decodes an event as the API sends it, keeping data as
// Raw.
func (e *Event) UnmarshalJSON(data []byte) error {
	var head struct {
		Seq  int       `json:"seq"`
		Type string    `json:"type"`
		At   time.Time `json:"at"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return err
	}
	attrs := map[string]any{}
	if err := json.Unmarshal(data, &attrs); err != nil {
		return err
	}
	delete(attrs, eventSeq)
	delete(attrs, eventType)
	delete(attrs, eventAt)
	*e = Event{Seq: head.Seq, Type: head.Type, At: head.At, Attrs: attrs, Raw: append(json.RawMessage(nil), data...)}
	return nil
}

// WaitingFor is a workflow or an activity whose tasks no live worker
// serves on the task queue they go to.
type WaitingFor struct {
	// Kind is WaitingForWorkflow or WaitingForActivity.
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	TaskQueue string `json:"task_queue"`
	// BuildID is the build a pinned execution's workflow waits for: no
	// live worker of it registers the workflow on the task queue.
	BuildID string `json:"build_id,omitempty"`
}

// WaitingForConcurrency is Execution.WaitingFor of a Pending execution.
const WaitingForConcurrency = "concurrency"

// Kinds of WaitingFor.
const (
	WaitingForWorkflow = "workflow"
	WaitingForActivity = "activity"
)

// ExportedHistory is one execution's history as `harvest workflow
// histories export` writes it, one file per execution
// (<dir>/<workflow>/<execution_id>.json), and harvesttest.ReplayHistories
// reads it. History holds the events as GET
// /api/harvest/executions/{execution_id}/history answers them.
type ExportedHistory struct {
	ExecutionID  string    `json:"execution_id"`
	WorkflowName string    `json:"workflow_name"`
	WorkflowID   string    `json:"workflow_id"`
	TaskQueue    string    `json:"task_queue"`
	Status       string    `json:"status"`
	ExportedAt   time.Time `json:"exported_at"`
	History      []Event   `json:"history"`
}

// CountExecutionsResponse answers GET /api/harvest/executions/count.
type CountExecutionsResponse struct {
	Count int64 `json:"count"`
}

// PendingActivity is an activity an execution has scheduled and not
// closed, as describe shows it.
type PendingActivity struct {
	ActivityID   int       `json:"activity_id"`
	ActivityName string    `json:"activity_name"`
	ScheduledAt  time.Time `json:"scheduled_at"`
	// Attempt is the number of the attempt running, or of the next one
	// while it waits to be tried again (State retrying, at NextAttemptAt).
	Attempt       int        `json:"attempt"`
	State         string     `json:"state"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	// LastFailure is why the last attempt failed, when one did.
	LastFailure json.RawMessage `json:"last_failure,omitempty"`
	// LastHeartbeatAt and HeartbeatDetails are the running attempt's
	// last heartbeat (harvest.ActivityContext.Heartbeat).
	LastHeartbeatAt  *time.Time      `json:"last_heartbeat_at,omitempty"`
	HeartbeatDetails json.RawMessage `json:"heartbeat_details,omitempty"`
	// CancelRequested says the workflow gave it up while an attempt runs.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// Waiting is what an execution's workflow code waits for: each of its
// goroutines that is blocked, and on what, as its last workflow task
// left them, the one that completed at Seq. A signal, a timer or an
// activity's result that came since is in the history after Seq, and
// the next workflow task takes it.
type Waiting struct {
	// Seq is the WorkflowTaskCompleted of that task.
	Seq   int    `json:"seq"`
	Waits []Wait `json:"waits"`
}

// Wait is one blocked call of workflow code.
type Wait struct {
	// Goroutine is the workflow goroutine that made the call: "workflow
	// function", or "workflow goroutine N" for one harvest.Go started.
	Goroutine string `json:"goroutine,omitempty"`
	WaitCase
	// Cases are a Selector's cases (WaitSelector), in the order they were
	// added.
	Cases []WaitCase `json:"cases,omitempty"`
}

// WaitCase is what a blocked call waits for, or one case of a selector.
type WaitCase struct {
	// Kind is what the call waits for (the Wait* constants).
	Kind string `json:"kind"`
	// Name is the signal's name (WaitSignal), the activity's (WaitActivity)
	// or the child's workflow (WaitChild).
	Name string `json:"name,omitempty"`
	// ID is the activity's id, the timer's, or the child's or external
	// signal's number among those of the execution.
	ID int `json:"id,omitempty"`
	// WorkflowID is the child's workflow_id (WaitChild).
	WorkflowID string `json:"workflow_id,omitempty"`
	// Until is when a timer fires (WaitTimer) or an AwaitWithTimeout
	// gives up (WaitCondition), by the workflow's clock when it started
	// it.
	Until *time.Time `json:"until,omitempty"`
}

// String says what w waits for, for a person: `signal "approve"`,
// `activity "charge_card" (id 2)`, `timer 1, until 2026-12-07T12:00:00Z`,
// `one of: …` for a selector.
func (w Wait) String() string {
	if w.Kind != WaitSelector {
		return w.WaitCase.String()
	}
	cases := make([]string, len(w.Cases))
	for i, c := range w.Cases {
		cases[i] = c.String()
	}
	return "one of: " + strings.Join(cases, "; ")
}

// String says what w waits for, for a person.
func (w WaitCase) String() string {
	var s string
	switch w.Kind {
	case WaitSignal:
		s = fmt.Sprintf("signal %q", w.Name)
	case WaitActivity:
		s = fmt.Sprintf("activity %q (id %d)", w.Name, w.ID)
	case WaitChild:
		s = fmt.Sprintf("child workflow %q (workflow_id %q)", w.Name, w.WorkflowID)
	case WaitExternalSignal:
		s = fmt.Sprintf("the delivery of signal %q to another execution", w.Name)
	case WaitTimer:
		s = fmt.Sprintf("timer %d", w.ID)
	case WaitCondition:
		s = "a condition (Await)"
	case WaitChannel:
		s = "a workflow channel"
	case WaitCancellation:
		s = "the execution's cancellation"
	default:
		s = w.Kind
	}
	if w.Until != nil {
		s += ", until " + w.Until.UTC().Format(time.RFC3339)
	}
	return s
}

// The kinds of Wait.
const (
	WaitSignal = "signal"
	WaitTimer  = "timer"
	// WaitActivity is an activity's result (Future.Get).
	WaitActivity = "activity"
	// WaitChild is a child workflow's result; WaitExternalSignal the
	// delivery of a signal sent to another execution.
	WaitChild          = "child"
	WaitExternalSignal = "external_signal"
	// WaitCondition is harvest.Await's condition, or AwaitWithTimeout's.
	WaitCondition = "condition"
	// WaitChannel is a send or receive on a workflow channel
	// (harvest.NewChannel), which another workflow goroutine answers.
	WaitChannel = "channel"
	// WaitCancellation is a receive on a context's Done: the
	// execution's cancellation.
	WaitCancellation = "cancellation"
	// WaitSelector is a Selector's Select: whichever of its Cases comes
	// first.
	WaitSelector = "selector"
)

// MaxWaits bounds Waiting.Waits, and a selector's Cases: a worker sends
// the first MaxWaits.
const MaxWaits = 32

// Pending activity states: PendingActivity.State.
const (
	ActivityRunning  = "running"
	ActivityRetrying = "retrying"
)
