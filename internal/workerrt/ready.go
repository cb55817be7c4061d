package workerrt

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/broker"
)

// Ready says why the runtime cannot take tasks now, one reason each, or
// nothing when it can: it must be started, its NATS connection connected,
// and each of its consumers in place on the task stream. A consumer its
// pull found deleted (or without responders: a cluster electing its
// leader) is looked up again here, and counts as in place once the
// server has it; the others are not asked about, so that a worker
// registering hundreds of names is asked for readiness as cheaply as one
// registering one.
//
// The reasons never quote NATS's error text; the worker's log has it.
func (rt *Runtime) Ready(ctx context.Context) []string {
	if st := rt.cfg.NATS.Status(); st != nats.CONNECTED {
		return []string{"NATS: connection " + strings.ToLower(st.String())}
	}
	lanes := rt.lanes()
	if lanes == nil {
		return []string{"worker: not started"}
	}
	var reasons []string
	for _, l := range lanes {
		tc := l.consumer
		if !tc.missing.Load() {
			continue
		}
		_, err := rt.js.Consumer(ctx, broker.TaskStream, tc.name)
		switch {
		case err == nil:
			tc.missing.Store(false)
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			reasons = append(reasons, fmt.Sprintf("consumer %s: not in place", tc.name))
		default:
			rt.log.Warn("readiness: task consumer lookup", "consumer", tc.name, "err", err)
			reasons = append(reasons, fmt.Sprintf("consumer %s: lookup failed (the error is in the worker's log)", tc.name))
		}
	}
	return reasons
}
