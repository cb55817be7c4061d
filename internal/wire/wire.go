package wire

import (
	"encoding/json"
	"reflect"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// Command kinds: the last token of a command subject.
const (
	KindStart                 = "start"
	KindWorkflowTaskCompleted = "wft_completed"
	KindActivityResult        = "activity_result"
	KindSignal                = "signal"
	KindSignalWithStart       = "signal_with_start"
	KindActivityHeartbeat     = "activity_heartbeat"
	KindCancel                = "cancel"
	KindTerminate             = "terminate"
	KindDuplicate             = "duplicate"
	// KindWorkflowTaskFailed reports a workflow task its worker could not
	// complete: the replay diverged from the history, met a version the
	// code does not support, or the workflow code panicked.
	KindWorkflowTaskFailed = "wft_failed"
	// KindUpdate asks a running execution's workflow code to answer an
	// update (harvest.SetUpdateHandler).
	KindUpdate = "update"
	// KindReport tells an execution, on its shard, how a child workflow
	// it started (started, refused, closed) or a signal it sent
	// (delivered, refused) went: the shard that applied the child's
	// start or the signal sends it.
	KindReport = "report"
)

// Task kinds: the last token of a task subject.
const (
	TaskWorkflow = "workflow"
	TaskActivity = "activity"
)

// Task priorities (docs/start-policies.md#priorities): a start's, which
// its workflow tasks and, unless they say otherwise, its activities'
// tasks carry, and an activity's (ActivityOptions.Priority). Higher is
// taken first; 0 in a command or an option means DefaultPriority (or,
// for an activity, its execution's priority).
const (
	MinPriority     = api.MinPriority
	MaxPriority     = api.MaxPriority
	DefaultPriority = api.DefaultPriority
)

// Execution statuses: the names the HTTP API answers with, declared once
// in the public api package.
const (
	StatusRunning    = api.StatusRunning
	StatusPending    = api.StatusPending
	StatusCompleted  = api.StatusCompleted
	StatusFailed     = api.StatusFailed
	StatusCancelled  = api.StatusCancelled
	StatusTerminated = api.StatusTerminated
	StatusTimedOut   = api.StatusTimedOut
	// StatusContinuedAsNew is api.StatusContinuedAsNew.
	StatusContinuedAsNew = api.StatusContinuedAsNew
)

// History event types.
const (
	EventWorkflowStarted    = "WorkflowStarted"
	EventActivityScheduled  = "ActivityScheduled"
	EventActivityCompleted  = "ActivityCompleted"
	EventActivityFailed     = "ActivityFailed"
	EventWorkflowCompleted  = "WorkflowCompleted"
	EventWorkflowFailed     = "WorkflowFailed"
	EventWorkflowTerminated = "WorkflowTerminated"
	EventSignalReceived     = "SignalReceived"
	EventTimerStarted       = "TimerStarted"
	EventTimerFired         = "TimerFired"
	EventWorkflowCancelled  = "WorkflowCancelled"
	// EventWorkflowTaskCompleted comes before the events of a workflow
	// task's decisions: it records what the task saw (the history up to
	// BaseSeq) and its time, so that a replay gives the workflow code
	// what it saw then, task by task.
	EventWorkflowTaskCompleted = "WorkflowTaskCompleted"
	// EventTimerCancelled records a cancel_timer decision: the timer
	// never fires for the workflow (a TimerFired already in the history,
	// recorded while the task that cancelled it ran, is not seen).
	EventTimerCancelled = "TimerCancelled"
	// EventMarkerRecorded records a record_marker decision: a value the
	// workflow computed once (SideEffect), returned as recorded on every
	// replay.
	EventMarkerRecorded = "MarkerRecorded"
	// EventVersionMarker records a record_version decision: the version
	// of a change (harvest.GetVersion) an execution took the first time
	// it reached the change.
	EventVersionMarker = "VersionMarker"
	// EventWorkflowContinuedAsNew closes a run that continued as a new
	// one: its attributes' continue_as_new names the new run.
	EventWorkflowContinuedAsNew = "WorkflowContinuedAsNew"
	// EventWorkflowUpdateAccepted records an accept_update decision: the
	// workflow's validator took the update, whose handler then ran from
	// there. A replay delivers the update again at the same point.
	EventWorkflowUpdateAccepted = "WorkflowUpdateAccepted"
	// EventWorkflowUpdateCompleted records a complete_update decision:
	// the update's handler returned, with its result or its failure.
	EventWorkflowUpdateCompleted = "WorkflowUpdateCompleted"
	// EventWorkflowCancelRequested records that the execution was asked
	// to cancel (POST .../cancel): its workflow code sees it at its next
	// task, as a signal, and may compensate before it returns; a
	// cancel_workflow decision then closes it Cancelled.
	EventWorkflowCancelRequested = "WorkflowCancelRequested"
	// EventActivityCancelRequested records a request_cancel_activity
	// decision: the workflow gave up an activity (its context was
	// cancelled); the context of its attempt in flight is cancelled on
	// its worker, and no attempt follows.
	EventActivityCancelRequested = "ActivityCancelRequested"
	// EventActivityCancelled closes an activity given up once its attempt
	// in flight ended without completing (or none was in flight): the
	// workflow's Future fails with a canceled error. One whose attempt
	// completed after all closes with ActivityCompleted instead, and the
	// workflow sees the step done.
	EventActivityCancelled = "ActivityCancelled"
	// EventWorkflowTimedOut closes an execution whose run or chain timed
	// out: at once (its reason says which), or by a time_out_workflow
	// decision once its code cleaned up.
	EventWorkflowTimedOut = "WorkflowTimedOut"
)

// ValidStatus reports whether s names an execution status.
func ValidStatus(s string) bool {
	switch s {
	case StatusPending, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled, StatusTerminated, StatusTimedOut, StatusContinuedAsNew:
		return true
	}
	return false
}

// Reuse policies: what a start does when an execution with its
// (workflow_name, workflow_id) exists; declared once in the public api
// package, which documents each.
const (
	ReuseAllowDuplicate           = api.ReuseAllowDuplicate
	ReuseAllowDuplicateFailedOnly = api.ReuseAllowDuplicateFailedOnly
	ReuseRejectDuplicate          = api.ReuseRejectDuplicate
	ReuseTerminateIfRunning       = api.ReuseTerminateIfRunning
)

// ValidReusePolicy reports whether p names a reuse policy ("" is the
// default).
func ValidReusePolicy(p string) bool {
	switch p {
	case "", ReuseAllowDuplicate, ReuseAllowDuplicateFailedOnly, ReuseRejectDuplicate, ReuseTerminateIfRunning:
		return true
	}
	return false
}

// DefaultTaskQueue is the task queue of a start that names none.
const DefaultTaskQueue = "default"

// Command is one message on the command stream. Exactly one of the payload
// fields is set, matching Kind.
type Command struct {
	CommandID    string               `json:"command_id"`
	Kind         string               `json:"kind"`
	Start        *StartCommand        `json:"start,omitempty"`
	WorkflowTask *WorkflowTaskResult  `json:"workflow_task,omitempty"`
	Activity     *ActivityResult      `json:"activity,omitempty"`
	Signal       *SignalCommand       `json:"signal,omitempty"`
	Heartbeat    *ActivityHeartbeat   `json:"heartbeat,omitempty"`
	Cancel       *CancelCommand       `json:"cancel,omitempty"`
	Terminate    *TerminateCommand    `json:"terminate,omitempty"`
	Duplicate    *DuplicateCommand    `json:"duplicate,omitempty"`
	TaskFailure  *WorkflowTaskFailure `json:"task_failure,omitempty"`
	Update       *UpdateCommand       `json:"update,omitempty"`
	// Report tells an execution how a child it started, or a signal it
	// sent, went (KindReport).
	Report *Report `json:"report,omitempty"`
	// Schedule changes a schedule (KindSchedule).
	Schedule *ScheduleCommand `json:"schedule,omitempty"`
	// Reset resets an execution (KindReset).
	Reset *ResetCommand `json:"reset,omitempty"`
	// Batch creates or cancels a batch's part (KindBatch).
	Batch *BatchCommand `json:"batch,omitempty"`
	// FromBatch names the batch that sent a cancel, terminate, signal or
	// reset: its shard reports back how it went.
	FromBatch *BatchRef `json:"from_batch,omitempty"`
	// SignalWithStart carries Start and Signal together: the signal goes
	// to the running execution of Start's workflow_id, or to a new one
	// started with it, atomically.
	SignalWithStart bool `json:"signal_with_start,omitempty"`
}

// Why a workflow task failed (WorkflowTaskFailure.Reason).
const (
	TaskFailedNondeterminism     = "nondeterminism"
	TaskFailedVersionUnsupported = "version_unsupported"
	TaskFailedPanic              = "panic"
)

// WorkflowTaskFailure is a workflow task its worker could not complete.
// The scheduler marks the execution as failing its task (shown on
// describe), and dispatches the task again after a backoff; a task that
// completes clears the mark.
type WorkflowTaskFailure struct {
	ExecutionID string `json:"execution_id"`
	TaskID      int    `json:"task_id"`
	BuildID     string `json:"build_id,omitempty"`
	// Reason is one of the TaskFailed constants; Message says it in full.
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// EventSeq, History and Code say where a replay diverged: the history
	// event, what it records, what the code asked for instead.
	EventSeq int    `json:"event_seq,omitempty"`
	History  string `json:"history,omitempty"`
	Code     string `json:"code,omitempty"`
}

// Layers of a DuplicateCommand.
const (
	// DuplicateBroker: JetStream dropped the message as a duplicate of a
	// message id it holds (PubAck.Duplicate).
	DuplicateBroker = "broker"
	// DuplicateReplay: ingest answered a keyed start from its claim
	// without publishing it.
	DuplicateReplay = "replay"
)

// DuplicateCommand reports a duplicate that ingest or a binding caught
// without the scheduler, so that the scheduler, which alone writes
// PostgreSQL, counts it against the key it duplicated. It is published on
// the duplicated command's shard, after it: the scheduler applies it once
// the original has made its claim. It changes nothing else and has no
// outcome. It names a start key (WorkflowName, IdempotencyKey), an
// execution's keyed signal (ExecutionID, SignalKey), or a
// signal-with-start's keyed signal (WorkflowName, WorkflowID, SignalKey).
type DuplicateCommand struct {
	Layer          string `json:"layer"`
	WorkflowName   string `json:"workflow_name,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	ExecutionID    string `json:"execution_id,omitempty"`
	WorkflowID     string `json:"workflow_id,omitempty"`
	SignalKey      string `json:"signal_key,omitempty"`
}

// DuplicateOf is the report of a duplicate of cmd caught by layer, or nil
// when cmd has no key to count it against.
func DuplicateOf(cmd *Command, layer string) *DuplicateCommand {
	switch {
	case cmd.Kind == KindStart && cmd.Start != nil && cmd.Start.IdempotencyKey != "":
		return &DuplicateCommand{Layer: layer, WorkflowName: cmd.Start.WorkflowName, IdempotencyKey: cmd.Start.IdempotencyKey}
	case cmd.Kind == KindSignal && cmd.Signal != nil && cmd.Signal.IdempotencyKey != "":
		return &DuplicateCommand{Layer: layer, ExecutionID: cmd.Signal.ExecutionID, SignalKey: cmd.Signal.IdempotencyKey}
	case cmd.Kind == KindSignalWithStart && cmd.Start != nil && cmd.Signal != nil && cmd.Signal.IdempotencyKey != "":
		return &DuplicateCommand{Layer: layer, WorkflowName: cmd.Start.WorkflowName, WorkflowID: cmd.Start.WorkflowID, SignalKey: cmd.Signal.IdempotencyKey}
	}
	return nil
}

// CancelCommand asks to cancel a running execution: its workflow code
// is told (WorkflowCancelRequested) and closes it. GraceMS, when set,
// bounds how long it may take: the execution is terminated if it is
// still running GraceMS after the request (otherwise the workflow's
// configured cancel_grace, if any, applies).
type CancelCommand struct {
	ExecutionID string `json:"execution_id"`
	Reason      string `json:"reason,omitempty"`
	GraceMS     int64  `json:"grace_ms,omitempty"`
}

// Causes of a cancellation (WorkflowCancelRequestedAttrs.Cause).
const (
	// CancelCauseRequest: POST .../cancel, or a client's Cancel.
	CancelCauseRequest = "request"
	// CancelCauseRunTimeout and CancelCauseExecutionTimeout: the run's or
	// the chain's timeout passed, and the workflow has a cancel_grace for
	// its cleanup; the code's return then closes it TimedOut
	// (time_out_workflow).
	CancelCauseRunTimeout       = "run_timeout"
	CancelCauseExecutionTimeout = "execution_timeout"
)

// TimeoutCause says whether a cancellation's cause is a timeout.
func TimeoutCause(cause string) bool {
	return cause == CancelCauseRunTimeout || cause == CancelCauseExecutionTimeout
}

// WorkflowCancelRequestedAttrs are the attributes of a
// WorkflowCancelRequested event.
type WorkflowCancelRequestedAttrs struct {
	Reason string `json:"reason,omitempty"`
	// Cause says what asked: CancelCauseRequest.
	Cause string `json:"cause,omitempty"`
	// GraceMS is how long the code has to close the execution before it
	// is terminated; 0 for no bound.
	GraceMS int64 `json:"grace_ms,omitempty"`
}

// ActivityCancelRequestedAttrs are the attributes of an
// ActivityCancelRequested event.
type ActivityCancelRequestedAttrs struct {
	ActivityID int `json:"activity_id"`
}

// TerminateCommand asks to terminate a running execution: it closes as
// Terminated at once, without its workflow code running again.
type TerminateCommand struct {
	ExecutionID string `json:"execution_id"`
	Reason      string `json:"reason,omitempty"`
}

// ActivityHeartbeat reports that an activity attempt is alive, with
// details the next attempt can read.
type ActivityHeartbeat struct {
	ExecutionID string          `json:"execution_id"`
	ActivityID  int             `json:"activity_id"`
	Attempt     int             `json:"attempt"`
	Details     json.RawMessage `json:"details,omitempty"`
}

// SignalCommand delivers a named signal to an execution. With a key, it is
// delivered at most once per (execution_id, key).
type SignalCommand struct {
	ExecutionID    string          `json:"execution_id"`
	SignalName     string          `json:"signal_name"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// Sender is the execution whose workflow code sent the signal
	// (harvest.SignalExternalWorkflow), told how it went (KindReport);
	// nil for a signal from outside.
	Sender *SenderRef `json:"sender,omitempty"`
	// WorkflowName and WorkflowID name the target instead of
	// ExecutionID, for a workflow code's signal to a workflow_id: it
	// goes to the workflow_id's latest execution.
	WorkflowName string `json:"workflow_name,omitempty"`
	WorkflowID   string `json:"workflow_id,omitempty"`
}

// SignalReceivedAttrs are the attributes of a SignalReceived event.
type SignalReceivedAttrs struct {
	SignalName     string          `json:"signal_name"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
}

// TimerAttrs are the attributes of TimerStarted, TimerFired and
// TimerCancelled events.
type TimerAttrs struct {
	TimerID int        `json:"timer_id"`
	FireAt  *time.Time `json:"fire_at,omitempty"`
	// DurationMS is the duration the workflow asked for (TimerStarted).
	DurationMS int64 `json:"duration_ms,omitempty"`
}

// WorkflowTaskCompletedAttrs are the attributes of a
// WorkflowTaskCompleted event.
type WorkflowTaskCompletedAttrs struct {
	TaskID int `json:"task_id"`
	// BaseSeq is the seq of the last history event the task saw.
	BaseSeq int `json:"base_seq"`
	// Time is the task's time, what the workflow's Now read.
	Time time.Time `json:"time"`
	// BuildID is the build of the worker that completed the task.
	BuildID string `json:"build_id,omitempty"`
	// ContinueAsNewSuggested is what the task's workflow code read as
	// harvest.WorkflowInfo's ContinueAsNewSuggested (the task's own,
	// WorkflowTask.ContinueAsNewSuggested): recorded, as Time is, so
	// that a replay reads the same.
	ContinueAsNewSuggested bool `json:"continue_as_new_suggested,omitempty"`
}

// MarkerAttrs are the attributes of a MarkerRecorded event.
type MarkerAttrs struct {
	// Kind is what recorded it: MarkerSideEffect.
	Kind     string          `json:"kind"`
	MarkerID int             `json:"marker_id"`
	Value    json.RawMessage `json:"value,omitempty"`
}

// VersionMarkerAttrs are the attributes of a VersionMarker event: the
// version of the change ChangeID the execution took.
type VersionMarkerAttrs struct {
	ChangeID string `json:"change_id"`
	Version  int    `json:"version"`
}

// MarkerSideEffect is the Kind of a SideEffect's marker.
const MarkerSideEffect = "side_effect"

// StartCommand asks for a workflow execution.
type StartCommand struct {
	WorkflowName string `json:"workflow_name"`
	// SearchAttributes are the execution's search attributes as its start
	// sets them (checked by ingest against the workflow's declarations).
	SearchAttributes map[string]json.RawMessage `json:"search_attributes,omitempty"`
	// WorkflowID is always set by ingest: given by the caller, or minted
	// on the command's shard.
	WorkflowID       string          `json:"workflow_id"`
	WorkflowIDMinted bool            `json:"workflow_id_minted,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	IdempotencyKey   string          `json:"idempotency_key,omitempty"`
	TaskQueue        string          `json:"task_queue"`
	ReusePolicy      string          `json:"reuse_policy,omitempty"`
	// StartAt delays the first workflow task of a fresh start.
	StartAt *time.Time `json:"start_at,omitempty"`
	// CompletionCallback is a URL, validated by ingest, that the outcome
	// is POSTed to when the execution closes.
	CompletionCallback string `json:"completion_callback,omitempty"`
	// Fingerprint is the SHA-256 of the canonical JSON input of a keyed
	// start; RejectFingerprintMismatch makes a replay whose fingerprint
	// differs from the claim's fail with idempotency_key_reused.
	Fingerprint               string    `json:"fingerprint,omitempty"`
	RejectFingerprintMismatch bool      `json:"reject_fingerprint_mismatch,omitempty"`
	AcceptedAt                time.Time `json:"accepted_at"`
	// StartedBy names the API token of the request, recorded on the
	// execution a fresh start creates.
	StartedBy string `json:"started_by,omitempty"`
	// Policy, when set, is the start policy that admits the start: the
	// scheduler holds it back (deferred) until the policy lets it begin.
	// A start under a policy has no idempotency key and a minted
	// workflow_id.
	Policy *StartPolicy `json:"policy,omitempty"`
	// Versioning is VersioningPinned for an execution whose workflow
	// tasks go only to the workers of one build; "" or
	// VersioningAutoUpgrade for one whose tasks go to the newest build
	// that registers its workflow.
	Versioning string `json:"versioning,omitempty"`
	// PinnedBuild is the build a pinned start names (ingest checked that
	// a live worker of it registers the workflow); "" pins the execution
	// to the build that completes its first workflow task.
	PinnedBuild string `json:"pinned_build,omitempty"`
	// Parent is the execution that started this one as its child
	// (harvest.ExecuteChildWorkflow), nil for any other start.
	Parent *ParentRef `json:"parent,omitempty"`
	// RunTimeoutMS bounds the run, ExecutionTimeoutMS the whole chain of
	// continued runs (0: the workflow's configured timeout, if any):
	// past it the execution closes TimedOut (docs/cancellation.md#timeouts).
	RunTimeoutMS       int64 `json:"run_timeout_ms,omitempty"`
	ExecutionTimeoutMS int64 `json:"execution_timeout_ms,omitempty"`
	// Priority is the priority of the execution's tasks (MinPriority to
	// MaxPriority; 0: DefaultPriority), validated by ingest.
	Priority int `json:"priority,omitempty"`
}

// Versioning behaviours of an execution (StartCommand.Versioning). They
// are persisted.
const (
	VersioningAutoUpgrade = "auto_upgrade"
	VersioningPinned      = "pinned"
)

// Start policy kinds: StartPolicy.Kind.
const (
	PolicyThrottle = "throttle"
	PolicyDebounce = "debounce"
	PolicyBatch    = "batch"
	// PolicyConcurrency: at most Limit executions of the key run; the
	// others are created Pending and begin in order as those close.
	PolicyConcurrency = "concurrency"
)

// StartPolicy is a start policy as it applies to one start: its kind, its
// parameters and the value of its key in the start's input.
type StartPolicy struct {
	Kind string `json:"kind"`
	// Key is the value the policy's key pointer selects in the input ("" for
	// a policy over the whole workflow): starts are throttled, debounced
	// or batched together per (workflow, kind, key).
	Key string `json:"key"`
	// Throttle: at most Limit starts in any Period.
	Limit  int           `json:"limit,omitempty"`
	Period time.Duration `json:"period,omitempty"`
	// Debounce: the execution starts Period after the last start, with
	// the first start's input when FirstInput is set, else the last's.
	FirstInput bool `json:"first_input,omitempty"`
	// Batch: one execution per MaxSize starts, or MaxWait after the
	// first.
	MaxSize int           `json:"max_size,omitempty"`
	MaxWait time.Duration `json:"max_wait,omitempty"`
}

// WorkflowTaskResult returns the decisions a worker took in one workflow
// task.
type WorkflowTaskResult struct {
	ExecutionID string     `json:"execution_id"`
	TaskID      int        `json:"task_id"`
	Decisions   []Decision `json:"decisions"`
	// BaseSeq is the seq of the last history event the task saw.
	BaseSeq int `json:"base_seq,omitempty"`
	// Time is the task's time (the task's own, or the worker's clock for
	// a speculative next task), recorded in its WorkflowTaskCompleted.
	Time time.Time `json:"time,omitzero"`
	// BuildID is the build of the worker that ran the task (its
	// WorkerConfig.BuildID), recorded in its WorkflowTaskCompleted.
	BuildID string `json:"build_id,omitempty"`
	// ContinueAsNewSuggested is the task's (what its code read), recorded
	// in its WorkflowTaskCompleted.
	ContinueAsNewSuggested bool `json:"continue_as_new_suggested,omitempty"`
	// Eager holds the first attempts the worker ran at once, on its own
	// slots, of activities these decisions schedule (eager dispatch). The
	// scheduler records each as that activity's attempt 1, instead of
	// dispatching it.
	Eager []ActivityResult `json:"eager,omitempty"`
	// Rejections are the updates the task carried that the workflow did
	// not take: its validator refused them, or it has no handler for
	// their name. They are recorded on the updates, not in the history.
	Rejections []UpdateRejection `json:"rejections,omitempty"`
	// Sticky is the id of the worker that ran the task when it keeps the
	// execution in its cache after it, "" otherwise: the execution's next
	// workflow task goes to that worker first (broker.StickyTaskSubject),
	// and to any worker if it does not take it promptly.
	Sticky string `json:"sticky,omitempty"`
	// Idle says the task made nothing new visible to the workflow code
	// and took no decision (it only refused updates): the scheduler
	// records no WorkflowTaskCompleted for it, so that an update refused
	// writes nothing to the history.
	Idle bool `json:"idle,omitempty"`
	// Next is the following workflow task, which the same worker ran over
	// the history these decisions and Eager make (speculatively, with
	// TaskID one more). The scheduler takes it only when nothing else
	// happened to the execution since this task's BaseSeq; otherwise it
	// drops Next and dispatches the task as usual.
	Next *WorkflowTaskResult `json:"next,omitempty"`
	// States are the named states the workflow code set
	// (harvest.SetQueryState) that differ from what the worker last sent
	// for the execution, each with its value as the task left it. They
	// are no history: the scheduler upserts them, in the transaction
	// that records the task, at the seq of the task's
	// WorkflowTaskCompleted. A worker that replayed the execution afresh
	// sends them all again; the upsert makes that harmless.
	States []StateValue `json:"states,omitempty"`
	// Waiting is what the workflow code's goroutines wait for as the task
	// left them, when it differs from what the worker last sent for the
	// execution (nil when not; no Waits when nothing). No history either:
	// the scheduler keeps it on the execution, at the seq of the task's
	// WorkflowTaskCompleted, until the next one or the close.
	Waiting *api.Waiting `json:"waiting,omitempty"`
}

// StateValue is the latest value of one named state of an execution.
type StateValue struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// MaxStateBytes bounds a state's value, as JSON: harvest.SetQueryState
// refuses a larger one, and the scheduler drops one a worker sent anyway.
const MaxStateBytes = 256 << 10

// Decision types.
const (
	DecisionScheduleActivity = "schedule_activity"
	DecisionCompleteWorkflow = "complete_workflow"
	DecisionFailWorkflow     = "fail_workflow"
	DecisionStartTimer       = "start_timer"
	DecisionCancelTimer      = "cancel_timer"
	DecisionRecordMarker     = "record_marker"
	DecisionRecordVersion    = "record_version"
	DecisionContinueAsNew    = "continue_as_new"
	DecisionAcceptUpdate     = "accept_update"
	DecisionCompleteUpdate   = "complete_update"
	// DecisionCancelWorkflow closes an execution whose cancellation was
	// requested (WorkflowCancelRequested) as Cancelled, when its code
	// returns: with the code's result (Result) or error (Failure).
	DecisionCancelWorkflow = "cancel_workflow"
	// DecisionRequestCancelActivity gives up the activity ActivityID.
	DecisionRequestCancelActivity = "request_cancel_activity"
	// DecisionTimeOutWorkflow closes an execution asked to cancel because
	// its timeout passed (CancelCauseRunTimeout, ...) as TimedOut, when
	// its code returns after its cleanup: with its result or error.
	DecisionTimeOutWorkflow = "time_out_workflow"
)

// ScheduledOptions are a schedule_activity decision's options as the
// scheduler records them: its own, else the default retry policy.
func (d Decision) ScheduledOptions() ActivityOptions {
	if d.Options != nil {
		return *d.Options
	}
	return ActivityOptions{Retry: DefaultRetryPolicy()}
}

// SameJSON says whether a and b are the same JSON value (an absent one is
// null); two documents that do not parse are compared as bytes.
func SameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(OrNull(a), &x) != nil || json.Unmarshal(OrNull(b), &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}

// Decision is one thing a workflow task asks the scheduler to do.
type Decision struct {
	Type string `json:"type"`
	// schedule_activity
	ActivityID   int              `json:"activity_id,omitempty"`
	ActivityName string           `json:"activity_name,omitempty"`
	Input        json.RawMessage  `json:"input,omitempty"`
	Options      *ActivityOptions `json:"options,omitempty"`
	// PossiblyStarted says an earlier delivery of this workflow task may
	// have run attempt 1 eagerly before its worker vanished. The scheduler
	// counts attempt 1 as failed with type WorkerLost, its outcome
	// unknown, so attempt 2 follows the retry policy and reconciles first.
	PossiblyStarted bool `json:"possibly_started,omitempty"`
	// start_timer, cancel_timer
	TimerID    int   `json:"timer_id,omitempty"`
	DurationMS int64 `json:"duration_ms,omitempty"`
	// record_marker
	Marker *MarkerAttrs `json:"marker,omitempty"`
	// record_version
	Version *VersionMarkerAttrs `json:"version,omitempty"`
	// complete_workflow
	Result json.RawMessage `json:"result,omitempty"`
	// fail_workflow
	Failure *Failure `json:"failure,omitempty"`
	// continue_as_new
	ContinueAsNew *ContinueAsNewAttrs `json:"continue_as_new,omitempty"`
	// accept_update, complete_update
	Update *UpdateAttrs `json:"update,omitempty"`
	// start_child, request_cancel_child (its ChildID)
	Child *ChildAttrs `json:"child,omitempty"`
	// signal_external
	Signal *ExternalSignalAttrs `json:"signal,omitempty"`
	// upsert_search_attributes: the values set, by name.
	SearchAttributes map[string]json.RawMessage `json:"search_attributes,omitempty"`
}

// ContinueAsNewAttrs say how a run continues as a new one: the new run's
// workflow (empty: the same), task queue (empty: the same) and input. In
// the WorkflowContinuedAsNew event that closes the run, NewExecutionID is
// the new run's.
type ContinueAsNewAttrs struct {
	WorkflowName   string          `json:"workflow_name,omitempty"`
	TaskQueue      string          `json:"task_queue,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	NewExecutionID string          `json:"new_execution_id,omitempty"`
	// Carry are the seqs of the signals the run's code saw and did not
	// receive: they move to the new run, with the signals the run got
	// after what its last task saw.
	Carry []int `json:"carry_signals,omitempty"`
}

// ActivityResult reports how one activity attempt ended: Result on success,
// Failure otherwise.
type ActivityResult struct {
	ExecutionID string          `json:"execution_id"`
	ActivityID  int             `json:"activity_id"`
	Attempt     int             `json:"attempt"`
	Result      json.RawMessage `json:"result,omitempty"`
	Failure     *Failure        `json:"failure,omitempty"`
	// StartedAt and EndedAt are when the attempt's code began and
	// returned, on its worker's clock; zero from a worker that does not
	// say, or for an attempt that did not run.
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

// Failure describes an error that crossed a process boundary.
type Failure struct {
	Message      string `json:"message"`
	Type         string `json:"type,omitempty"`
	NonRetryable bool   `json:"non_retryable,omitempty"`
	Stack        string `json:"stack,omitempty"`
}

// Event is one entry of an execution's history.
type Event struct {
	Seq   int             `json:"seq"`
	Type  string          `json:"type"`
	At    time.Time       `json:"at"`
	Attrs json.RawMessage `json:"attrs,omitempty"`
}

// WorkflowStartedAttrs are the attributes of a WorkflowStarted event.
type WorkflowStartedAttrs struct {
	WorkflowName   string          `json:"workflow_name"`
	WorkflowID     string          `json:"workflow_id"`
	Input          json.RawMessage `json:"input,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	TaskQueue      string          `json:"task_queue"`
	StartAt        *time.Time      `json:"start_at,omitempty"`
	// ContinuedFrom is the run this one continues
	// (harvest.ContinueAsNew), if any.
	ContinuedFrom string `json:"continued_from,omitempty"`
	// SearchAttributes are those its start set.
	SearchAttributes map[string]json.RawMessage `json:"search_attributes,omitempty"`
}

// ActivityScheduledAttrs are the attributes of an ActivityScheduled event.
type ActivityScheduledAttrs struct {
	ActivityID     int             `json:"activity_id"`
	ActivityName   string          `json:"activity_name"`
	Input          json.RawMessage `json:"input,omitempty"`
	IdempotencyKey string          `json:"idempotency_key"`
	Options        ActivityOptions `json:"options"`
}

// ActivityClosedAttrs are the attributes of ActivityCompleted and
// ActivityFailed events.
type ActivityClosedAttrs struct {
	ActivityID   int             `json:"activity_id"`
	ActivityName string          `json:"activity_name"`
	Attempt      int             `json:"attempt"`
	Result       json.RawMessage `json:"result,omitempty"`
	Failure      *Failure        `json:"failure,omitempty"`
	// StartedAt and EndedAt are when the last attempt's code began and
	// returned on its worker, when the worker said: the attempt's
	// duration (the event's own time is when the scheduler recorded it).
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

// WorkflowClosedAttrs are the attributes of WorkflowCompleted,
// WorkflowFailed and WorkflowTerminated events.
type WorkflowClosedAttrs struct {
	Result  json.RawMessage `json:"result,omitempty"`
	Failure *Failure        `json:"failure,omitempty"`
	Reason  string          `json:"reason,omitempty"`
	// ContinueAsNew is how a run that continued as a new one did
	// (WorkflowContinuedAsNew).
	ContinueAsNew *ContinueAsNewAttrs `json:"continue_as_new,omitempty"`
	// ResetTo is the run that replaced a run terminated by a reset
	// (WorkflowTerminated; docs/reset.md).
	ResetTo string `json:"reset_to,omitempty"`
}

// WorkflowTask asks a worker to replay an execution over its history and
// decide what happens next.
type WorkflowTask struct {
	ExecutionID  string `json:"execution_id"`
	Shard        int    `json:"shard"`
	WorkflowName string `json:"workflow_name"`
	WorkflowID   string `json:"workflow_id"`
	TaskQueue    string `json:"task_queue"`
	TaskID       int    `json:"task_id"`
	// History holds the execution's events from HistoryFrom on, to its
	// last: the whole history when HistoryFrom is 0 (or 1). A worker
	// that holds the execution in its cache, having consumed the events
	// before HistoryFrom, runs on; any other fetches those first
	// (HistoryPageRequest). A task whose events would be more than NATS
	// carries has none, and HistoryFrom one past its last event.
	History     []Event `json:"history"`
	HistoryFrom int     `json:"history_from,omitempty"`
	// Time is when the scheduler dispatched the task: the workflow's
	// Now while it runs.
	Time time.Time `json:"time,omitzero"`
	// Redispatch counts the times the scheduler dispatched this task
	// again because its deadline passed while the task stream no longer
	// held it (a task or its result lost). A worker treats a redispatched
	// task as it treats a redelivered one: an earlier copy may have run
	// its activities eagerly.
	Redispatch int `json:"redispatch,omitempty"`
	// ContinueAsNewSuggested says that the history, as the task carries
	// it, is past the scheduler's suggestion threshold of length or size
	// (history_suggest_events, history_suggest_bytes): the workflow's
	// ContinueAsNewSuggested while the task runs, recorded in its
	// WorkflowTaskCompleted.
	ContinueAsNewSuggested bool `json:"continue_as_new_suggested,omitempty"`
	// Updates are the updates requested of the execution that no task has
	// taken yet, oldest first: the task delivers each to the workflow
	// code once it has run over the history (see UpdateRequest).
	Updates []UpdateRequest `json:"updates,omitempty"`
	// ResetKeys are the activity keys a run reset from another inherits
	// (ResetInfo.Keys): a worker that runs its activities eagerly derives
	// their keys as the scheduler does (decide.Keys).
	ResetKeys map[int]ResetKey `json:"reset_keys,omitempty"`
}

// FirstSeq is the seq of History's first event: 1 for a task that
// carries the whole history.
func (t *WorkflowTask) FirstSeq() int {
	return max(1, t.HistoryFrom)
}

// Whole says whether the task carries the execution's whole history.
func (t *WorkflowTask) Whole() bool {
	return t.FirstSeq() == 1
}

// ActivityTask asks a worker to run one activity attempt.
type ActivityTask struct {
	ExecutionID    string          `json:"execution_id"`
	Shard          int             `json:"shard"`
	WorkflowName   string          `json:"workflow_name"`
	TaskQueue      string          `json:"task_queue"`
	ActivityID     int             `json:"activity_id"`
	ActivityName   string          `json:"activity_name"`
	Input          json.RawMessage `json:"input,omitempty"`
	IdempotencyKey string          `json:"idempotency_key"`
	Attempt        int             `json:"attempt"`
	ScheduledAt    time.Time       `json:"scheduled_at"`
	// Deadline ends the attempt (start-to-close, bounded by
	// schedule-to-close); a worker drops a task it gets after it, since
	// the scheduler has moved on to the next attempt.
	Deadline time.Time `json:"deadline"`
	// HeartbeatTimeoutMS, when set, is how long the attempt may go without
	// a heartbeat.
	HeartbeatTimeoutMS int64 `json:"heartbeat_timeout_ms,omitempty"`
	// HeartbeatDetails are the last details an earlier attempt reported.
	HeartbeatDetails json.RawMessage `json:"heartbeat_details,omitempty"`
	// PreviousOutcomeUnknown says the previous attempt ended without a
	// result (it timed out, or its worker vanished): its effect may have
	// happened, so a reconcile function runs first.
	PreviousOutcomeUnknown bool `json:"previous_outcome_unknown,omitempty"`
}

// UpdateCommand asks for an update of a running execution: the
// workflow's handler for Name answers it with Args. UpdateID is the
// command's id; an update with the same IdempotencyKey in the
// execution's chain of continued runs is the same update.
type UpdateCommand struct {
	ExecutionID    string          `json:"execution_id"`
	UpdateID       string          `json:"update_id"`
	Name           string          `json:"name"`
	Args           json.RawMessage `json:"args,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
}

// UpdateRequest is an update a workflow task delivers to the code.
type UpdateRequest struct {
	UpdateID string          `json:"update_id"`
	Name     string          `json:"name"`
	Args     json.RawMessage `json:"args,omitempty"`
}

// UpdateAttrs are an accept_update or complete_update decision's update,
// and the attributes of the WorkflowUpdateAccepted (UpdateID, Name, Args)
// and WorkflowUpdateCompleted (UpdateID, Result or Failure) events.
type UpdateAttrs struct {
	UpdateID string          `json:"update_id"`
	Name     string          `json:"name,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Failure  *Failure        `json:"failure,omitempty"`
}

// Why a workflow task did not take an update (UpdateRejection.Reason).
const (
	// UpdateRejectedByValidator: the handler's validator refused it.
	UpdateRejectedByValidator = "rejected"
	// UpdateRejectedUnknown: the workflow has no handler of its name.
	UpdateRejectedUnknown = "unknown_update"
)

// UpdateRejection is an update a workflow task refused, and why.
type UpdateRejection struct {
	UpdateID string   `json:"update_id"`
	Reason   string   `json:"reason"`
	Failure  *Failure `json:"failure,omitempty"`
}

// Outcome is what the scheduler reports about an applied command: stored
// in PostgreSQL under the command id (store.GetOutcome) and announced on
// broker.OutcomeSubject once stored.
type Outcome struct {
	CommandID string `json:"command_id"`
	// StreamSeq is the command stream sequence of the message whose
	// application produced this outcome: a later message with the same
	// command id overwrites it with its own.
	StreamSeq    uint64 `json:"stream_seq"`
	Kind         string `json:"kind"`
	ExecutionID  string `json:"execution_id,omitempty"`
	WorkflowName string `json:"workflow_name,omitempty"`
	WorkflowID   string `json:"workflow_id,omitempty"`
	Status       string `json:"status,omitempty"`
	Keyed        bool   `json:"keyed,omitempty"`
	StartedFresh bool   `json:"started_fresh,omitempty"`
	Deduplicated bool   `json:"deduplicated,omitempty"`
	// FirstSeenAt and ExpiresAt describe the idempotency claim of a keyed
	// start.
	FirstSeenAt *time.Time `json:"first_seen_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	// Error is a machine-readable code when the command was refused, with
	// the HTTP status that answers it.
	Error      string `json:"error,omitempty"`
	Message    string `json:"message,omitempty"`
	HTTPStatus int    `json:"http_status,omitempty"`
	// SignalDelivered says whether a signal command appended its signal.
	SignalDelivered bool `json:"signal_delivered,omitempty"`
	// CancelRequested says a cancel command found the execution running,
	// asked to cancel (now or before).
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// UpdateID is the update an update command asked for, or the one
	// with its key it repeated.
	UpdateID string `json:"update_id,omitempty"`
	// Deferred says a start's policy holds it back: the outcome is
	// replaced by the execution's when the policy lets it begin.
	Deferred bool `json:"deferred,omitempty"`
	// ResetFrom and PointSeq are a reset's: the run it replaced, and the
	// workflow task it went to.
	ResetFrom string    `json:"reset_from,omitempty"`
	PointSeq  int       `json:"point_seq,omitempty"`
	AppliedAt time.Time `json:"applied_at,omitzero"`
}

// OrNull returns raw, or JSON null when raw is empty.
func OrNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// TargetExecution is the execution the command names, "" for a start
// (whose execution the apply decides) and for a malformed command.
func (c *Command) TargetExecution() string {
	switch {
	case c.WorkflowTask != nil:
		return c.WorkflowTask.ExecutionID
	case c.Activity != nil:
		return c.Activity.ExecutionID
	case c.Heartbeat != nil:
		return c.Heartbeat.ExecutionID
	case c.Cancel != nil:
		return c.Cancel.ExecutionID
	case c.Terminate != nil:
		return c.Terminate.ExecutionID
	case c.Reset != nil:
		return c.Reset.ExecutionID
	case c.Signal != nil && c.Kind == KindSignal:
		return c.Signal.ExecutionID
	case c.Update != nil:
		return c.Update.ExecutionID
	case c.Report != nil:
		return c.Report.ExecutionID
	}
	return ""
}
