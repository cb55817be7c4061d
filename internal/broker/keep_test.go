package broker_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestKeepHoldsAWorkQueueStreamsLastBlock: a task stream drained task by
// task gets a new block file at each drain, until Keep holds a keeper in
// it; then drains leave the block in place. No consumer of a task queue
// takes a keeper, and only the newest keeper stays.
func TestKeepHoldsAWorkQueueStreamsLastBlock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, js := natstest.Connect(t, natstest.RunServer(t, natstest.Options{StoreDir: dir}))
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1})
	require.NoError(t, err)
	tasks, err := js.Stream(ctx, broker.TaskStream)
	require.NoError(t, err)
	cons, err := js.CreateConsumer(ctx, broker.TaskStream, jetstream.ConsumerConfig{
		Durable: "q_all", FilterSubject: broker.TaskQueueFilter("q"), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	subject := broker.NameTaskSubject("q", wire.TaskWorkflow, "w")

	// lastBlock is the index of the stream's newest block file.
	lastBlock := func() int {
		files, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", broker.TaskStream, "msgs", "*.blk"))
		require.NoError(t, err)
		last := 0
		for _, f := range files {
			n, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".blk"))
			require.NoError(t, err)
			last = max(last, n)
		}
		return last
	}
	// held and lastSeq run inside Eventually and Never, whose last call
	// may outlive the test: they answer an error as a value no check
	// takes, never through require.
	held := func(subject string) uint64 {
		info, err := tasks.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			return ^uint64(0)
		}
		return info.State.Subjects[subject]
	}
	// drain publishes a task, takes it and acknowledges it, n times,
	// each time until the stream no longer holds it.
	drain := func(n int) {
		for range n {
			_, err := js.Publish(ctx, subject, []byte("task"))
			require.NoError(t, err)
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
			require.NoError(t, err)
			got := 0
			for m := range batch.Messages() {
				got++
				require.Equal(t, subject, m.Subject(), "a task queue's consumer takes only its tasks")
				require.NoError(t, m.DoubleAck(ctx))
			}
			require.NoError(t, batch.Error())
			require.Equal(t, 1, got)
			require.Eventually(t, func() bool { return held(subject) == 0 }, 5*time.Second, 5*time.Millisecond)
		}
	}

	drain(1)
	before := lastBlock()
	drain(5)
	require.GreaterOrEqual(t, lastBlock(), before+5, "each drain of the last block made a new one")

	// Two processes keep the streams, as two schedulers would.
	other, err := broker.Bind(ctx, js)
	require.NoError(t, err)
	keepCtx, stop := context.WithCancel(ctx)
	var kept sync.WaitGroup
	for _, top := range []*broker.Topology{top, other} {
		kept.Go(func() { top.Keep(keepCtx, 20*time.Millisecond, slog.New(slog.DiscardHandler)) })
	}
	defer func() { stop(); kept.Wait() }()
	require.Eventually(t, func() bool { return held(broker.TaskKeeperSubject) == 1 }, 5*time.Second, 5*time.Millisecond)
	first, err := tasks.GetLastMsgForSubject(ctx, broker.TaskKeeperSubject)
	require.NoError(t, err)
	// Drains while it keeps, past a few of its rounds.
	drain(1)
	before = lastBlock()
	drain(20)
	require.Equal(t, before, lastBlock(), "with a keeper in it, a drained block stays")
	require.Eventually(t, func() bool {
		last, err := tasks.GetLastMsgForSubject(ctx, broker.TaskKeeperSubject)
		return err == nil && last.Sequence > first.Sequence
	}, 5*time.Second, 5*time.Millisecond, "keepers go on being published")
	// Between a round's publish and its purge the stream holds two.
	require.Eventually(t, func() bool { return held(broker.TaskKeeperSubject) == 1 }, 5*time.Second, time.Millisecond,
		"only the newest keeper stays")
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumPending, "the queue's consumer sees no keeper")

	// Idle, the stream ends with a keeper, and no one writes another.
	lastSeq := func() (uint64, error) {
		info, err := tasks.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.LastSeq, nil
	}
	var idle uint64
	require.Eventually(t, func() bool {
		last, err := tasks.GetLastMsgForSubject(ctx, broker.TaskKeeperSubject)
		seq, serr := lastSeq()
		idle = seq
		return err == nil && serr == nil && last.Sequence == idle
	}, 5*time.Second, 5*time.Millisecond)
	require.Never(t, func() bool {
		seq, err := lastSeq()
		return err == nil && seq != idle
	}, 15*20*time.Millisecond, 10*time.Millisecond, "an idle stream is written to")

	commands, err := js.Stream(ctx, broker.CommandStream)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := commands.Info(ctx, jetstream.WithSubjectFilter(broker.CommandKeeperSubject))
		return err == nil && info.State.Subjects[broker.CommandKeeperSubject] == 1
	}, 5*time.Second, 5*time.Millisecond, "the command stream is kept too")
}

// TestKeepLeavesMemoryStreamsAlone: streams in memory have no blocks to
// keep, so Keep returns at once and publishes nothing.
func TestKeepLeavesMemoryStreamsAlone(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t, natstest.Options{}))
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	top.Keep(ctx, time.Millisecond, slog.New(slog.DiscardHandler)) // returns: nothing to keep
	for _, name := range []string{broker.CommandStream, broker.TaskStream} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.Zero(t, s.CachedInfo().State.Msgs, name)
	}
}
