package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// Error codes: the "error" member of an error answer, and APIError.Code;
// api.CodeInvalidJSON and the others say when each is answered. The HTTP
// status each comes with is given; a code always comes with the same
// status.
const (
	// 400 Bad Request: the request is malformed.
	CodeInvalidJSON               = api.CodeInvalidJSON
	CodeUnreadableBody            = api.CodeUnreadableBody
	CodeInvalidWorkflowName       = api.CodeInvalidWorkflowName
	CodeInvalidWorkflowID         = api.CodeInvalidWorkflowID
	CodeInvalidIdempotencyKey     = api.CodeInvalidIdempotencyKey
	CodeInvalidReusePolicy        = api.CodeInvalidReusePolicy
	CodeInvalidStartPolicy        = api.CodeInvalidStartPolicy
	CodeInvalidStore              = api.CodeInvalidStore
	CodeInvalidTaskQueue          = api.CodeInvalidTaskQueue
	CodeIdempotencyKeyNotAllowed  = api.CodeIdempotencyKeyNotAllowed
	CodeInvalidSchedule           = api.CodeInvalidSchedule
	CodeInvalidDelay              = api.CodeInvalidDelay
	CodeInvalidStartAt            = api.CodeInvalidStartAt
	CodeInvalidCompletionCallback = api.CodeInvalidCompletionCallback
	CodeInvalidSignalName         = api.CodeInvalidSignalName
	CodeInvalidUpdateName         = api.CodeInvalidUpdateName
	CodeInvalidWait               = api.CodeInvalidWait
	CodeInvalidCancelGrace        = api.CodeInvalidCancelGrace
	CodeInvalidTimeout            = api.CodeInvalidTimeout
	CodeInvalidParentClosePolicy  = api.CodeInvalidParentClosePolicy
	CodeInvalidReason             = api.CodeInvalidReason
	CodeInvalidStatus             = api.CodeInvalidStatus
	CodeInvalidLimit              = api.CodeInvalidLimit
	CodeInvalidShard              = api.CodeInvalidShard
	CodeInvalidBefore             = api.CodeInvalidBefore
	CodeInvalidCursor             = api.CodeInvalidCursor
	CodeInvalidTime               = api.CodeInvalidTime
	CodeInvalidPrefix             = api.CodeInvalidPrefix
	CodeInvalidBindingID          = api.CodeInvalidBindingID
	CodeInvalidEventID            = api.CodeInvalidEventID
	CodeInvalidExecutionID        = api.CodeInvalidExecutionID
	CodeMissingWorkflow           = api.CodeMissingWorkflow
	CodeMissingEventID            = api.CodeMissingEventID
	CodeUnroutableEvent           = api.CodeUnroutableEvent
	CodeReasonRequired            = api.CodeReasonRequired
	CodeInvalidStateName          = api.CodeInvalidStateName
	CodeInvalidAfterSeq           = api.CodeInvalidAfterSeq
	CodePayloadUnstorable         = api.CodePayloadUnstorable
	CodeUnknownField              = api.CodeUnknownField
	CodeUnknownParameter          = api.CodeUnknownParameter
	CodeInvalidScheduleSpec       = api.CodeInvalidScheduleSpec
	CodeInvalidTimezone           = api.CodeInvalidTimezone
	CodeInvalidScheduleID         = api.CodeInvalidScheduleID
	CodeInvalidBackfill           = api.CodeInvalidBackfill

	// 401 Unauthorized.
	CodeInvalidSignature = api.CodeInvalidSignature
	CodeUnauthenticated  = api.CodeUnauthenticated

	// 403 Forbidden.
	CodeForbidden        = api.CodeForbidden
	CodeCrossSiteRequest = api.CodeCrossSiteRequest

	// 421 Misdirected Request.
	CodeHostNotAllowed = api.CodeHostNotAllowed

	// 404 Not Found.
	CodeExecutionNotFound   = api.CodeExecutionNotFound
	CodeCommandNotFound     = api.CodeCommandNotFound
	CodeDeadCommandNotFound = api.CodeDeadCommandNotFound
	CodeUnknownSource       = api.CodeUnknownSource
	CodeScheduleNotFound    = api.CodeScheduleNotFound
	CodeStateNotFound       = api.CodeStateNotFound
	CodeUnknownWorkflow     = api.CodeUnknownWorkflow
	CodeNotFound            = api.CodeNotFound
	CodeUpdateNotFound      = api.CodeUpdateNotFound

	// 409 Conflict.
	CodeExecutionTerminal      = api.CodeExecutionTerminal
	CodeWorkflowIDConflict     = api.CodeWorkflowIDConflict
	CodeExecutionClosed        = api.CodeExecutionClosed
	CodeExecutionNotLatest     = api.CodeExecutionNotLatest
	CodeResetUnsupported       = api.CodeResetUnsupported
	CodeInvalidResetPoint      = api.CodeInvalidResetPoint
	CodeInvalidDryRun          = api.CodeInvalidDryRun
	CodeInvalidFilter          = api.CodeInvalidFilter
	CodeInvalidSearchAttribute = api.CodeInvalidSearchAttribute
	CodeInvalidBatch           = api.CodeInvalidBatch
	CodeBatchNotFound          = api.CodeBatchNotFound

	// 408 Request Timeout.
	CodeBodyTimeout = api.CodeBodyTimeout

	// 413 Content Too Large.
	CodePayloadTooLarge = api.CodePayloadTooLarge
	CodeCommandTooLarge = api.CodeCommandTooLarge
	// Deprecated: the code was renamed; use CodePayloadTooLarge.
	CodeBodyTooLarge = CodePayloadTooLarge

	// 415 Unsupported Media Type.
	CodeUnsupportedMediaType = api.CodeUnsupportedMediaType

	// 422 Unprocessable Entity.
	CodeInputInvalid         = api.CodeInputInvalid
	CodePayloadInvalid       = api.CodePayloadInvalid
	CodeCallbackRejected     = api.CodeCallbackRejected
	CodeIdempotencyKeyReused = api.CodeIdempotencyKeyReused
	CodeCommandRejected      = api.CodeCommandRejected
	CodeUpdateRejected       = api.CodeUpdateRejected
	// CodeConcurrencyKeyMissing: a start under a concurrency start
	// policy whose input has no string, number or boolean at the
	// policy's key.
	CodeConcurrencyKeyMissing = api.CodeConcurrencyKeyMissing

	// 429 Too Many Requests.
	CodeUpdateLimit = api.CodeUpdateLimit

	// 500 Internal Server Error.
	CodeClaimDangling = api.CodeClaimDangling
	CodeInternal      = api.CodeInternal

	// 503 Service Unavailable: retry, after RetryAfter when it is set.
	CodeUnavailable          = api.CodeUnavailable
	CodeAdmissionBlocked     = api.CodeAdmissionBlocked
	CodeCallbackUnverifiable = api.CodeCallbackUnverifiable
	CodeNotReady             = api.CodeNotReady
)

