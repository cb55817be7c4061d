package api

import (
	"encoding/json"
	"time"
)

// The JSON bodies of Harvest's HTTP API: what the server decodes from
// requests and encodes into answers, one type each. The server encodes
// exactly these types. Execution, Event (execution.go), DeadCommand,
// the workers' and retention's answers and ErrorResponse (errors.go) are
// bodies too. Package client's methods wrap them into friendlier results
// (StartResult, CommandStatus, …); use the types directly to speak to
// routes it has no method for.

// StartRequest is the body of POST /api/harvest/workflows/{name}/start.
// Every member is optional; the Idempotency-Key header, when sent,
// overrides IdempotencyKey.
type StartRequest struct {
	Input json.RawMessage `json:"input,omitempty"`
	// WorkflowID is the business identifier of the execution, 1 to 256
	// bytes; absent mints one.
	WorkflowID     *string `json:"workflow_id,omitempty"`
	IdempotencyKey *string `json:"idempotency_key,omitempty"`
	// ReusePolicy is one of the Reuse constants; empty means
	// allow_duplicate.
	ReusePolicy string `json:"reuse_policy,omitempty"`
	// Delay ("90s") or StartAt (RFC 3339) defers the first workflow task;
	// give one at most.
	Delay   *string `json:"delay,omitempty"`
	StartAt *string `json:"start_at,omitempty"`
	// CompletionCallback is an http(s) URL the outcome is POSTed to when
	// the execution closes.
	CompletionCallback *string `json:"completion_callback,omitempty"`
	// StartPolicy, when set, admits this start by its own policy instead
	// of the one its workflow is configured with (docs/start-policies.md).
	StartPolicy *StartPolicy `json:"start_policy,omitempty"`
	// Store pins the start to the named PostgreSQL store of a deployment
	// with several: one that is unknown or read_only refuses it
	// (docs/deploy.md#several-postgresql-stores).
	Store *string `json:"store,omitempty"`
	// TaskQueue is the task queue the execution's tasks go to: 1 to 128
	// bytes of letters, digits, '_' and '-' (else 400
	// invalid_task_queue). Absent: the workflow's configured
	// workflows.<name>.task_queue, else "default". A start on a queue no
	// live worker serves is 404 unknown_workflow unless the configuration
	// declares the workflow on that queue (docs/deploy.md#task-queues).
	TaskQueue *string `json:"task_queue,omitempty"`
	// Versioning routes the execution's workflow tasks among builds
	// (docs/versioning.md#pinned-workflows): "pinned" keeps them on one
	// build, "auto_upgrade" sends them to the newest build that registers
	// the workflow. Absent: the workflow's configured
	// workflows.<name>.versioning, else "auto_upgrade". Another value is
	// 400 invalid_versioning.
	Versioning *string `json:"versioning,omitempty"`
	// BuildID pins the execution to this build (it implies "pinned"): a
	// live worker of it must register the workflow on the start's task
	// queue, else 400 invalid_build. Absent, a pinned execution stays on
	// the build that runs its first workflow task.
	BuildID *string `json:"build_id,omitempty"`
	// RunTimeout bounds the run, ExecutionTimeout the whole chain of runs
	// that continue as new (Go durations such as "30m"): past it the
	// execution closes TimedOut (docs/cancellation.md#timeouts). Absent:
	// the workflow's configured workflows.<name>.run_timeout and
	// .execution_timeout, else none. Zero, negative, over ten years, or a
	// run timeout longer than the execution timeout is 400
	// invalid_timeout.
	RunTimeout       *string `json:"run_timeout,omitempty"`
	ExecutionTimeout *string `json:"execution_timeout,omitempty"`
	// Priority orders the execution's tasks among the others of its task
	// queue: from MinPriority to MaxPriority, higher taken first, equal
	// ones in order (docs/start-policies.md#priorities). Its activities
	// run at it unless their ActivityOptions say otherwise, its children
	// and continued runs inherit it. Absent: DefaultPriority. Outside
	// the range: 400 invalid_priority.
	Priority *int `json:"priority,omitempty"`
	// SearchAttributes sets the execution's search attributes, each
	// declared by its workflow with a type (docs/search-attributes.md).
	SearchAttributes map[string]json.RawMessage `json:"search_attributes,omitempty"`
}

