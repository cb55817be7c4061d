package harvest

import (
	"time"

	"github.com/harvest-engine/harvest/internal/wire"
)

// ActivityOptions tune an activity's attempts. Set them when registering
// the activity, and override any field per call (ExecuteActivity). The
// zero value is the defaults. Each of those functions takes at most one,
// as its last argument; several are merged in order, each one's non-zero
// fields winning, as a call's win over the registration's.
type ActivityOptions struct {
	// StartToClose bounds one attempt, default 5 minutes. An attempt that
	// has not reported by then (its worker vanished, say) is retried.
	StartToClose time.Duration
	// ScheduleToClose bounds all attempts together; zero means no bound.
	ScheduleToClose time.Duration
	// HeartbeatTimeout, when set, fails an attempt that goes that long
	// without calling Heartbeat (and cancels its context); it is retried.
	HeartbeatTimeout time.Duration
	// RetryPolicy, default DefaultRetryPolicy.
	RetryPolicy *RetryPolicy
	// TaskQueue sends the activity's attempts to the workers of another
	// task queue (a GPU box that registers only "render", say); empty
	// means the workflow's own. Letters, digits, '_' and '-', at most
	// 128 bytes: an activity given another fails at once, not retried.
	TaskQueue string
	// Priority orders the activity's tasks among the others of its task
	// queue, from api.MinPriority (1) to api.MaxPriority (5), higher taken
	// first (docs/start-policies.md#priorities); zero means its
	// execution's. An activity given another fails at once, not retried.
	Priority int
}

// RetryPolicy says how failed attempts are retried: after attempt n fails,
// the next starts InitialInterval × BackoffCoefficient^(n−1) later, at most
// MaximumInterval, until MaximumAttempts (counting the first; 0 means
// unlimited) have run. Errors marked non-retryable where they are created
// (NonRetryable, NewNonRetryableError), and errors whose type is listed in
// NonRetryableErrorTypes, are not retried.
type RetryPolicy struct {
	MaximumAttempts        int
	InitialInterval        time.Duration
	BackoffCoefficient     float64
	MaximumInterval        time.Duration
	NonRetryableErrorTypes []string
}

// DefaultRetryPolicy: exponential, 3 attempts from 1 s, coefficient 2,
// capped at 300 s.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		MaximumAttempts: wire.DefaultMaximumAttempts, InitialInterval: wire.DefaultInitialInterval,
		BackoffCoefficient: wire.DefaultBackoffCoefficient, MaximumInterval: wire.DefaultMaximumInterval,
	}
}

// RetryExponential is attempts attempts in all, doubling from initial:
// RetryExponential(3, 2*time.Second) waits 2 s, then 4 s, then fails.
func RetryExponential(attempts int, initial time.Duration) *RetryPolicy {
	return &RetryPolicy{MaximumAttempts: attempts, InitialInterval: initial, BackoffCoefficient: 2, MaximumInterval: wire.DefaultMaximumInterval}
}

// Delay is the wait before the attempt that follows failed attempt n.
func (p RetryPolicy) Delay(n int) time.Duration { return p.wire().Delay(n) }

func (p RetryPolicy) wire() wire.RetryPolicy {
	return wire.RetryPolicy{
		MaximumAttempts: p.MaximumAttempts, InitialIntervalMS: p.InitialInterval.Milliseconds(),
		BackoffCoefficient: p.BackoffCoefficient, MaximumIntervalMS: p.MaximumInterval.Milliseconds(),
		NonRetryableErrorTypes: p.NonRetryableErrorTypes,
	}
}

// merge returns o with the non-zero fields of over applied.
func (o ActivityOptions) merge(over ActivityOptions) ActivityOptions {
	if over.StartToClose != 0 {
		o.StartToClose = over.StartToClose
	}
	if over.ScheduleToClose != 0 {
		o.ScheduleToClose = over.ScheduleToClose
	}
	if over.HeartbeatTimeout != 0 {
		o.HeartbeatTimeout = over.HeartbeatTimeout
	}
	if over.RetryPolicy != nil {
		o.RetryPolicy = over.RetryPolicy
	}
	if over.TaskQueue != "" {
		o.TaskQueue = over.TaskQueue
	}
	if over.Priority != 0 {
		o.Priority = over.Priority
	}
	return o
}

func (o ActivityOptions) wire() *wire.ActivityOptions {
	p := DefaultRetryPolicy()
	if o.RetryPolicy != nil {
		p = *o.RetryPolicy
	}
	return &wire.ActivityOptions{
		StartToCloseMS: o.StartToClose.Milliseconds(), ScheduleToCloseMS: o.ScheduleToClose.Milliseconds(),
		HeartbeatTimeoutMS: o.HeartbeatTimeout.Milliseconds(), Retry: p.wire(), TaskQueue: o.TaskQueue,
		Priority: o.Priority,
	}
}