// Sentinels for errors.Is on an error the API answered. ErrNotFound and
// ErrConflict match on the HTTP status alone; the others are *APIError
// values that match an *APIError with the same Code (and, as each carries
// its status, ErrNotFound or ErrConflict where that applies):
//
//	errors.Is(err, client.ErrExecutionNotFound) // 404 execution_not_found
//	errors.Is(err, client.ErrNotFound)          // any 404
var (
	// ErrNotFound matches every 404 answer: execution_not_found,
	// command_not_found, dead_command_not_found, state_not_found,
	// schedule_not_found, unknown_source, unknown_workflow, not_found.
	ErrNotFound = errors.New("not found")
	// ErrConflict matches every 409 answer: execution_terminal,
	// workflow_id_conflict.
	ErrConflict = errors.New("conflict")

	// ErrUnauthenticated matches 401 unauthenticated: the API requires a
	// bearer token and the request had none the server knows.
	ErrUnauthenticated error = sentinel(http.StatusUnauthorized, CodeUnauthenticated, "no known bearer token")
	// ErrForbidden matches 403 forbidden: the token lacks the scope the
	// request needs, or is limited to other workflows.
	ErrForbidden error = sentinel(http.StatusForbidden, CodeForbidden, "the token may not do this")
	// ErrExecutionNotFound matches 404 execution_not_found: no execution
	// has the id (Describe, History, a signal, a cancellation).
	ErrExecutionNotFound error = sentinel(http.StatusNotFound, CodeExecutionNotFound, "no such execution")
	// ErrCommandNotFound matches 404 command_not_found: no command has
	// the id, or its outcome has expired (Command).
	ErrCommandNotFound error = sentinel(http.StatusNotFound, CodeCommandNotFound, "no such command")
	// ErrUnknownWorkflow matches 404 unknown_workflow: no live worker
	// serves the workflow a start names, and the configuration does not
	// declare it (a typo, or a workflow whose workers are all gone).
	ErrUnknownWorkflow error = sentinel(http.StatusNotFound, CodeUnknownWorkflow, "no worker serves the workflow and the configuration does not declare it")
	// ErrStateNotFound matches 404 state_not_found: the execution's
	// workflow code never set the query state (State). An unknown
	// execution is ErrExecutionNotFound.
	ErrStateNotFound error = sentinel(http.StatusNotFound, CodeStateNotFound, "the execution has no such query state")
	// ErrDeadCommandNotFound matches 404 dead_command_not_found
	// (DeadCommand).
	ErrDeadCommandNotFound error = sentinel(http.StatusNotFound, CodeDeadCommandNotFound, "no such dead command")
	// ErrScheduleNotFound matches 404 schedule_not_found: no schedule has
	// the id (GetSchedule, ScheduleFires, a pause, a trigger, …).
	ErrScheduleNotFound error = sentinel(http.StatusNotFound, CodeScheduleNotFound, "no such schedule")
	// ErrExecutionTerminal matches 409 execution_terminal: the execution
	// has closed and takes no signals.
	ErrExecutionTerminal error = sentinel(http.StatusConflict, CodeExecutionTerminal, "the execution has closed")
	// ErrExecutionClosed matches 409 execution_closed: an update asked of
	// an execution that has closed, or one in flight when it closed.
	ErrExecutionClosed error = sentinel(http.StatusConflict, CodeExecutionClosed, "the execution closed")
	// ErrExecutionNotLatest matches 409 execution_not_latest: a reset of a
	// run that continued as new, or was reset to another point already;
	// the message names the run to reset.
	ErrExecutionNotLatest error = sentinel(http.StatusConflict, CodeExecutionNotLatest, "the run is not its chain's newest")
	// ErrInvalidResetPoint matches 422 invalid_reset_point: a reset to a
	// point no reset can go to (APIError.NearestPoints names valid ones).
	// ErrInvalidFilter matches 400 invalid_filter: a batch's filter is
	// malformed, or names no condition without "all": true.
	ErrInvalidFilter error = sentinel(http.StatusBadRequest, CodeInvalidFilter, "the batch's filter is invalid")
	// ErrBatchNotFound matches 404 batch_not_found.
	ErrBatchNotFound     error = sentinel(http.StatusNotFound, CodeBatchNotFound, "no such batch")
	ErrInvalidResetPoint error = sentinel(http.StatusUnprocessableEntity, CodeInvalidResetPoint, "no reset can go to that point")
	// ErrUpdateRejected matches 422 update_rejected: the update handler's
	// validator refused the update.
	ErrUpdateRejected error = sentinel(http.StatusUnprocessableEntity, CodeUpdateRejected, "the workflow refused the update")
	// ErrUpdateNotFound matches 404 update_not_found: the workflow has no
	// handler of the update's name, or no update has the id read.
	ErrUpdateNotFound error = sentinel(http.StatusNotFound, CodeUpdateNotFound, "no such update")
	// ErrUpdateLimit matches 429 update_limit: the execution has as many
	// updates in flight, or had as many in all, as its limits allow.
	ErrUpdateLimit error = sentinel(http.StatusTooManyRequests, CodeUpdateLimit, "too many updates")
	// ErrWorkflowIDConflict matches 409 workflow_id_conflict: the
	// workflow_id has an execution that the start's reuse policy does
	// not let it reuse.
	ErrWorkflowIDConflict error = sentinel(http.StatusConflict, CodeWorkflowIDConflict, "the workflow_id is taken")
	// ErrIdempotencyKeyReused matches 422 idempotency_key_reused: a keyed
	// start repeated the key with a different input, where the server
	// refuses that.
	ErrIdempotencyKeyReused error = sentinel(http.StatusUnprocessableEntity, CodeIdempotencyKeyReused, "the idempotency key was first used with a different input")
	// ErrInputInvalid matches 422 input_invalid: the input fails the
	// workflow's JSON Schema; APIError.Violations say where.
	ErrInputInvalid error = sentinel(http.StatusUnprocessableEntity, CodeInputInvalid, "the input does not match the workflow's schema")
	// ErrCallbackRejected matches 422 callback_rejected: the
	// completion_callback target is not allowed.
	ErrCallbackRejected error = sentinel(http.StatusUnprocessableEntity, CodeCallbackRejected, "the completion_callback target is not allowed")
	// ErrCommandRejected matches 422 command_rejected: the scheduler
	// could not apply the command and set it aside as dead (see
	// DeadCommands).
	ErrCommandRejected error = sentinel(http.StatusUnprocessableEntity, CodeCommandRejected, "the command was set aside as dead")
	// ErrPayloadUnstorable matches 400 payload_unstorable: a JSON value
	// of the request holds what Harvest cannot store;
	// APIError.Pointer locates it.
	ErrPayloadUnstorable error = sentinel(http.StatusBadRequest, CodePayloadUnstorable, "the request holds a value Harvest cannot store")
	// ErrUnknownField matches 400 unknown_field: the request body holds
	// a member the route does not read; APIError.Field names it.
	ErrUnknownField error = sentinel(http.StatusBadRequest, CodeUnknownField, "the request body holds a member the route does not read")
	// ErrUnknownParameter matches 400 unknown_parameter: the request
	// carries a query parameter the route does not read; APIError.Field
	// names it.
	ErrUnknownParameter error = sentinel(http.StatusBadRequest, CodeUnknownParameter, "the request carries a query parameter the route does not read")
	// ErrPayloadTooLarge matches 413 payload_too_large: the request body
	// is larger than the server takes; APIError.Limit is the limit.
	ErrPayloadTooLarge error = sentinel(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "the request body is too large")
	// Deprecated: renamed; use ErrPayloadTooLarge.
	ErrBodyTooLarge = ErrPayloadTooLarge
	// ErrCommandTooLarge matches 413 command_too_large: the request,
	// encoded as a command, is larger than the command stream carries.
	ErrCommandTooLarge error = sentinel(http.StatusRequestEntityTooLarge, CodeCommandTooLarge, "the command is too large")
	// ErrAdmissionBlocked matches 503 admission_blocked: starts of the
	// workflow are paused; APIError.RetryAfter says when to try again.
	ErrAdmissionBlocked error = sentinel(http.StatusServiceUnavailable, CodeAdmissionBlocked, "starts of the workflow are paused")
	// ErrUnavailable matches 503 unavailable: the server could not reach
	// JetStream or PostgreSQL; retry.
	ErrUnavailable error = sentinel(http.StatusServiceUnavailable, CodeUnavailable, "the server is unavailable")
)

