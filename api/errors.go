package api

// Error codes: the "error" member of an error answer (ErrorResponse.Error;
// client.APIError.Code). The HTTP status each comes with is given; a code
// always comes with the same status.
const (
	// 400 Bad Request: the request is malformed; sending it again as it
	// is cannot succeed.
	CodeInvalidJSON           = "invalid_json"
	CodeUnreadableBody        = "unreadable_body"
	CodeInvalidWorkflowName   = "invalid_workflow_name"
	CodeInvalidWorkflowID     = "invalid_workflow_id"
	CodeInvalidIdempotencyKey = "invalid_idempotency_key"
	CodeInvalidReusePolicy    = "invalid_reuse_policy"
	CodeInvalidStartPolicy    = "invalid_start_policy"
	CodeInvalidStore          = "invalid_store"
	CodeInvalidTaskQueue      = "invalid_task_queue"
	// CodeInvalidVersioning refuses a start's versioning that is neither
	// "pinned" nor "auto_upgrade" (400).
	CodeInvalidVersioning = "invalid_versioning"
	// CodeInvalidBuild refuses a pinned start's build_id that is no build
	// id, or one no live worker of which registers the workflow on the
	// start's task queue (400).
	CodeInvalidBuild = "invalid_build"
	// CodeIdempotencyKeyNotAllowed refuses a keyed start of a workflow
	// under a start policy: the policy defers the start, so there is no
	// execution for a retry to converge on.
	CodeIdempotencyKeyNotAllowed  = "idempotency_key_not_allowed"
	CodeInvalidSchedule           = "invalid_schedule"
	CodeInvalidDelay              = "invalid_delay"
	CodeInvalidStartAt            = "invalid_start_at"
	CodeInvalidCompletionCallback = "invalid_completion_callback"
	CodeInvalidSignalName         = "invalid_signal_name"
	CodeInvalidReason             = "invalid_reason"
	CodeInvalidStatus             = "invalid_status"
	CodeInvalidLimit              = "invalid_limit"
	CodeInvalidShard              = "invalid_shard"
	CodeInvalidBefore             = "invalid_before"
	CodeInvalidCursor             = "invalid_cursor"
	CodeInvalidTime               = "invalid_time"
	CodeInvalidPrefix             = "invalid_prefix"
	CodeInvalidBindingID          = "invalid_binding_id"
	CodeInvalidEventID            = "invalid_event_id"
	CodeInvalidExecutionID        = "invalid_execution_id"
	CodeMissingWorkflow           = "missing_workflow"
	CodeMissingEventID            = "missing_event_id"
	CodeUnroutableEvent           = "unroutable_event"
	CodeReasonRequired            = "reason_required"
	// CodeInvalidUpdateName refuses an update's name, or update id, that
	// is none (400).
	CodeInvalidUpdateName = "invalid_update_name"
	// CodeInvalidStateName refuses a query state's name that is not 1 to
	// 128 bytes of letters, digits, '_' and '-' (400).
	CodeInvalidStateName = "invalid_state_name"
	// CodeInvalidAfterSeq refuses a state read's after_seq that is not a
	// whole number from 0 (400).
	CodeInvalidAfterSeq = "invalid_after_seq"
	// CodeInvalidWait refuses a wait parameter that is none: an update's
	// (completed or accepted), or a read's that waits (a duration from 0s
	// to its limit, such as 30s) (400).
	CodeInvalidWait = "invalid_wait"
	// CodeInvalidCancelGrace refuses a cancel's cancel_grace that is not
	// a positive duration of at most ten years, such as "30s" (400).
	CodeInvalidCancelGrace = "invalid_cancel_grace"
	// CodeInvalidTimeout refuses a start's run_timeout or
	// execution_timeout that is not a positive duration of at most ten
	// years, or a run timeout longer than the execution timeout (400).
	CodeInvalidTimeout = "invalid_timeout"
	// CodeInvalidPriority refuses a start's priority that is not an
	// integer from MinPriority to MaxPriority (400).
	CodeInvalidPriority = "invalid_priority"
	// CodeInvalidDryRun refuses a dry_run query parameter that is not
	// true or false.
	CodeInvalidDryRun = "invalid_dry_run"
	// CodeInvalidSearchAttribute refuses a search attribute the workflow
	// does not declare, a value not of its declared type, or a filter on
	// one that is malformed (docs/search-attributes.md).
	CodeInvalidSearchAttribute = "invalid_search_attribute"
	// CodeInvalidFilter refuses a batch whose filter is malformed (a
	// time that is not RFC 3339, an unknown status) or names no condition
	// without "all": true.
	CodeInvalidFilter = "invalid_filter"
	// CodeInvalidBatch refuses a batch whose operation, signal, reset or
	// rate is malformed.
	CodeInvalidBatch = "invalid_batch"
	// CodeInvalidResetPoint (422 Unprocessable Entity) refuses a reset
	// to a point no reset can go to (docs/reset.md): the answer's
	// nearest_points name the valid ones around it.
	CodeInvalidResetPoint = "invalid_reset_point"
	// CodeInvalidParentClosePolicy refuses a child workflow's
	// parent_close_policy that is not terminate, request_cancel or
	// abandon (its start fails, for the parent's code to see).
	CodeInvalidParentClosePolicy = "invalid_parent_close_policy"
	// CodePayloadUnstorable refuses a JSON value Harvest cannot store
	// (such as a string holding U+0000); ErrorResponse.Pointer locates it.
	CodePayloadUnstorable = "payload_unstorable"
	// CodeUnknownField refuses a request body holding a member its route
	// does not read (a misspelling, such as "id_reuse_policy" for
	// "reuse_policy"); ErrorResponse.Field names it as sent.
	CodeUnknownField = "unknown_field"
	// CodeUnknownParameter refuses a query parameter its route does not
	// read (such as ?workflow_name= where the route reads ?workflow=);
	// ErrorResponse.Field names it as sent.
	CodeUnknownParameter = "unknown_parameter"
	// CodeInvalidScheduleSpec refuses a schedule's definition
	// (docs/schedules.md): a cron field that is none, every below 1s,
	// jitter longer than the interval, an overlap policy or catch-up
	// window that is none; ErrorResponse.Field names it ("spec.cron[0]").
	CodeInvalidScheduleSpec = "invalid_schedule_spec"
	// CodeInvalidTimezone refuses a schedule's timezone that is not an
	// IANA time zone name (never taken as UTC).
	CodeInvalidTimezone = "invalid_timezone"
	// CodeInvalidScheduleID refuses a schedule id that is not 1 to 128
	// letters, digits, '_', '-' or '.'.
	CodeInvalidScheduleID = "invalid_schedule_id"
	// CodeInvalidBackfill refuses a backfill whose start and end are no
	// range, or span more than api.MaxBackfillFires nominal times.
	CodeInvalidBackfill = "invalid_backfill"

	// 401 Unauthorized.
	CodeInvalidSignature = "invalid_signature"
	// CodeUnauthenticated answers a request to the API without a bearer
	// token the server knows (client.Config.Token).
	CodeUnauthenticated = "unauthenticated"

	// 403 Forbidden.
	// CodeForbidden answers a request whose token lacks the route's
	// scope, or is limited to other workflows than the one named.
	CodeForbidden = "forbidden"
	// CodeCrossSiteRequest refuses a request that changes something (a
	// POST) which a browser says it sent from another site, with a body
	// that is not JSON: what a web page can send without asking
	// (docs/security.md, "The dev stack and the browser").
	CodeCrossSiteRequest = "cross_site_request"

	// 421 Misdirected Request.
	// CodeHostNotAllowed refuses a request whose Host the API does not
	// answer: while it needs no token, only loopback names and addresses
	// and the configured allowed_hosts.
	CodeHostNotAllowed = "host_not_allowed"

	// 404 Not Found.
	CodeExecutionNotFound   = "execution_not_found"
	CodeCommandNotFound     = "command_not_found"
	CodeDeadCommandNotFound = "dead_command_not_found"
	CodeUnknownSource       = "unknown_source"
	// CodeBatchNotFound answers a request naming a batch that does not
	// exist.
	CodeBatchNotFound = "batch_not_found"
	// CodeScheduleNotFound answers a request naming a schedule that does
	// not exist.
	CodeScheduleNotFound = "schedule_not_found"
	// CodeStateNotFound answers a read of a query state the execution's
	// workflow code never set (the execution exists: an unknown one is
	// execution_not_found).
	CodeStateNotFound = "state_not_found"
	// CodeUnknownWorkflow refuses a start of a workflow that no live
	// worker serves and the configuration does not declare
	// (workflows.<name>); nothing was published.
	CodeUnknownWorkflow = "unknown_workflow"
	// CodeNotFound answers a request no route serves.
	CodeNotFound = "not_found"
	// CodeUpdateNotFound: the workflow has no update handler of the
	// update's name (it was refused by the workflow task that got it), or,
	// reading an update, no update has that id.
	CodeUpdateNotFound = "update_not_found"

	// 409 Conflict.
	CodeExecutionTerminal  = "execution_terminal"
	CodeWorkflowIDConflict = "workflow_id_conflict"
	// CodeExecutionClosed: an update asked of an execution that is
	// closed, or one still in flight when it closed.
	CodeExecutionClosed = "execution_closed"
	// CodeExecutionNotLatest refuses a reset of a run that is not its
	// chain's newest: it continued as new, or was reset already
	// (docs/reset.md). The message names the run to reset.
	CodeExecutionNotLatest = "execution_not_latest"
	// CodeResetUnsupported refuses a reset Harvest does not do yet: of a
	// closed execution that ran under a concurrency start policy while
	// its key has no free slot, or executions wait for one (a reset does
	// not wait in the key's queue). Asked again once one is free, it is
	// applied.
	CodeResetUnsupported = "reset_unsupported"

	// 408 Request Timeout.
	// CodeBodyTimeout: the body of a request that carries no token (a
	// webhook delivery, a signed ArcFlow callback) did not arrive within
	// its deadline, a few seconds proportional to its size; the
	// connection is closed. Nothing was published.
	CodeBodyTimeout = "body_timeout"

	// 413 Content Too Large.
	// CodePayloadTooLarge: the request body is over max_body_bytes (or a
	// webhook source's own limit).
	CodePayloadTooLarge = "payload_too_large"
	CodeCommandTooLarge = "command_too_large"

	// 415 Unsupported Media Type.
	CodeUnsupportedMediaType = "unsupported_media_type"

	// 422 Unprocessable Entity.
	CodeInputInvalid         = "input_invalid"
	CodePayloadInvalid       = "payload_invalid"
	CodeCallbackRejected     = "callback_rejected"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeCommandRejected      = "command_rejected"
	// CodeUpdateRejected: the update handler's validator refused the
	// update; nothing of it is in the execution's history.
	CodeUpdateRejected = "update_rejected"
	// CodeConcurrencyKeyMissing refuses a start under a concurrency
	// start policy whose input has nothing usable at the policy's key
	// (a string, number or boolean).
	CodeConcurrencyKeyMissing = "concurrency_key_missing"

	// 429 Too Many Requests.
	// CodeUpdateLimit: the execution has as many updates in flight, or
	// was asked for as many in all, as the scheduler's update limits
	// allow (update_max_in_flight, update_max_per_run).
	CodeUpdateLimit = "update_limit"

	// 500 Internal Server Error.
	CodeClaimDangling = "claim_dangling"
	// CodeInternal answers what went wrong inside the server; the answer
	// carries a request id (ErrorResponse.RequestID) under which the
	// server's log has the detail.
	CodeInternal = "internal"

	// 503 Service Unavailable: retry, after the answer's Retry-After
	// when it gives one.
	CodeUnavailable          = "unavailable"
	CodeAdmissionBlocked     = "admission_blocked"
	CodeCallbackUnverifiable = "callback_unverifiable"
	// CodeNotReady is the "error" of GET /readyz's 503 answer.
	CodeNotReady = "not_ready"
)

