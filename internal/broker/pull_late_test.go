package broker_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// TestPullHandsOverALateMessage: a message that reaches the client after
// the request it answers was given up is handled at once, not left to
// the consumer's AckWait. The pulling connection goes through a proxy
// that delays what the server sends by longer than a request lasts, as a
// loaded machine can; nats.go's Fetch drops such a message.
func TestPullHandsOverALateMessage(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "L", Subjects: []string{"l.>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "L", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "l.x", []byte("late"))
	require.NoError(t, err)

	const lag = broker.PullExpiry * 2
	slow, err := nats.Connect(delayingProxy(t, ns.Addr().String(), lag), nats.Timeout(4*lag), nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer slow.Close()
	sjs, err := jetstream.New(slow, jetstream.WithDefaultTimeout(4*lag))
	require.NoError(t, err)
	cons, err := sjs.Consumer(ctx, "L", "c")
	require.NoError(t, err)

	got := make(chan jetstream.Msg, 1)
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		broker.Pull(pctx, slow, cons, 1, func(m jetstream.Msg) {
			select {
			case got <- m:
			default:
			}
		}, func(err error) { t.Errorf("pull: %v", err) })
	})
	select {
	case m := <-got:
		md, err := m.Metadata()
		require.NoError(t, err)
		require.Equal(t, uint64(1), md.NumDelivered, "handed over from its first delivery, not a redelivery")
		require.Equal(t, "late", string(m.Data()))
	case <-time.After(3 * lag):
		t.Fatal("the late message was not handled before the consumer's AckWait")
	}
	stop()
	wg.Wait()
}

// delayingProxy forwards TCP connections to addr, holding back each chunk
// the server sends for lag; what the client sends goes through at once.
// It returns the URL to connect to.
func delayingProxy(t *testing.T, addr string, lag time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", addr)
			if err != nil {
				client.Close()
				continue
			}
			closeBoth := func() { client.Close(); server.Close() }
			t.Cleanup(closeBoth)
			wg.Go(func() {
				_, _ = io.Copy(server, client)
				closeBoth()
			})
			type chunk struct {
				at   time.Time
				data []byte
			}
			chunks := make(chan chunk, 1024)
			wg.Go(func() {
				defer close(chunks)
				for {
					buf := make([]byte, 32<<10)
					n, err := server.Read(buf)
					if n > 0 {
						chunks <- chunk{time.Now().Add(lag), buf[:n]}
					}
					if err != nil {
						return
					}
				}
			})
			wg.Go(func() {
				for c := range chunks {
					time.Sleep(time.Until(c.at)) // the simulated latency
					if _, err := client.Write(c.data); err != nil && !errors.Is(err, net.ErrClosed) {
						closeBoth()
					}
				}
			})
		}
	})
	return "nats://" + l.Addr().String()
}
