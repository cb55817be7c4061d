package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// MarkAccepted records that a command was accepted and answered before its
// outcome was known. It never fails the caller's request: the mark only
// lets a poll answer "accepted" rather than "unknown" until the outcome is
// stored.
func (t *Topology) MarkAccepted(ctx context.Context, commandID string) error {
	if _, err := t.Accepted.Create(ctx, commandID, nil); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("mark command %s accepted: %w", commandID, err)
	}
	return nil
}

// WasAccepted says whether MarkAccepted recorded commandID (within the
// outcome TTL).
func (t *Topology) WasAccepted(ctx context.Context, commandID string) (bool, error) {
	_, err := t.Accepted.Get(ctx, commandID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read accepted mark of command %s: %w", commandID, err)
	}
	return true, nil
}
