package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/service"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// TestTheStreamsAreSizedByTheConfiguration: retention is the max age of
// the effect ledger and the task stream (the scheduler's default when
// unset), and the max bytes keys size the command and task streams.
func TestTheStreamsAreSizedByTheConfiguration(t *testing.T) {
	require.Equal(t, scheduler.DefaultRetention, service.StreamsConfig(config.Config{}).Retention)
	require.Equal(t, broker.DefaultRetention, scheduler.DefaultRetention, "the topology's default is the scheduler's")

	ns := natstest.RunServer(t, natstest.Options{})
	require.NoError(t, connect(t, ns.ClientURL(), config.Config{Retention: config.Duration(48 * time.Hour),
		NATSCommandStreamMaxBytes: 8 << 20, NATSTaskStreamMaxBytes: 16 << 20}))
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	for name, want := range map[string]struct {
		maxAge   time.Duration
		maxBytes int64
	}{
		broker.CommandStream:        {0, 8 << 20},
		broker.TaskStream:           {48 * time.Hour, 16 << 20},
		"KV_" + broker.LedgerBucket: {48 * time.Hour, -1},
	} {
		st, err := js.Stream(ctx, name)
		require.NoError(t, err)
		c := st.CachedInfo().Config
		require.Equal(t, want.maxAge, c.MaxAge, "max age of %s", name)
		require.Equal(t, want.maxBytes, c.MaxBytes, "max bytes of %s", name)
	}
}
