package stacktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// UserStreams is the side of the users' services: their own JetStream
// streams on the stack's NATS server, and their publishers, for the
// stack's bindings to read.
type UserStreams struct {
	t   testing.TB
	ctx context.Context
	js  jetstream.JetStream
}

// NewUserStreams connects to s's NATS server on a connection of its own,
// closed when t ends.
func NewUserStreams(t testing.TB, s *devstack.Stack) *UserStreams {
	t.Helper()
	nc, err := nats.Connect(s.NATSURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &UserStreams{t: t, ctx: ctx, js: js}
}

// JetStream is the users' JetStream, to do what the other methods do not.
func (u *UserStreams) JetStream() jetstream.JetStream { return u.js }

// Context is the context of u's calls, cancelled when the test ends (or
// after two minutes).
func (u *UserStreams) Context() context.Context { return u.ctx }

// Create creates a stream.
func (u *UserStreams) Create(cfg jetstream.StreamConfig) {
	u.t.Helper()
	_, err := u.js.CreateStream(u.ctx, cfg)
	require.NoError(u.t, err)
}

// Publish publishes body on subject, with the Nats-Msg-Id msgID unless it
// is empty.
func (u *UserStreams) Publish(subject, body, msgID string) *jetstream.PubAck {
	u.t.Helper()
	m := &nats.Msg{Subject: subject, Data: []byte(body), Header: nats.Header{}}
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ack, err := u.js.PublishMsg(u.ctx, m)
	require.NoError(u.t, err)
	return ack
}

// Settled waits until binding name's consumer of stream exists and has
// acknowledged (or terminated) every message up to seq.
func (u *UserStreams) Settled(stream, name string, seq uint64) {
	u.t.Helper()
	probe.Until(u.t, 60*time.Second, fmt.Sprintf("binding %s to acknowledge up to %d", name, seq), func() bool {
		c, err := u.js.Consumer(u.ctx, stream, binding.ConsumerPrefix+name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return false
		}
		require.NoError(u.t, err)
		info := c.CachedInfo()
		return info.AckFloor.Stream >= seq && info.NumAckPending == 0
	})
}

// BindingCount reads harvest_binding_messages_total{binding, result} from
// the stack's /metrics, failing t if it has no such series.
func BindingCount(t testing.TB, s *devstack.Stack, name, result string) int {
	t.Helper()
	return int(probe.Value(t, probe.Scrape(t, s.URL()+"/metrics"), "harvest_binding_messages_total", "binding", name, "result", result))
}
