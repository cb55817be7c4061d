package streams

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"
)

// DeclareAttemptTimeout bounds one attempt of DeclareRetrying.
const DeclareAttemptTimeout = 15 * time.Second

// DeclareRetrying declares the topology as Declare does, asking again
// until ctx ends: JetStream may leave a request unanswered while a cluster
// forms or elects a leader, and a cluster may not be able to place the
// replicas until its servers have joined. Each attempt is bounded by
// DeclareAttemptTimeout; waiting is reported to waiting, if not nil. What
// retrying cannot mend fails at once: a shard count other than the
// deployment's, or replicas on a server that is not clustered.
func DeclareRetrying(ctx context.Context, js jetstream.JetStream, cfg Config, waiting func(error)) (*Topology, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return backoff.Retry(ctx, func() (*Topology, error) {
		actx, cancel := context.WithTimeout(ctx, DeclareAttemptTimeout)
		defer cancel()
		top, err := Declare(actx, js, cfg)
		var unplaceable *ReplicasError
		switch {
		case errors.As(err, &unplaceable) && !unplaceable.Clustered, errors.Is(err, ErrShardMismatch):
			return nil, backoff.Permanent(err)
		case err != nil && waiting != nil:
			waiting(err)
		}
		return top, err
	}, backoff.WithBackOff(backoff.NewExponentialBackOff()), backoff.WithMaxElapsedTime(0)) // until ctx ends
}
