package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestANewCommandStreamIsAppliedFromItsStart runs a stack against a
// database that outlived its JetStream store: a fresh NATS server numbers
// the commands from 1 again, below the sequence the shard had applied, and
// they must still apply rather than be skipped as redeliveries.
func TestANewCommandStreamIsAppliedFromItsStart(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	run := func() *devstack.Stack {
		s, err := devstack.Start(natstest.Context(t), devstack.Config{
			NATSURL: natstest.RunServer(t, natstest.Options{}).ClientURL(), DatabaseURL: dbURL,
			Addr: "127.0.0.1:0", StateDir: t.TempDir(), Ingest: ingest.Config{OutcomeWait: 30 * time.Second},
		})
		require.NoError(t, err)
		return s
	}
	stop := func(s *devstack.Stack) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	}

	first := run()
	for _, key := range []string{"old-1", "old-2", "old-3"} {
		require.Equal(t, 201, stacktest.StartWorkflow(t, first, "charge", key, `{`+stacktest.ChargeInput+`}`).Status)
	}
	probe.Until(t, 60*time.Second, "the first stream's charges to complete", func() bool {
		return stacktest.DBCount(t, first, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == 3
	})
	stop(first)

	second := run()
	t.Cleanup(func() { stop(second) })
	r := stacktest.StartWorkflow(t, second, "charge", "new-1", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, r.Status, r.Body)
	probe.Until(t, 60*time.Second, "the new stream's charge to complete", func() bool {
		return stacktest.DBCount(t, second, `SELECT count(*) FROM executions WHERE status = 'Completed'`) == 4
	})
	// A retry of a key the first stream applied is still a replay.
	r = stacktest.StartWorkflow(t, second, "charge", "old-1", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 200, r.Status, r.Body)
	require.Equal(t, 4, stacktest.DBCount(t, second, `SELECT count(*) FROM executions`))
}