// Violation is one way an input fails its workflow's JSON Schema.
type Violation struct {
	// Field is the JSON Pointer of the offending value.
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ErrorResponse is the JSON body of every error answer; package client
// returns it as a *client.APIError.
type ErrorResponse struct {
	// Error is the machine-readable code, one of the Code constants.
	Error   string `json:"error"`
	Message string `json:"message"`
	// Field names the request field at fault, when there is one: a
	// body member, a query parameter (unknown_parameter, invalid_limit)
	// or a path segment.
	Field string `json:"field,omitempty"`
	// Limit is the limit a too-large request broke, in bytes.
	Limit int64 `json:"limit,omitempty"`
	// Pointer is the JSON Pointer, within the request body, of a value
	// that cannot be stored.
	Pointer string `json:"pointer,omitempty"`
	// Violations lists what is wrong with an input that fails its schema.
	Violations []Violation `json:"violations,omitempty"`
	// RequestID is the request's id, on a 500 internal (and a 503 whose
	// cause is logged): the server's log has the detail under it.
	RequestID string `json:"request_id,omitempty"`
	// NearestPoints are, for invalid_reset_point, the valid reset points
	// nearest to the one asked for: the seqs of WorkflowTaskCompleted
	// events (docs/reset.md).
	NearestPoints []int `json:"nearest_points,omitempty"`
}
