package harvest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/wire"
)

// ActivityContext is what an activity receives: a context.Context that is
// cancelled when the worker gives the attempt up, plus the invocation's
// identity.
type ActivityContext struct {
	context.Context
	info ActivityInfo
	// details are the last heartbeat details of an earlier attempt.
	details json.RawMessage
	// heartbeat sends a heartbeat; nil outside a worker.
	heartbeat func(details json.RawMessage)
	// ledger is the effect ledger Once uses; nil outside a worker.
	ledger jetstream.KeyValue
	// ledgerUsed counts Once's calls by result in the worker's metrics;
	// nil outside a worker.
	ledgerUsed func(result string)
}

// usedLedger counts a call of Once that ended as result.
func (c *ActivityContext) usedLedger(result string) {
	if c.ledgerUsed != nil {
		c.ledgerUsed(result)
	}
}

// ActivityInfo describes one activity attempt.
type ActivityInfo struct {
	ExecutionID    string
	WorkflowName   string
	ActivityName   string
	ActivityID     int
	Attempt        int
	IdempotencyKey ActivityKey
	ScheduledAt    time.Time
	// Deadline ends the attempt; the context is cancelled then.
	Deadline time.Time
	// PreviousOutcomeUnknown says the previous attempt ended without a
	// result (it timed out, or its worker vanished): its effect may have
	// happened. A registered reconcile function has already run.
	PreviousOutcomeUnknown bool
}

// IdempotencyKey is the stable key of this logical activity invocation:
// the same for every attempt, redelivery and replay, different for every
// other invocation. Hand it, or a Subkey of it, to downstream systems that
// deduplicate.
func (c *ActivityContext) IdempotencyKey() ActivityKey { return c.info.IdempotencyKey }

// Attempt is the attempt number, from 1.
func (c *ActivityContext) Attempt() int { return c.info.Attempt }

// ExecutionID is the workflow execution that scheduled the activity.
func (c *ActivityContext) ExecutionID() string { return c.info.ExecutionID }

// Info describes the attempt.
func (c *ActivityContext) Info() ActivityInfo { return c.info }

// Heartbeat reports that the attempt is alive, extending its heartbeat
// timeout, with details (encoded as JSON) that the next attempt can read
// with HeartbeatDetails. Heartbeats are throttled: call it as often as is
// convenient.
func (c *ActivityContext) Heartbeat(details any) {
	if c.heartbeat == nil {
		return
	}
	raw, err := json.Marshal(details)
	if err != nil {
		raw = nil
	}
	c.heartbeat(raw)
}

// HeartbeatDetails decodes the last details an earlier attempt reported
// into out, and says whether there were any.
func (c *ActivityContext) HeartbeatDetails(out any) (bool, error) {
	if len(c.details) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(c.details, out); err != nil {
		return true, fmt.Errorf("decode heartbeat details: %w", err)
	}
	return true, nil
}

// activityFunc is a registered activity, with JSON in and out.
type activityFunc func(ctx *ActivityContext, input json.RawMessage) (any, error)

// reconcileFunc looks up whether an activity's effect happened already.
type reconcileFunc func(ctx *ActivityContext, input json.RawMessage) (result any, found bool, err error)

// NonRetryableError marks a failure that retrying cannot fix, such as a
// validation or authorization failure.
type NonRetryableError struct {
	Err error
}

func (e *NonRetryableError) Error() string { return e.Err.Error() }
func (e *NonRetryableError) Unwrap() error { return e.Err }

// NonRetryable wraps err so the activity is not retried.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &NonRetryableError{Err: err}
}

// ApplicationError is an error with a type name of the user's choosing,
// which RetryPolicy.NonRetryableErrorTypes can list.
type ApplicationError struct {
	Type         string
	Message      string
	NonRetryable bool
}

func (e *ApplicationError) Error() string { return e.Type + ": " + e.Message }

// NewError returns an *ApplicationError of type typ.
func NewError(typ, format string, args ...any) error {
	return &ApplicationError{Type: typ, Message: fmt.Sprintf(format, args...)}
}

// NewNonRetryableError returns an *ApplicationError of type typ that is
// never retried, whatever the retry policy says.
func NewNonRetryableError(typ, format string, args ...any) error {
	return &ApplicationError{Type: typ, Message: fmt.Sprintf(format, args...), NonRetryable: true}
}

// failureOf turns an error into its wire form.
func failureOf(err error) *wire.Failure {
	f := &wire.Failure{Message: err.Error(), Type: errorType(err)}
	var nr *NonRetryableError
	if errors.As(err, &nr) {
		f.NonRetryable = true
		f.Type = errorType(nr.Err)
	}
	// The first typed error in the chain names the type: an
	// *ApplicationError its own, an *ActivityError (a workflow returning
	// a failed activity's error) harvest.ActivityError, not the type of
	// the activity's error it wraps, a canceled error Cancelled (and so
	// an activity that returns its context's context.Canceled once the
	// workflow gave it up).
	for e := err; e != nil; e = errors.Unwrap(e) {
		if _, ok := e.(*CanceledError); ok || e == ErrCanceled || e == context.Canceled {
			f.Type = cancelFailureType
			break
		}
		if ae, ok := e.(*ApplicationError); ok {
			f.Type = ae.Type
			f.NonRetryable = f.NonRetryable || ae.NonRetryable
			break
		}
		if ae, ok := e.(*ActivityError); ok {
			f.Type = errorType(ae)
			break
		}
	}
	return f
}

func errorType(err error) string {
	t := reflect.TypeOf(err)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() == "" {
		return t.Name()
	}
	return t.PkgPath() + "." + t.Name()
}

// decodeInput decodes a JSON input into a T; an absent input is T's zero
// value.
func decodeInput[T any](raw json.RawMessage) (T, error) {
	var in T
	if len(raw) == 0 || string(raw) == "null" {
		return in, nil
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return in, fmt.Errorf("decode input: %w", err)
	}
	return in, nil
}