// Task priorities (StartRequest.Priority, harvest.ActivityOptions).
const (
	MinPriority     = 1
	MaxPriority     = 5
	DefaultPriority = 3
)

// StartPolicy says how a workflow's starts are admitted: throttled,
// debounced or batched (one of the three). A start a policy holds back is
// answered 202 {"status": "deferred", "command_id"}; GET
// /api/harvest/commands/{command_id} later gives the execution it became
// part of.
type StartPolicy struct {
	Throttle    *Throttle    `json:"throttle,omitempty" yaml:"throttle"`
	Debounce    *Debounce    `json:"debounce,omitempty" yaml:"debounce"`
	Batch       *Batch       `json:"batch,omitempty" yaml:"batch"`
	Concurrency *Concurrency `json:"concurrency,omitempty" yaml:"concurrency"`
}

// Concurrency lets at most Limit executions of the workflow run at once
// for each value of Key, a JSON Pointer into the input ("/customer_id";
// empty: the whole workflow). A start over the limit is not deferred: its
// execution is created at once, Pending, and begins in the order the
// starts came as running ones close. Such a start may carry an
// idempotency key.
type Concurrency struct {
	Limit int    `json:"limit" yaml:"limit"`
	Key   string `json:"key,omitempty" yaml:"key"`
}

// ConcurrencyResponse answers GET
// /api/harvest/workflows/{name}/concurrency?key=: how many executions of
// the key run and wait, and its limit (0 when none ran under the policy).
type ConcurrencyResponse struct {
	Workflow string `json:"workflow"`
	Key      string `json:"key"`
	Running  int    `json:"running"`
	Pending  int    `json:"pending"`
	Limit    int    `json:"limit"`
}

// Throttle lets at most Limit starts per Period ("1m") begin for each
// value of Key, a JSON Pointer into the input ("/customer_id"; empty: the
// whole workflow). Starts over the limit are deferred, not refused, and
// begin in the order they came as the window allows.
type Throttle struct {
	Limit  int    `json:"limit" yaml:"limit"`
	Period string `json:"period" yaml:"period"`
	Key    string `json:"key,omitempty" yaml:"key"`
}

// Debounce collapses the starts with the same Key that come within Period
// of each other into one execution, which starts Period after the last of
// them, with the last start's input (Input "last", the default) or the
// first's ("first").
type Debounce struct {
	Period string `json:"period" yaml:"period"`
	Key    string `json:"key,omitempty" yaml:"key"`
	Input  string `json:"input,omitempty" yaml:"input"`
}

// Batch collects the starts with the same Key and starts one execution
// whose input is the list of their inputs, in the order they came, when
// MaxSize have come or MaxWait ("5s") has passed since the first.
type Batch struct {
	MaxSize int    `json:"max_size" yaml:"max_size"`
	MaxWait string `json:"max_wait" yaml:"max_wait"`
	Key     string `json:"key,omitempty" yaml:"key"`
}

// The values of Debounce.Input.
const (
	DebounceInputLast  = "last"
	DebounceInputFirst = "first"
)

