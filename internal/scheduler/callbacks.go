package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
)

// callbackLease is how long a delivery in flight is hidden from other
// replicas; it must outlast one delivery attempt.
const callbackLease = 2 * time.Minute

// callbackLoop delivers the completion callbacks of the shards this
// scheduler owns, at least once each, with backoff between attempts.
func (s *Scheduler) callbackLoop(ctx context.Context) {
	client := callback.NewClient(s.cfg.CallbackPolicy, callback.DefaultTimeout)
	defer client.CloseIdleConnections()
	every(ctx, s.cfg.CallbackPollInterval, func() {
		due, err := store.LeaseDueCallbacks(ctx, s.cfg.DB, s.OwnedShards(), callbackLease, 32)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("lease due callbacks", "err", err)
			}
			return
		}
		p := pool.New().WithMaxGoroutines(8)
		for _, d := range due {
			p.Go(func() { s.deliver(ctx, client, d) })
		}
		p.Wait()
	})
}

func (s *Scheduler) deliver(ctx context.Context, client *callback.Client, d store.CallbackDelivery) {
	// The payload is the callback's body (CallbackPayload), which names
	// the workflow.
	var p struct {
		WorkflowName string `json:"workflow_name"`
	}
	_ = json.Unmarshal(d.Payload, &p)
	log := logattr.With(s.log, d.ExecutionID, p.WorkflowName, "", "attempt", d.Attempts+1)
	err := client.Deliver(ctx, d.URL, d.ExecutionID, d.Payload)
	// Record the result even if we are stopping: the attempt happened.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err == nil {
		s.metrics.callbacks.WithLabelValues(callbackDelivered).Inc()
		if err := store.CallbackDelivered(rctx, s.cfg.DB, d.ExecutionID); err != nil {
			log.Warn("record callback delivery", "err", err)
		}
		return
	}
	var derr *callback.DeliveryError
	retryable := !errors.As(err, &derr) || derr.Retryable
	// last_error is read through the API by whoever chose the URL: it
	// gets the reason's category, the log the error itself (which may name
	// what the resolver answered, and Go's dial errors).
	reason := "delivery failed"
	if derr != nil {
		reason = derr.Reason()
	}
	attempt := d.Attempts + 1
	var next *time.Time
	if retryable && attempt < s.cfg.CallbackMaxAttempts {
		delay := s.cfg.CallbackRetryDelay(attempt + 1)
		if derr != nil && derr.RetryAfter > delay {
			delay = derr.RetryAfter
		}
		at := time.Now().Add(delay)
		next = &at
		log.Info("callback delivery failed; will retry", "reason", reason, "err", err, "retry_in", delay)
		s.metrics.callbacks.WithLabelValues(callbackRetrying).Inc()
	} else {
		log.Warn("callback delivery failed for good", "reason", reason, "err", err)
		s.metrics.callbacks.WithLabelValues(callbackFailed).Inc()
	}
	if err := store.CallbackFailed(rctx, s.cfg.DB, d.ExecutionID, reason, next); err != nil {
		log.Warn("record callback failure", "err", err)
	}
}
