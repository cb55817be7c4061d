package broker_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// syncBuffer is a log sink safe for the connection's callback goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestClientOptionsLogWhatCanDelayWork(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	nc, err := nats.Connect(ns.ClientURL(), broker.ClientOptions("test-conn", log)...)
	require.NoError(t, err)
	defer nc.Close()

	// A subscription whose handler is stuck and whose pending limit is one
	// message drops the rest: the client reports a slow consumer.
	release := make(chan struct{})
	sub, err := nc.Subscribe("slow", func(*nats.Msg) { <-release })
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(1, -1))
	for range 5 {
		require.NoError(t, nc.Publish("slow", []byte("x")))
	}
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "nats: asynchronous error")
	}, 5*time.Second, 10*time.Millisecond, "logged: %s", logs.String())
	close(release)
	require.Contains(t, logs.String(), "nats_connection=test-conn")
	require.Contains(t, logs.String(), "subject=slow")

	// The server going away is a disconnection.
	ns.Shutdown()
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "nats: disconnected")
	}, 5*time.Second, 10*time.Millisecond, "logged: %s", logs.String())
}
