package workerrt

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/wire"
)

// runAttempt runs one activity attempt and says how it ended, or returns
// nil when the attempt is not run: past its deadline, or of a cancelled
// execution. log is tagged with the attempt (logattr), and the command its
// result goes in. eager says the attempt runs eagerly, within the
// workflow task that scheduled it.
func (rt *Runtime) runAttempt(ctx context.Context, log *slog.Logger, task *wire.ActivityTask, eager bool) *wire.ActivityResult {
	if !task.Deadline.IsZero() && time.Now().After(task.Deadline) {
		log.Info("dropping activity task past its deadline: the scheduler has moved on")
		return nil
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	release, live := rt.cancels.track(task.ExecutionID, task.ActivityID, eager, cancel)
	defer release()
	if !live {
		if !eager && rt.cancels.givenUp(task.ExecutionID, task.ActivityID) {
			// The scheduler waits for the attempt's end to close the
			// activity it gave up: told at once, it does not wait for the
			// attempt's timeout.
			log.Info("not running an attempt of an activity its workflow gave up")
			return &wire.ActivityResult{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt,
				Failure: &wire.Failure{Type: "Cancelled", Message: "the workflow gave the activity up before this attempt ran"}}
		}
		log.Info("dropping activity task of a stopped execution, or an eager attempt of one asked to cancel")
		return nil
	}
	rt.metrics.running.Inc()
	defer rt.metrics.running.Dec()
	name := rt.activityLabel(task.ActivityName)
	if task.Attempt > 1 {
		rt.metrics.retries.WithLabelValues(name).Inc()
	}
	if !task.Deadline.IsZero() {
		var c context.CancelFunc
		actx, c = context.WithDeadline(actx, task.Deadline)
		defer c()
	}
	beat, stopBeats := rt.heartbeater(actx, task)
	defer stopBeats()
	var silent atomic.Bool
	if hb := time.Duration(task.HeartbeatTimeoutMS) * time.Millisecond; hb > 0 {
		// The scheduler fails an attempt that stops heartbeating; this
		// watchdog cancels its context at the same point, so the work
		// stops too.
		var wcancel context.CancelFunc
		actx, wcancel = context.WithCancel(actx)
		defer wcancel()
		watchdog := time.AfterFunc(hb, func() { silent.Store(true); wcancel() })
		defer watchdog.Stop()
		send := beat
		beat = func(details json.RawMessage) {
			watchdog.Reset(hb)
			send(details)
		}
	}
	began := time.Now()
	res, err := rt.h.Activity(actx, &Attempt{Task: task, Heartbeat: beat, Ledger: rt.top.Ledger, Log: log,
		LedgerUsed: func(result string) { rt.metrics.ledger.WithLabelValues(name, result).Inc() }})
	rt.metrics.attemptSeconds.WithLabelValues(name).Observe(time.Since(began).Seconds())
	stopBeats() // no heartbeat after the result
	result := &wire.ActivityResult{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt}
	switch {
	case ctx.Err() != nil:
		// The worker is stopping and out of grace: hand the attempt back
		// as a retryable failure, so the next one starts at once rather
		// than after the timeout.
		log.Info("worker stopping; activity handed back")
		result.Failure = &wire.Failure{Type: "WorkerShutdown", Message: "the worker stopped before the attempt finished"}
	case err != nil && !task.Deadline.IsZero() && !time.Now().Before(task.Deadline):
		// Out of time: the same as the scheduler's start-to-close timeout,
		// whichever reports first.
		result.Failure = &wire.Failure{Type: "StartToCloseTimeout", Message: fmt.Sprintf("attempt %d ran past its deadline: %v", task.Attempt, err)}
	case err != nil && silent.Load():
		result.Failure = &wire.Failure{Type: "HeartbeatTimeout", Message: fmt.Sprintf("no heartbeat within %s: %v", time.Duration(task.HeartbeatTimeoutMS)*time.Millisecond, err)}
	default:
		if err != nil {
			log.Warn("activity failed", "err", err)
		}
		result = AttemptResult(task, res, err, rt.h.Failure)
	}
	result.StartedAt, result.EndedAt = began.UTC(), time.Now().UTC()
	o := attemptOutcome(result)
	rt.metrics.attempts.WithLabelValues(name, o).Inc()
	if log.Enabled(ctx, slog.LevelDebug) {
		args := []any{"outcome", o}
		if result.Failure != nil {
			args = append(args, "failure", result.Failure.Type)
		}
		log.DebugContext(ctx, "activity attempt ended", args...)
	}
	if result.Failure != nil && rt.top.Tracing.Enabled() {
		trace.SpanFromContext(ctx).SetStatus(codes.Error, result.Failure.Type)
	}
	return result
}

// AttemptResult is the result an attempt of task that returned res and
// err reports: err's wire form (failure), or res encoded as JSON.
func AttemptResult(task *wire.ActivityTask, res any, err error, failure func(error) *wire.Failure) *wire.ActivityResult {
	result := &wire.ActivityResult{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt}
	if err != nil {
		result.Failure = failure(err)
		return result
	}
	if result.Result, err = json.Marshal(res); err != nil {
		result.Result = nil
		result.Failure = &wire.Failure{Message: fmt.Sprintf("encode activity result: %v", err), Type: "encoding", NonRetryable: true}
	}
	return result
}

// LostAttempt is what a worker reports for task when it is delivered
// again after an earlier delivery may have run it: the attempt is lost,
// its outcome unknown.
func LostAttempt(task *wire.ActivityTask) *wire.ActivityResult {
	return &wire.ActivityResult{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt, Failure: &wire.Failure{
		Type:    "WorkerLost",
		Message: fmt.Sprintf("attempt %d's task was delivered again: the worker that had it vanished or stopped acknowledging it, and may have run it", task.Attempt),
	}}
}

// heartbeater returns the function an attempt's Heartbeat calls, and the
// stop that ends its sender. Heartbeat never blocks the activity: it
// leaves the newest details for a sender goroutine, which publishes a
// heartbeat command at most once per third of the heartbeat timeout (or
// per second when none is set), the newest details each time, so the last
// call before a quiet spell still reaches the scheduler.
func (rt *Runtime) heartbeater(ctx context.Context, task *wire.ActivityTask) (beat func(json.RawMessage), stop func()) {
	interval := time.Second
	if hb := time.Duration(task.HeartbeatTimeoutMS) * time.Millisecond; hb > 0 {
		interval = max(hb/3, 50*time.Millisecond)
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		details json.RawMessage
		fresh   bool
	)
	kick := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var last time.Time
		for seq := 1; ; seq++ {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
			if wait := time.Until(last.Add(interval)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			mu.Lock()
			d, ok := details, fresh
			fresh = false
			mu.Unlock()
			if !ok {
				continue
			}
			last = time.Now()
			cmd := &wire.Command{
				CommandID: dedup.HeartbeatCommandID(task.ExecutionID, task.ActivityID, task.Attempt, seq),
				Kind:      wire.KindActivityHeartbeat,
				Heartbeat: &wire.ActivityHeartbeat{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt, Details: d},
			}
			_, err := rt.top.PublishCommand(ctx, task.Shard, cmd)
			switch {
			case err == nil:
				rt.metrics.heartbeats.WithLabelValues(rt.activityLabel(task.ActivityName), "sent").Inc()
			case ctx.Err() == nil:
				rt.metrics.heartbeats.WithLabelValues(rt.activityLabel(task.ActivityName), "failed").Inc()
				logattr.With(rt.log, task.ExecutionID, task.WorkflowName, cmd.CommandID, logattr.ActivityAttempt(task.ActivityName, task.ActivityID, task.Attempt)...).
					Warn("publish heartbeat", "err", err)
			}
		}
	}()
	beat = func(d json.RawMessage) {
		mu.Lock()
		details, fresh = d, true
		mu.Unlock()
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	return beat, func() { cancel(); <-done }
}
