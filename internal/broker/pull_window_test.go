package broker_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// TestPullWindowAsksOnlyForFreePlaces: PullWindow never has more messages
// delivered than its window has places, so none waits in the client
// unattended; a released place is asked for again.
func TestPullWindowAsksOnlyForFreePlaces(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	var (
		mu      sync.Mutex
		batches []int // of the pull requests sent
	)
	sub, err := nc.Subscribe("$JS.API.CONSUMER.MSG.NEXT.W.c", func(m *nats.Msg) {
		var req struct {
			Batch int `json:"batch"`
		}
		_ = json.Unmarshal(m.Data, &req)
		mu.Lock()
		batches = append(batches, req.Batch)
		mu.Unlock()
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	cons, err := js.CreateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	require.NoError(t, err)
	for i := range 5 {
		_, err := js.Publish(ctx, "w.x", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}

	got := make(chan jetstream.Msg, 5)
	win := broker.NewWindow(2)
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		broker.PullWindow(pctx, nc, cons, win, func(m jetstream.Msg) { got <- m },
			func(m jetstream.Msg) { t.Errorf("handed back %s: nothing was on its way", m.Data()) },
			func(err error) { t.Errorf("pull: %v", err) })
	})
	held := func() []jetstream.Msg {
		var out []jetstream.Msg
		for range 2 {
			select {
			case m := <-got:
				out = append(out, m)
			case <-time.After(10 * time.Second):
				t.Fatal("no message within 10s")
			}
		}
		return out
	}
	first := held()
	// The server's counts can lag the deliveries by a moment (seen as
	// NumPending 2 with NumAckPending 2 under load): read them until they
	// add up.
	var info *jetstream.ConsumerInfo
	require.Eventually(t, func() bool {
		var err error
		info, err = cons.Info(ctx)
		return err == nil && uint64(info.NumAckPending)+info.NumPending == 5
	}, 5*time.Second, 10*time.Millisecond, "the consumer's counts add up to the five messages")
	require.Equal(t, 2, info.NumAckPending, "two delivered, for two places")
	require.EqualValues(t, 3, info.NumPending, "the rest wait on the server")

	// Each place released is asked for again, and filled.
	for _, m := range first {
		require.NoError(t, m.Ack())
		win.Release()
	}
	second := held()
	require.Equal(t, "2", string(second[0].Data()))
	require.Equal(t, "3", string(second[1].Data()))
	mu.Lock()
	for _, b := range batches {
		require.LessOrEqual(t, b, 2)
	}
	mu.Unlock()
	stop()
	wg.Wait()
	require.Empty(t, got)
}

// TestPullWindowHandsBackWhatWasOnItsWay: when its context ends,
// PullWindow hands back the message the server had sent for its open
// request and the client had not read yet, instead of dropping it for the
// consumer's AckWait. What the server sends is held back by a proxy.
func TestPullWindowHandsBackWhatWasOnItsWay(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "H", Subjects: []string{"h.>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	cons, err := js.CreateConsumer(ctx, "H", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	require.NoError(t, err)

	const lag = time.Second
	slow, err := nats.Connect(delayingProxy(t, ns.Addr().String(), lag), nats.Timeout(4*lag))
	require.NoError(t, err)
	defer slow.Close()
	sjs, err := jetstream.New(slow, jetstream.WithDefaultTimeout(4*lag))
	require.NoError(t, err)
	scons, err := sjs.Consumer(ctx, "H", "c")
	require.NoError(t, err)

	handedBack := make(chan jetstream.Msg, 1)
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		broker.PullWindow(pctx, slow, scons, broker.NewWindow(1),
			func(m jetstream.Msg) { t.Errorf("handled %s after the context ended", m.Data()) },
			func(m jetstream.Msg) { handedBack <- m },
			func(err error) { t.Errorf("pull: %v", err) })
	})
	// Once a request waits on the server, the message goes out at once,
	// and the proxy holds it back.
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting > 0
	}, 10*time.Second, 5*time.Millisecond)
	_, err = js.Publish(ctx, "h.x", []byte("on its way"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 1
	}, lag/2, 5*time.Millisecond, "the server sent it")
	stop()
	wg.Wait()
	select {
	case m := <-handedBack:
		require.Equal(t, "on its way", string(m.Data()))
		require.NoError(t, m.Nak())
	default:
		t.Fatal("the message on its way was not handed back")
	}
	// Handed back (here with Nak), it is delivered again at once, not
	// after the consumer's minute of AckWait.
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	m, ok := <-batch.Messages()
	require.True(t, ok, "delivered again")
	md, err := m.Metadata()
	require.NoError(t, err)
	require.EqualValues(t, 2, md.NumDelivered)
	require.NoError(t, m.Ack())
}

// TestPooledWindowsLeaveEachOtherAPlace: the windows of one pool bound
// what their pullers hold together, and a busy consumer holding all it
// may never keeps a quiet one's messages from being delivered.
func TestPooledWindowsLeaveEachOtherAPlace(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}, Storage: jetstream.MemoryStorage,
		Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	const concurrency = 3
	pool := broker.NewPool(concurrency - 1)
	got := make(chan jetstream.Msg, 100)
	var (
		mu         sync.Mutex
		held, most int
	)
	wins := map[string]*broker.Window{}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, name := range []string{"busy", "quiet"} {
		cons, err := js.CreateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: name, FilterSubject: "p." + name,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
		require.NoError(t, err)
		win := pool.Window(concurrency)
		wins[name] = win
		wg.Go(func() {
			broker.PullWindow(pctx, nc, cons, win, func(m jetstream.Msg) {
				mu.Lock()
				held++
				most = max(most, held)
				mu.Unlock()
				got <- m
			}, func(jetstream.Msg) {}, func(err error) { t.Errorf("pull: %v", err) })
		})
	}
	for i := range 20 {
		_, err := js.Publish(ctx, "p.busy", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	// The busy consumer fills what it may, and releases nothing.
	for range concurrency {
		select {
		case m := <-got:
			require.Equal(t, "p.busy", m.Subject())
		case <-time.After(10 * time.Second):
			t.Fatal("the busy consumer got fewer messages than its concurrency")
		}
	}
	// The quiet consumer's messages are delivered one after the other,
	// each place released as a handler would.
	for i := range 3 {
		_, err := js.Publish(ctx, "p.quiet", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
		select {
		case m := <-got:
			require.Equal(t, "p.quiet", m.Subject(), "the busy consumer got more than its concurrency")
			require.NoError(t, m.Ack())
			mu.Lock()
			held--
			mu.Unlock()
			wins["quiet"].Release()
		case <-time.After(10 * time.Second):
			t.Fatal("the quiet consumer's message was not delivered while the busy one held all it may")
		}
	}
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, concurrency+1, most, "the windows held the concurrency, and the quiet one's own place")
}
