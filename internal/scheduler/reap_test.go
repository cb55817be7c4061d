package scheduler

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
)

// silentFuture is an asynchronous publish whose acknowledgement never
// comes, as when its stream's leader went down with it.
type silentFuture struct{ ok chan *jetstream.PubAck }

func (f silentFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f silentFuture) Err() <-chan error            { return nil }
func (f silentFuture) Msg() *nats.Msg               { return nil }

// TestReapGivesUpOnAnAcknowledgementThatNeverComes: a session waiting for
// its published tasks fails after outboxAckTimeout, rather than waiting
// forever with its batch in hand, and keeps the row to publish again.
func TestReapGivesUpOnAnAcknowledgementThatNeverComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &runner{inflight: []pending{{f: silentFuture{ok: make(chan *jetstream.PubAck)}, row: &store.OutboxMsg{ID: 7, Subject: "harvest.task.default.workflow"}}}}
		require.NoError(t, r.reap(context.Background(), false), "not waiting: nothing to collect yet")
		require.Len(t, r.inflight, 1)
		err := r.reap(context.Background(), true)
		require.ErrorIs(t, err, errOutboxAckLate)
		require.ErrorContains(t, err, "outbox row 7")
		require.Len(t, r.inflight, 1, "the row stays in flight, to go again with the next session")
	})
}