// StartResponse answers a start: 201 when it created the execution, 200
// when it found one.
type StartResponse struct {
	ExecutionID  string `json:"execution_id"`
	WorkflowName string `json:"workflow_name"`
	WorkflowID   string `json:"workflow_id"`
	Status       string `json:"status"`
	// StartedFresh and Deduplicated are sent for keyed starts only.
	StartedFresh *bool `json:"started_fresh,omitempty"`
	Deduplicated *bool `json:"deduplicated,omitempty"`
	// FirstSeenAt and ExpiresAt are the key's claim window, sent for a
	// deduplicated keyed start.
	FirstSeenAt *time.Time `json:"first_seen_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	// WaitingFor is "concurrency" (WaitingForConcurrency) for an execution
	// created Pending by a concurrency start policy.
	WaitingFor string `json:"waiting_for,omitempty"`
}

// AcceptedResponse is a 202 answer: the command is durable, its outcome
// not known yet; poll GET /api/harvest/commands/{command_id}. Status is
// "accepted".
type AcceptedResponse struct {
	CommandID string `json:"command_id"`
	Status    string `json:"status"`
}

// SignalResponse answers POST
// /api/harvest/executions/{execution_id}/signals/{name} (202):
// SignalDelivered when the signal was applied (false for the retry of a
// keyed signal already delivered), or CommandID and Status "accepted"
// when its outcome is not known yet.
type SignalResponse struct {
	OK              bool   `json:"ok"`
	SignalDelivered *bool  `json:"signal_delivered,omitempty"`
	CommandID       string `json:"command_id,omitempty"`
	Status          string `json:"status,omitempty"`
}

// SignalWithStartRequest is the body of POST
// /api/harvest/workflows/{name}/signal-with-start. WorkflowID and
// SignalName are required; the Idempotency-Key header, when sent,
// overrides IdempotencyKey.
type SignalWithStartRequest struct {
	WorkflowID     *string         `json:"workflow_id"`
	Input          json.RawMessage `json:"input,omitempty"`
	SignalName     string          `json:"signal_name"`
	SignalPayload  json.RawMessage `json:"signal_payload,omitempty"`
	IdempotencyKey *string         `json:"idempotency_key,omitempty"`
	ReusePolicy    string          `json:"reuse_policy,omitempty"`
	// TaskQueue is the task queue of the execution, if one starts, as
	// StartRequest's.
	TaskQueue *string `json:"task_queue,omitempty"`
	// Versioning and BuildID route the execution's workflow tasks among
	// builds, if one starts, as StartRequest's.
	Versioning *string `json:"versioning,omitempty"`
	BuildID    *string `json:"build_id,omitempty"`
	// Priority is the priority of the execution's tasks, if one starts,
	// as StartRequest's.
	Priority *int `json:"priority,omitempty"`
	// SearchAttributes are the execution's search attributes, if one
	// starts, as StartRequest's (400 invalid_search_attribute).
	SearchAttributes map[string]json.RawMessage `json:"search_attributes,omitempty"`
}

// SignalWithStartResponse answers a signal-with-start: 201 when it
// started the execution, else 200. (A late one is answered 202 with a
// SignalResponse naming the command.)
type SignalWithStartResponse struct {
	ExecutionID     string `json:"execution_id"`
	WorkflowName    string `json:"workflow_name"`
	WorkflowID      string `json:"workflow_id"`
	Status          string `json:"status"`
	StartedFresh    bool   `json:"started_fresh"`
	SignalDelivered bool   `json:"signal_delivered"`
}

// CancelRequest is the optional body of POST
// /api/harvest/executions/{execution_id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason"`
	// CancelGrace bounds how long the workflow code may take to close the
	// execution once told (a Go duration, "30s"): it is terminated if it
	// is still running then. It overrides the workflow's configured
	// cancel_grace; neither means no bound.
	CancelGrace string `json:"cancel_grace,omitempty"`
}

