package workerrt

import (
	"context"
	"fmt"
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
func Ready(ctx context.Context, nc *nats.Conn, taskQueue string) []string {
	if st := nc.Status(); st != nats.CONNECTED {
		return []string{"NATS: connection " + strings.ToLower(st.String())}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return []string{fmt.Sprintf("JetStream: %v", err)}
	}
	var reasons []string
	for _, kind := range []string{wire.TaskWorkflow, wire.TaskActivity} {
		name := ConsumerName(taskQueue, kind)
		if _, err := js.Consumer(ctx, streams.TaskStream, name); err != nil {
			reasons = append(reasons, fmt.Sprintf("consumer %s: %v", name, err))
		}
	}
	return reasons
}
