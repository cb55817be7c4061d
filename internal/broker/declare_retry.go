package broker

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"
)

// DeclareAttemptTimeout bounds one attempt of DeclareRetrying.
const DeclareAttemptTimeout = 15 * time.Second

// UnplaceableSettle is how long DeclareRetrying keeps asking a cluster
// that refuses the replicas while every one of its servers is online and
// there are fewer of them than the replicas: long enough for the servers
// of a cluster still forming to join it.
const UnplaceableSettle = 10 * time.Second

// DeclareRetrying declares the topology as Declare does, asking again
// until ctx ends: JetStream may leave a request unanswered while a cluster
// forms or elects a leader, and a cluster may not be able to place the
// replicas until its servers have joined or come back. Each attempt is
// bounded by DeclareAttemptTimeout; waiting is reported to waiting, if not
// nil. What retrying cannot mend fails at once: a shard count other than
// the deployment's, replicas on a server that is not clustered, max bytes
// the server cannot reserve (ErrInsufficientStorage), and, once
// it has lasted UnplaceableSettle, more replicas than a cluster with none
// of its servers offline has servers.
func DeclareRetrying(ctx context.Context, js jetstream.JetStream, cfg Config, waiting func(error)) (*Topology, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var tooFewSince time.Time // when the cluster first had too few servers
	return backoff.Retry(ctx, func() (*Topology, error) {
		actx, cancel := context.WithTimeout(ctx, DeclareAttemptTimeout)
		defer cancel()
		top, err := Declare(actx, js, cfg)
		var unplaceable *ReplicasError
		tooFew := errors.As(err, &unplaceable) && unplaceable.tooFewServers()
		if !tooFew {
			tooFewSince = time.Time{}
		} else if tooFewSince.IsZero() {
			tooFewSince = time.Now()
		}
		switch {
		case errors.As(err, &unplaceable) && !unplaceable.Clustered, errors.Is(err, ErrShardMismatch), errors.Is(err, ErrInsufficientStorage):
			return nil, backoff.Permanent(err)
		case tooFew && time.Since(tooFewSince) >= UnplaceableSettle:
			return nil, backoff.Permanent(err)
		case err != nil && waiting != nil:
			waiting(err)
		}
		return top, err
	}, backoff.WithBackOff(backoff.NewExponentialBackOff()), backoff.WithMaxElapsedTime(0)) // until ctx ends
}