// CancelResponse answers a cancellation (200); a late one is answered 202
// with an AcceptedResponse. Its members are in the order the server has
// always sent them, then cancel_requested.
type CancelResponse struct {
	ExecutionID  string `json:"execution_id"`
	Status       string `json:"status"`
	WorkflowID   string `json:"workflow_id"`
	WorkflowName string `json:"workflow_name"`
	// CancelRequested says the execution is running and was asked to
	// cancel (by this request or an earlier one): its code is told, and
	// closes it. A closed execution's status says how it ended.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// TerminateRequest is the optional body of POST
// /api/harvest/executions/{execution_id}/terminate.
type TerminateRequest struct {
	Reason string `json:"reason"`
}

// TerminateResponse answers a termination (200): the execution, and its
// status (Terminated, or how it had closed before); a late one is
// answered 202 with an AcceptedResponse. Its members are in the order of
// a CancelResponse's.
type TerminateResponse struct {
	ExecutionID  string `json:"execution_id"`
	Status       string `json:"status"`
	WorkflowID   string `json:"workflow_id"`
	WorkflowName string `json:"workflow_name"`
}

// Command states: CommandResponse.Status.
const (
	CommandAccepted = "accepted"
	CommandApplied  = "applied"
	CommandRejected = "rejected"
	// CommandDeferred: a start its workflow's start policy holds back;
	// it becomes "applied", with the execution it became part of, when
	// the policy lets it start.
	CommandDeferred = "deferred"
)

// CommandResponse answers GET /api/harvest/commands/{command_id} once the
// command is "applied" (or "rejected": set aside as dead): HTTPStatus and
// Outcome are the answer the command's request would have had. While the
// command waits, the answer is an AcceptedResponse instead, which decodes
// into a CommandResponse with Status "accepted". Its members are in the
// order the server has always sent them.
type CommandResponse struct {
	CommandID  string          `json:"command_id"`
	HTTPStatus int             `json:"http_status"`
	Outcome    json.RawMessage `json:"outcome"`
	Status     string          `json:"status"`
}

// ListExecutionsResponse answers GET /api/harvest/executions.
type ListExecutionsResponse struct {
	Executions []Execution `json:"executions"`
	// NextCursor, when the listing has more, is the cursor parameter of
	// its next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// HistoryResponse answers GET
// /api/harvest/executions/{execution_id}/history, oldest event first.
type HistoryResponse struct {
	Events []Event `json:"events"`
}

// State answers GET /api/harvest/executions/{execution_id}/state/{name}:
// the latest value of a query state the execution's workflow code set
// (harvest.SetQueryState), as the last workflow task that changed it
// left it.
type State struct {
	ExecutionID string `json:"execution_id"`
	Name        string `json:"name"`
	// Value is the state's value, the JSON the workflow code set.
	Value json.RawMessage `json:"value"`
	// Seq is the history event the value reflects: the
	// WorkflowTaskCompleted of the task that set it. It grows with each
	// change of the state; after_seq=Seq waits for the next.
	Seq       int       `json:"seq"`
	UpdatedAt time.Time `json:"updated_at"`
	// Status is the execution's: once it is not Running, the state
	// changes no more (a run continued as new has its own; describe's
	// continued_as names the next run).
	Status string `json:"status"`
}

// ListStatesResponse answers GET
// /api/harvest/executions/{execution_id}/state: every query state of the
// execution, by name.
type ListStatesResponse struct {
	ExecutionID string  `json:"execution_id"`
	Status      string  `json:"status"`
	States      []State `json:"states"`
}

// ListChildrenResponse answers GET
// /api/harvest/executions/{execution_id}/children: the child workflows
// the execution started (docs/children.md), as it knows them.
type ListChildrenResponse struct {
	ExecutionID string  `json:"execution_id"`
	Status      string  `json:"status"`
	Children    []Child `json:"children"`
}

// Child is a child workflow as its parent knows it: what its code
// started, the execution the start became, and its status as last told
// (Initiated until its start is applied, StartFailed when it was
// refused, Running, then how its chain closed).
type Child struct {
	// ChildID numbers the children of the run StartedBy, in the order
	// its code started them: a run that continued as new passes the
	// children still open on to the next.
	ChildID           int    `json:"child_id"`
	StartedBy         string `json:"started_by"`
	WorkflowName      string `json:"workflow_name"`
	WorkflowID        string `json:"workflow_id"`
	ExecutionID       string `json:"execution_id,omitempty"`
	Status            string `json:"status"`
	ParentClosePolicy string `json:"parent_close_policy"`
	CancelRequested   bool   `json:"cancel_requested,omitempty"`
}

// MaxStateWait is the longest a read of a query state waits for a newer
// value (its wait parameter).
const MaxStateWait = 60 * time.Second

// ListDeadCommandsResponse answers GET /api/harvest/commands/dead.
type ListDeadCommandsResponse struct {
	DeadCommands []DeadCommand `json:"dead_commands"`
}

// Admission gate states: AdmissionGate.State.
const (
	AdmissionClosed = "closed"
	AdmissionOpen   = "open"
)

// AdmissionGate answers POST /api/harvest/admission/{workflow}/close and
// /open: while closed, starts of the workflow are refused with 503
// admission_blocked.
type AdmissionGate struct {
	Workflow string    `json:"workflow"`
	State    string    `json:"state"`
	Reason   string    `json:"reason,omitempty"`
	ClosedAt time.Time `json:"closed_at,omitzero"`
}

// WorkflowSummary is one workflow of GET /api/harvest/workflows.
type WorkflowSummary struct {
	Name string `json:"name"`
	// Counts are its executions by status (absent statuses are 0).
	Counts map[string]int64 `json:"counts"`
	// InputSchema is the JSON Schema its starts' input must match, null
	// when it has none.
	InputSchema json.RawMessage `json:"input_schema"`
	// Admission is its gate: state "open", or "closed" with the reason.
	Admission AdmissionGate `json:"admission"`
	// Declared says the configuration names it (workflows.<name>, or a
	// webhook's or binding's rule), so its starts are accepted while no
	// worker serves it.
	Declared bool `json:"declared"`
	// Workers is how many live workers have registered it (on any task
	// queue).
	Workers int `json:"workers"`
}

// ListWorkflowsResponse answers GET /api/harvest/workflows: every
// workflow that has executions, an input schema, a closed gate, a live
// worker that registered it or a declaration in the configuration, by
// name.
type ListWorkflowsResponse struct {
	Workflows []WorkflowSummary `json:"workflows"`
}

// WorkflowVersionsResponse answers GET
// /api/harvest/workflows/{name}/versions: which code the workflow's open
// (Running) executions run, so that an operator knows when a build or a
// branch of harvest.GetVersion can be retired.
type WorkflowVersionsResponse struct {
	Workflow string `json:"workflow"`
	// Open counts the workflow's open executions.
	Open int64 `json:"open"`
	// Builds count them by the build that completed their last workflow
	// task (its worker's build_id), most first; build_id is "" for those
	// that completed none yet.
	Builds []BuildCount `json:"builds"`
	// Changes are the change ids (harvest.GetVersion) any of them
	// recorded, by name.
	Changes []ChangeVersions `json:"changes"`
}

// BuildCount is how many open executions a build ran last.
type BuildCount struct {
	BuildID string `json:"build_id"`
	Open    int64  `json:"open"`
}

// ChangeVersions are the open executions by the version they recorded of
// one change.
type ChangeVersions struct {
	ChangeID string `json:"change_id"`
	// Versions count those that recorded each version, by version.
	Versions []VersionCount `json:"versions"`
	// Unrecorded counts those that recorded none: they went past the
	// change before it was deployed (their code takes DefaultVersion), or
	// have not reached it yet.
	Unrecorded int64 `json:"unrecorded"`
}

// VersionCount is how many open executions recorded one version.
type VersionCount struct {
	Version int   `json:"version"`
	Open    int64 `json:"open"`
}

// ListWebhooksResponse answers GET /api/harvest/webhooks: the webhook
// sources and NATS subject bindings the answering ingest process is
// configured with, and what it counted of their deliveries since
// CountedSince, when it started. Each ingest process counts only what it
// served (and its share of each binding's messages): for the whole fleet,
// sum harvest_ingest_webhooks_total, harvest_ingest_webhooks_refused_total
// and harvest_binding_messages_total over the processes in Prometheus.
type ListWebhooksResponse struct {
	CountedSince time.Time       `json:"counted_since"`
	Sources      []WebhookSource `json:"sources"`
	// UnknownSource counts deliveries to a source that is not configured
	// (404): a provider pointed at a wrong URL.
	UnknownSource int64            `json:"unknown_source"`
	Bindings      []BindingSummary `json:"bindings"`
}

// WebhookSource is one configured webhook source, POST /hooks/{name}.
type WebhookSource struct {
	Name string `json:"name"`
	// Kind is how deliveries are verified: stripe, github, hmac or none.
	Kind         string `json:"kind"`
	MaxBodyBytes int64  `json:"max_body_bytes"`
	// PayloadSchema says deliveries must match the source's JSON Schema.
	PayloadSchema bool            `json:"payload_schema"`
	Rules         []RoutingRule   `json:"rules"`
	Counts        WebhookCounts   `json:"counts"`
	Refused       WebhookRefusals `json:"refused"`
}

// RoutingRule routes one event type of a webhook source or a binding to
// a start of Workflow, or to Signal of the execution of WorkflowID (a
// template over the event), started if none runs.
type RoutingRule struct {
	Event      string `json:"event"`
	Workflow   string `json:"workflow"`
	Signal     string `json:"signal,omitempty"`
	WorkflowID string `json:"workflow_id,omitempty"`
}

// WebhookCounts are a source's deliveries by what became of them:
// Accepted (published: a start or a signal), Duplicate (an event
// accepted before), Ignored (verified, but no rule names its type),
// Refused (see WebhookRefusals), Unavailable (503: the command stream
// down, or the workflow's admission gate closed; the provider retries).
type WebhookCounts struct {
	Accepted    int64 `json:"accepted"`
	Duplicate   int64 `json:"duplicate"`
	Ignored     int64 `json:"ignored"`
	Refused     int64 `json:"refused"`
	Unavailable int64 `json:"unavailable"`
}

// WebhookRefusals are a source's refused deliveries by reason:
// BadSignature (401: a signature that does not verify, or none, or a
// stale timestamp), Schema (422: the source's payload schema, or the
// workflow's input schema), TooLarge (413), Malformed (another 4xx: not
// JSON, not application/json, no event id, no workflow_id to route by).
type WebhookRefusals struct {
	BadSignature int64 `json:"bad_signature"`
	Schema       int64 `json:"schema"`
	TooLarge     int64 `json:"too_large"`
	Malformed    int64 `json:"malformed"`
}

// BindingSummary is one NATS subject binding: the messages of Subject on
// the user's Stream, routed by Rules.
type BindingSummary struct {
	Name    string        `json:"name"`
	Stream  string        `json:"stream"`
	Subject string        `json:"subject"`
	Rules   []RoutingRule `json:"rules"`
	Counts  BindingCounts `json:"counts"`
}

// BindingCounts are a binding's messages by what became of them:
// Published (a command), Duplicate (the broker held the command: a
// message taken again), Ignored (no rule), Retried (the command stream
// did not take it; delivered again later), DeadLettered (it can never
// become a command: sent to the binding's dead-letter subject).
type BindingCounts struct {
	Published    int64 `json:"published"`
	Duplicate    int64 `json:"duplicate"`
	Ignored      int64 `json:"ignored"`
	Retried      int64 `json:"retried"`
	DeadLettered int64 `json:"dead_lettered"`
}

// CloseAdmissionRequest is the body of POST
// /api/harvest/admission/{workflow}/close; Reason is required and shown
// to refused callers.
type CloseAdmissionRequest struct {
	Reason string `json:"reason"`
}

// ListAdmissionResponse answers GET /api/harvest/admission: the closed
// gates, by workflow name.
type ListAdmissionResponse struct {
	Closed []AdmissionGate `json:"closed"`
}

// RunRequest is the body of POST /v1/runs, ArcFlow's create-run: a start
// of Workflow, keyed by the Idempotency-Key header.
type RunRequest struct {
	Workflow string          `json:"workflow"`
	Input    json.RawMessage `json:"input"`
}

// RunResponse answers POST /v1/runs and GET /v1/runs/{run_id}. RunID is
// the execution id; TraceID is stable for the run; Status is the
// execution's (Running, Completed, Failed, Cancelled, Terminated,
// TimedOut).
type RunResponse struct {
	RunID   string `json:"run_id"`
	TraceID string `json:"trace_id"`
	Status  string `json:"status"`
}

// ExternalResponse answers POST /v1/runs/{run_id}/external/{binding_id}.
// Status is "accepted", or "already_processed" for a repeated
// X-Idempotency-Key.
type ExternalResponse struct {
	RunID     string `json:"run_id"`
	BindingID string `json:"binding_id"`
	Status    string `json:"status"`
	// CommandID is set when the callback is durable but not applied yet.
	CommandID string `json:"command_id,omitempty"`
}

// HookResponse answers a webhook delivery, POST /hooks/{source}.
type HookResponse struct {
	Accepted  bool   `json:"accepted"`
	CommandID string `json:"command_id,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Ignored   bool   `json:"ignored,omitempty"`
}

// HealthResponse answers GET /healthz; Status is "ok".
type HealthResponse struct {
	Status string `json:"status"`
}

// ReadinessResponse answers GET /readyz, on ingest's address and on the
// scheduler's and the worker's admin_addr: 200 with Status "ready" (or,
// on ingest, "degraded"), or 503 with Status and Error "not_ready" and
// Message saying why.
type ReadinessResponse struct {
	// Status is ReadyStatusReady, ReadyStatusDegraded (ingest only: it
	// serves, but something every ingest shares is wrong; Reasons say
	// what) or ReadyStatusNotReady.
	Status  string `json:"status"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
	// Reasons are why the process is not ready or degraded, one each
	// (Message joins them): on ingest "JetStream unreachable" (not
	// ready), "PostgreSQL unreachable" and the failing shards
	// (degraded), and the budgets of requests served at once that are
	// full (Saturated).
	Reasons []string `json:"reasons,omitempty"`
	// JetStream is "ok" or why it is not (ingest only).
	JetStream string `json:"jetstream,omitempty"`
	// Database is "ok", "none" (no database configured: ingest reads
	// none) or "unavailable" (it cannot be read: ingest is degraded)
	// (ingest only).
	Database string `json:"database,omitempty"`
	// FailingShards are the shards that have not applied commands for
	// 10 s or more (ingest only).
	FailingShards []FailingShard `json:"failing_shards,omitempty"`
	// Saturated names the budgets of requests served at once that are
	// full (ingest only): "api" (max_in_flight: the process is not
	// ready), "webhook:<source>", "arcflow" or "unauthenticated" (the
	// requests that carry no token: degraded).
	Saturated []string `json:"saturated,omitempty"`
}

// ReadinessResponse's Status values.
const (
	ReadyStatusReady    = "ready"
	ReadyStatusDegraded = "degraded"
	ReadyStatusNotReady = "not_ready"
)

// FailingShard is a shard that has not applied commands since
// FailingSince.
type FailingShard struct {
	Shard        int       `json:"shard"`
	FailingSince time.Time `json:"failing_since"`
	// Cause is "failing" (the scheduler that holds the shard keeps
	// failing to apply its commands) or "unowned" (no scheduler has held
	// it since FailingSince).
	Cause string `json:"cause,omitempty"`
	// LastError is empty on ingest's /readyz, which quotes no internal
	// error: the scheduler's log and admin /readyz have it.
	LastError string `json:"last_error,omitempty"`
}
