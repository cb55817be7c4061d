package harvest

import (
	"context"

	"github.com/harvest-engine/harvest/client"
)

// Send sends the signal with payload v to an execution through c. Every
// call appends one signal; use SendIdempotent for deliveries that may be
// retried. Errors are those of client.Client.SendSignal.
func (s Signal[T]) Send(ctx context.Context, c *client.Client, executionID string, v T) error {
	return c.SendSignal(ctx, executionID, s.Name, v)
}

// SendIdempotent sends the signal with payload v under an idempotency
// key: it lands once per execution and key. It reports whether this call
// delivered it (false for a retry of a delivered key).
func (s Signal[T]) SendIdempotent(ctx context.Context, c *client.Client, executionID string, v T, key string) (bool, error) {
	return c.SendSignalIdempotent(ctx, executionID, s.Name, v, key)
}
