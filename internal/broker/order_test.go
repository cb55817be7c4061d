package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestPullOrderedTakesAHigherLanesBacklogFirst: two consumers, one a
// lane of priority 5 and one of priority 1, each with a backlog, pulled
// by one handler that takes a message at a time: every message of the
// higher lane comes first, each lane's in stream order, though the lower
// lane's puller runs all along; once the higher lane is empty, a message
// sent to it is still taken.
func TestPullOrderedTakesAHigherLanesBacklogFirst(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "O", Subjects: []string{"o.>"}, Storage: jetstream.MemoryStorage, Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	consumer := func(name, subject string) jetstream.Consumer {
		c, err := js.CreateConsumer(ctx, "O", jetstream.ConsumerConfig{Durable: name, FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
		require.NoError(t, err)
		return c
	}
	high, low := consumer("high", "o.high"), consumer("low", "o.low")
	for i := range 3 {
		for _, s := range []string{"o.low", "o.high"} {
			_, err := js.Publish(ctx, s, fmt.Appendf(nil, "%s-%d", s[2:], i))
			require.NoError(t, err)
		}
	}

	// A consumer learns of a stored message asynchronously, and a no_wait
	// request is answered 404 at once while its consumer counts nothing
	// pending, which would end the higher lane's backlog early: wait until
	// each counts its three.
	for _, c := range []jetstream.Consumer{high, low} {
		require.Eventually(t, func() bool {
			info, err := c.Info(ctx)
			return err == nil && info.NumPending == 3
		}, 10*time.Second, 5*time.Millisecond)
	}

	order := broker.NewOrder()
	// Made together, as a worker makes its lanes: neither puller can run
	// ahead of the other's first answer.
	lanes := map[jetstream.Consumer]*broker.OrderLane{high: order.Lane(5), low: order.Lane(1)}
	type held struct {
		m   jetstream.Msg
		win *broker.Window
	}
	got := make(chan held, 10)
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// The low lane's puller starts first.
	for _, c := range []jetstream.Consumer{low, high} {
		win := broker.NewWindow(1)
		wg.Go(func() {
			broker.PullOrdered(pctx, nc, c, win, lanes[c], func(m jetstream.Msg) { got <- held{m, win} },
				func(jetstream.Msg) {}, func(err error) { t.Errorf("pull: %v", err) })
		})
	}
	defer func() { stop(); wg.Wait() }()
	take := func() string {
		t.Helper()
		select {
		case h := <-got:
			require.NoError(t, h.m.Ack())
			h.win.Release()
			return string(h.m.Data())
		case <-time.After(30 * time.Second):
			t.Fatal("no message came")
			return ""
		}
	}
	var ran []string
	for range 6 {
		ran = append(ran, take())
	}
	require.Equal(t, []string{"high-0", "high-1", "high-2", "low-0", "low-1", "low-2"}, ran)

	_, err = js.Publish(ctx, "o.high", []byte("high-late"))
	require.NoError(t, err)
	require.Equal(t, "high-late", take())
}

// TestTaskPrioritiesHaveSubjectsOfTheirOwn: the default priority's
// subject is the name's, another one token more, which TaskPriority and
// TaskKind read back; any other subject is at the default.
func TestTaskPrioritiesHaveSubjectsOfTheirOwn(t *testing.T) {
	t.Parallel()
	require.Equal(t, "harvest.task.q.activity.charge", broker.PriorityTaskSubject("q", wire.TaskActivity, "charge", 3))
	require.Equal(t, "harvest.task.q.activity.charge", broker.PriorityTaskSubject("q", wire.TaskActivity, "charge", 0))
	for p := wire.MinPriority; p <= wire.MaxPriority; p++ {
		for _, kind := range []string{wire.TaskWorkflow, wire.TaskActivity} {
			s := broker.PriorityTaskSubject("q", kind, "charge", p)
			require.Equal(t, p, broker.TaskPriority(s), s)
			k, ok := broker.TaskKind(s)
			require.True(t, ok, s)
			require.Equal(t, kind, k, s)
		}
	}
	require.Equal(t, "harvest.task.q.workflow.charge.p5", broker.PriorityTaskSubject("q", wire.TaskWorkflow, "charge", 5))
	for _, s := range []string{broker.StickyTaskSubject("q", "p5", "w1"), broker.PinnedTaskSubject("q", "p5", "v1"),
		broker.TaskSubject("q", wire.TaskActivity), "harvest.task.q.activity.charge.p9", "harvest.task.q.activity.charge.p0"} {
		require.Equal(t, wire.DefaultPriority, broker.TaskPriority(s), s)
	}
	_, ok := broker.TaskKind("harvest.task.q.activity.charge.x")
	require.False(t, ok, "an activity subject one token longer that is no priority's")
}