func sentinel(status int, code, message string) *APIError {
	return &APIError{StatusCode: status, Code: code, Message: message}
}

// APIError is an error answer of the API: every non-2xx answer a Client
// gets is returned as one (errors.As(err, &apiErr)). Test it with
// errors.Is against ErrNotFound, ErrConflict and the Err sentinels, or
// switch on its Code.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the machine-readable code, one of the Code constants
	// ("execution_not_found"); empty if the answer was not the API's JSON
	// error.
	Code string
	// Message is the API's explanation.
	Message string
	// Field names the request field at fault, when there is one: a
	// body member (unknown_field: as sent), a query parameter
	// (unknown_parameter, invalid_limit) or a path segment.
	Field string
	// Pointer is the JSON Pointer, within the request body, of a value
	// Harvest cannot store (400 payload_unstorable and the invalid_*
	// codes of string members that hold one).
	Pointer string
	// Limit is the limit a too-large request broke, in bytes (413
	// payload_too_large, command_too_large), when the answer gives it.
	Limit int64
	// Violations lists what is wrong with an input that fails its
	// workflow's schema (422 input_invalid).
	Violations []Violation
	// NearestPoints are, for 422 invalid_reset_point, the valid reset
	// points nearest to the one asked for.
	NearestPoints []int
	// RetryAfter is the answer's Retry-After, zero if it had none.
	RetryAfter time.Duration
	// RequestID is the answer's X-Request-Id: quote it to whoever runs
	// the server, whose log has the request under it.
	RequestID string
}

