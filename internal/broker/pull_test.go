package broker_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// TestPullDeliversInOrderAcrossRequests: Pull hands over every message, in
// order, through requests that fill and requests that expire idle, and
// stops when its context ends; a consumer deleted under it is reported.
func TestPullDeliversInOrderAcrossRequests(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	var requests atomic.Int32 // pull requests sent for the consumer
	sub, err := nc.Subscribe("$JS.API.CONSUMER.MSG.NEXT.P.c", func(*nats.Msg) { requests.Add(1) })
	require.NoError(t, err)
	defer sub.Unsubscribe()
	ctx := natstest.Context(t)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	cons, err := js.CreateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			_, err := js.Publish(ctx, "p.x", []byte(strconv.Itoa(i)))
			require.NoError(t, err)
		}
	}

	var (
		mu   sync.Mutex
		got  []string
		errs []error
	)
	seen := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		broker.Pull(pctx, nc, cons, 4, func(m jetstream.Msg) {
			mu.Lock()
			got = append(got, string(m.Data()))
			mu.Unlock()
			require.NoError(t, m.Ack())
			// As a jetstream.Msg answers: the keeper of tasks in
			// progress tells this from a failure by it.
			require.ErrorIs(t, m.InProgress(), jetstream.ErrMsgAlreadyAckd)
		}, func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}()

	publish(0, 10) // more than one request's batch
	require.Eventually(t, func() bool { return seen() == 10 }, 10*time.Second, 5*time.Millisecond)
	// The request left open expires idle and is asked again; then more.
	open := requests.Load()
	require.Eventually(t, func() bool { return requests.Load() > open }, 3*broker.PullExpiry, 5*time.Millisecond)
	publish(10, 13)
	require.Eventually(t, func() bool { return seen() == 13 }, 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	want := make([]string, 13)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	require.Equal(t, want, got)
	require.Empty(t, errs)
	mu.Unlock()

	require.NoError(t, js.DeleteConsumer(ctx, "P", "c"))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(errs) > 0
	}, 10*time.Second, 5*time.Millisecond, "the deleted consumer is reported")
	stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Pull did not return when its context ended")
	}
}
