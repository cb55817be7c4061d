package workerrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/streams"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Ready says why a worker of taskQueue, connected through nc, cannot take
// tasks now, one reason each, or nothing when it can: nc must be
// connected, and the task queue's consumers (which Start binds, and the
// runtime creates again when they vanish) in place on the task stream.
// Whether the worker is started is the caller's to know.
//
// The reasons never quote NATS's error text; log has it.
func Ready(ctx context.Context, log *slog.Logger, nc *nats.Conn, taskQueue string) []string {
	if st := nc.Status(); st != nats.CONNECTED {
		return []string{"NATS: connection " + strings.ToLower(st.String())}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Warn("readiness: JetStream context", "err", err)
		return []string{"JetStream: unavailable (the error is in the worker's log)"}
	}
	var reasons []string
	for _, kind := range []string{wire.TaskWorkflow, wire.TaskActivity} {
		name := ConsumerName(taskQueue, kind)
		_, err := js.Consumer(ctx, streams.TaskStream, name)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			reasons = append(reasons, fmt.Sprintf("consumer %s: not in place", name))
		case err != nil:
			log.Warn("readiness: task consumer lookup", "consumer", name, "err", err)
			reasons = append(reasons, fmt.Sprintf("consumer %s: lookup failed (the error is in the worker's log)", name))
		}
	}
	return reasons
}
