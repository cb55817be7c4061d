package wire

import (
	"math"
	"slices"
	"time"
)

// Retry policy defaults: exponential, 3 attempts from 1 s, coefficient 2,
// capped at 300 s.
const (
	DefaultMaximumAttempts    = 3
	DefaultInitialInterval    = time.Second
	DefaultBackoffCoefficient = 2.0
	DefaultMaximumInterval    = 300 * time.Second
	// DefaultStartToClose bounds one activity attempt when neither its
	// registration nor its call says otherwise; a lost attempt (its worker
	// vanished) is retried once it passes.
	DefaultStartToClose = 5 * time.Minute
)

// ActivityOptions are an activity invocation's resolved timeouts and retry
// policy, recorded in its ActivityScheduled event. Durations are in
// milliseconds; zero means none (or the default, for StartToClose).
type ActivityOptions struct {
	StartToCloseMS     int64       `json:"start_to_close_ms,omitempty"`
	ScheduleToCloseMS  int64       `json:"schedule_to_close_ms,omitempty"`
	HeartbeatTimeoutMS int64       `json:"heartbeat_timeout_ms,omitempty"`
	Retry              RetryPolicy `json:"retry"`
	// TaskQueue is the task queue the activity's attempts go to; empty
	// means its execution's.
	TaskQueue string `json:"task_queue,omitempty"`
	// Priority is the priority of the activity's tasks (MinPriority to
	// MaxPriority); 0 means its execution's.
	Priority int `json:"priority,omitempty"`
}

// StartToClose is the per-attempt timeout.
func (o ActivityOptions) StartToClose() time.Duration {
	if o.StartToCloseMS <= 0 {
		return DefaultStartToClose
	}
	return time.Duration(o.StartToCloseMS) * time.Millisecond
}

// ScheduleToClose is the timeout across attempts; zero means none.
func (o ActivityOptions) ScheduleToClose() time.Duration {
	return time.Duration(o.ScheduleToCloseMS) * time.Millisecond
}

// RetryPolicy says how a failed activity attempt is retried.
type RetryPolicy struct {
	// MaximumAttempts counts the first; 0 means unlimited.
	MaximumAttempts        int      `json:"maximum_attempts"`
	InitialIntervalMS      int64    `json:"initial_interval_ms"`
	BackoffCoefficient     float64  `json:"backoff_coefficient"`
	MaximumIntervalMS      int64    `json:"maximum_interval_ms"`
	NonRetryableErrorTypes []string `json:"non_retryable_error_types,omitempty"`
}

// DefaultRetryPolicy is exponential: 3 attempts from 1 s, coefficient 2,
// capped at 300 s.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		MaximumAttempts: DefaultMaximumAttempts, InitialIntervalMS: DefaultInitialInterval.Milliseconds(),
		BackoffCoefficient: DefaultBackoffCoefficient, MaximumIntervalMS: DefaultMaximumInterval.Milliseconds(),
	}
}

// Delay is the wait before the attempt that follows failed attempt n
// (n from 1): InitialInterval × BackoffCoefficient^(n−1), at most
// MaximumInterval.
func (p RetryPolicy) Delay(n int) time.Duration {
	initial := float64(p.InitialIntervalMS)
	if initial <= 0 {
		initial = float64(DefaultInitialInterval.Milliseconds())
	}
	coef := p.BackoffCoefficient
	if coef < 1 {
		coef = DefaultBackoffCoefficient
	}
	ms := initial * math.Pow(coef, float64(max(n, 1)-1))
	if p.MaximumIntervalMS > 0 {
		ms = math.Min(ms, float64(p.MaximumIntervalMS))
	}
	return time.Duration(ms) * time.Millisecond
}

// Retries reports whether a failure of type typ, marked nonRetryable or
// not, after attempt n, may be retried.
func (p RetryPolicy) Retries(n int, typ string, nonRetryable bool) bool {
	if nonRetryable || slices.Contains(p.NonRetryableErrorTypes, typ) {
		return false
	}
	return p.MaximumAttempts <= 0 || n < p.MaximumAttempts
}