// Violation is api.Violation.
type Violation = api.Violation

// ErrorResponse is api.ErrorResponse.
type ErrorResponse = api.ErrorResponse

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d: %s", e.StatusCode, e.Message)
	}
	return e.Code + ": " + e.Message
}

// Is makes errors.Is work: ErrNotFound matches every 404 and ErrConflict
// every 409; an *APIError target (the Err sentinels) matches an error with
// the same Code, or, when the target has no Code, the same StatusCode.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrConflict:
		return e.StatusCode == http.StatusConflict
	}
	t, ok := target.(*APIError)
	switch {
	case !ok || t == nil:
		return false
	case t.Code != "":
		return t.Code == e.Code
	default:
		return t.StatusCode != 0 && t.StatusCode == e.StatusCode
	}
}

// apiErrorFrom builds the APIError of a non-2xx answer.
func apiErrorFrom(status int, header http.Header, raw []byte) *APIError {
	e := &APIError{StatusCode: status}
	var body ErrorResponse
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		e.Code, e.Message, e.Field, e.Pointer, e.Limit, e.Violations = body.Error, body.Message, body.Field, body.Pointer, body.Limit, body.Violations
		e.NearestPoints = body.NearestPoints
		e.RequestID = body.RequestID
	} else {
		e.Message = http.StatusText(status)
		if text := strings.TrimSpace(string(raw)); text != "" {
			if len(text) > 200 {
				text = text[:200] + "…"
			}
			e.Message += ": " + text
		}
	}
	if header != nil {
		if e.RequestID == "" {
			e.RequestID = header.Get("X-Request-Id")
		}
		if secs, err := strconv.Atoi(header.Get("Retry-After")); err == nil && secs > 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	return e
}

// PendingError says the server accepted a command durably but ctx ended
// before its outcome was known. The command will still be applied; poll
// it with Command, or retry the call with the same idempotency key.
// errors.Is(err, context.DeadlineExceeded) (or context.Canceled) holds for
// it.
type PendingError struct {
	CommandID string
	Err       error // why the wait ended: ctx.Err()
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("command %s accepted, outcome not known yet: %v", e.CommandID, e.Err)
}

func (e *PendingError) Unwrap() error { return e.Err }

// ExecutionFailedError is what WaitResult returns for an execution that
// closed as Failed, Cancelled, Terminated or TimedOut: the terminal
// outcome of the workflow, not an error of the API.
type ExecutionFailedError struct {
	ExecutionID  string
	WorkflowName string
	// Status is the execution's terminal status.
	Status string
	// Message and Type come from the execution's error, when it has one.
	Message string
	Type    string
	// Failure is the execution's error as stored, null if none.
	Failure json.RawMessage
}

func (e *ExecutionFailedError) Error() string {
	msg := fmt.Sprintf("execution %s (%s) %s", e.ExecutionID, e.WorkflowName, e.Status)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}
