package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestACommandLostInFlightIsAppliedInOrder is the cause of acknowledged
// starts lost across a graceful restart of the NATS server: the server
// delivered a command to the scheduler, the connection broke before it
// arrived, and the consumer, whose state survived, redelivered it only
// after its AckWait — after later commands, whose sequences the shard had
// applied since. Skipped as "at or below the applied sequence" and
// acknowledged, it was never applied.
//
// The scheduler's connection goes through a proxy that loses what the
// server sends, then breaks: start B is delivered into the void, start C
// after the reconnection. Every command must be applied, B before C.
func TestACommandLostInFlightIsAppliedInOrder(t *testing.T) {
	t.Parallel()
	db, proxy, direct, top, pub := behindProxy(t)
	ctx := natstest.Context(t)

	s, err := New(Config{DB: db, Topology: top, AckWait: 8 * time.Second, LeaseTTL: time.Second})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	start := func(key string) uint64 {
		cmd := startCmd("onboarding", key, "wf-"+key)
		ack, err := pub.PublishCommand(ctx, 0, &cmd)
		require.NoError(t, err)
		return ack.Sequence
	}
	executions := func() int { return count(t, db, `SELECT count(*) FROM executions`) }
	start("a")
	probe.Until(t, 20*time.Second, "start a to apply", func() bool { return executions() == 1 })

	cons, err := direct.Consumer(ctx, broker.CommandStream, fmt.Sprintf("harvest_sched_%d", 0))
	require.NoError(t, err)
	proxy.Blackhole(true)
	seqB := start("b")
	probe.Until(t, 20*time.Second, "start b to be delivered", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Stream >= seqB
	})
	proxy.Cut()
	proxy.Blackhole(false)
	seqC := start("c")

	// Wait until the stream holds no command: every command applied, or
	// acknowledged without being applied. It may hold the scheduler's
	// keeper (broker.Topology.Keep).
	probe.Until(t, 30*time.Second, "the command stream to drain", func() bool {
		st, err := direct.Stream(ctx, broker.CommandStream)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(broker.CommandKeeperSubject))
		return err == nil && info.State.Msgs == info.State.Subjects[broker.CommandKeeperSubject]
	})
	require.Equal(t, 3, executions(), "every acknowledged start has its execution")
	var b, c time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT
		(SELECT created_at FROM executions WHERE workflow_id = 'wf-b'),
		(SELECT created_at FROM executions WHERE workflow_id = 'wf-c')`).Scan(&b, &c))
	require.False(t, c.Before(b), "b applied before c, in stream order")
	var applied int64
	require.NoError(t, db.QueryRow(ctx, `SELECT applied_seq FROM shard_offsets WHERE shard = 0`).Scan(&applied))
	require.EqualValues(t, seqC, applied, "the shard applied up to c")
}

// TestACommandLostInFlightBeforeAQuietSpellIsAppliedSoon: the last
// command delivered before the connection broke, with nothing after it to
// show the gap, is applied soon after the connection is back, not after
// the consumer's AckWait.
func TestACommandLostInFlightBeforeAQuietSpellIsAppliedSoon(t *testing.T) {
	t.Parallel()
	db, proxy, direct, top, pub := behindProxy(t)
	ctx := natstest.Context(t)
	startScheduler(t, Config{DB: db, Topology: top, AckWait: time.Hour})

	cmd := startCmd("onboarding", "quiet", "wf-quiet")
	// info is the shard's consumer's, once the scheduler's session has
	// (re)created it; nil while it has not.
	info := func() *jetstream.ConsumerInfo {
		c, err := direct.Consumer(ctx, broker.CommandStream, "harvest_sched_0")
		if err != nil {
			return nil
		}
		i, err := c.Info(ctx)
		if err != nil {
			return nil
		}
		return i
	}
	// The session is in place once its consumer has a pull request
	// waiting: blackholing earlier could catch it between deleting and
	// creating its consumer.
	probe.Until(t, 20*time.Second, "the shard's session to pull", func() bool {
		i := info()
		return i != nil && i.NumWaiting > 0
	})
	proxy.Blackhole(true)
	ack, err := pub.PublishCommand(ctx, 0, &cmd)
	require.NoError(t, err)
	probe.Until(t, 20*time.Second, "the start to be delivered", func() bool {
		i := info()
		return i != nil && i.Delivered.Stream >= ack.Sequence
	})
	proxy.Cut()
	proxy.Blackhole(false)
	probe.Until(t, 30*time.Second, "the start to apply (the consumer's AckWait is an hour)", func() bool {
		return count(t, db, `SELECT count(*) FROM executions WHERE workflow_id = 'wf-quiet'`) == 1
	})
}

// delivery is a message with only delivery metadata.
type delivery struct {
	jetstream.Msg
	consumer, stream uint64
}

func (d delivery) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Consumer: d.consumer, Stream: d.stream}, NumDelivered: 1}, nil
}

// TestInOrderStopsAtALostDelivery: the deliveries of a session's
// consumer must follow one another; what follows a gap, or a sequence
// going back, is left for a new session.
func TestInOrderStopsAtALostDelivery(t *testing.T) {
	t.Parallel()
	r := &runner{log: slog.New(slog.DiscardHandler)}
	n, err := r.inOrder([]jetstream.Msg{delivery{consumer: 1, stream: 4}, delivery{consumer: 2, stream: 9}})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = r.inOrder([]jetstream.Msg{delivery{consumer: 3, stream: 11}, delivery{consumer: 5, stream: 12}, delivery{consumer: 6, stream: 13}})
	require.ErrorIs(t, err, errDeliveryGap)
	require.Equal(t, 1, n, "applied up to the gap")
	r.delivered = 0
	_, err = r.inOrder([]jetstream.Msg{delivery{consumer: 1}, delivery{consumer: 1}})
	require.ErrorIs(t, err, errDeliveryGap, "a sequence that goes back")
}

// behindProxy is a one-shard topology whose scheduler side (top) reaches
// NATS through proxy, with a direct connection and topology (pub) for the
// test to publish and look with.
func behindProxy(t *testing.T) (db *pgxpool.Pool, proxy *natstest.Proxy, direct jetstream.JetStream, top, pub *broker.Topology) {
	t.Helper()
	db = pgtest.NewPool(t)
	ns := natstest.RunServer(t, natstest.Options{})
	_, direct = natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	proxy = natstest.NewProxy(t, ns.Addr().String())
	nc, err := nats.Connect(proxy.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	top, err = broker.Declare(ctx, js, broker.Config{Shards: 1})
	require.NoError(t, err)
	pub, err = broker.Declare(ctx, direct, broker.Config{Shards: 1})
	require.NoError(t, err)
	return db, proxy, direct, top, pub
}
