package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestSchedulerMetrics runs starts through a scheduler and reads its
// metrics: commands by kind, the batches' sizes and apply times, the
// transactions and their statements, leases taken, timers fired, and the
// backlog of its shards read at scrape time.
func TestSchedulerMetrics(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 2})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	s := startScheduler(t, Config{DB: db, Topology: top, Owner: "sched-a", Metrics: reg, WorkflowTaskTimeout: time.Hour})
	probe.Until(t, 20*time.Second, "both shards to be held", func() bool { return len(s.OwnedShards()) == 2 })

	// Three starts on shard 0: one now, one in an hour, one in a moment
	// (its start timer fires).
	later, soon := time.Now().Add(time.Hour), time.Now().Add(300*time.Millisecond)
	for i, at := range []*time.Time{nil, &later, &soon} {
		cmd := startCmd("onboarding", "", "w"+string(rune('a'+i)))
		cmd.Start.StartAt = at
		_, err := top.PublishCommand(ctx, 0, &cmd)
		require.NoError(t, err)
	}
	fams := probe.Snapshot(t, reg)
	probe.Until(t, 30*time.Second, "the start timer to fire", func() bool {
		fams = probe.Snapshot(t, reg)
		n, _ := probe.Read(t, fams, "harvest_scheduler_timers_fired_total", "kind", store.TimerStart)
		return n == 1
	})
	v := func(name string, labels ...string) float64 {
		t.Helper()
		return probe.Value(t, fams, name, labels...)
	}
	require.Equal(t, 3.0, v("harvest_scheduler_commands_total", "kind", wire.KindStart))
	require.Zero(t, v("harvest_scheduler_commands_total", "kind", wire.KindSignal), "every kind has its series from the start")
	require.Zero(t, v("harvest_scheduler_commands_total", "kind", "other"))
	// Every delivery handled was in a batch.
	batches := probe.Family(t, fams, "harvest_scheduler_apply_batch_commands").GetMetric()[0].GetHistogram()
	require.Equal(t, 3.0, batches.GetSampleSum())
	require.GreaterOrEqual(t, batches.GetSampleCount(), uint64(1))
	require.Equal(t, batches.GetSampleCount(), uint64(v("harvest_scheduler_apply_duration_seconds")))
	// Each batch is one committed transaction (and a read-free one may
	// have been tried first), of a few statements each.
	require.GreaterOrEqual(t, v("harvest_scheduler_transactions_total", "purpose", txApply, "result", "committed"), float64(batches.GetSampleCount()))
	require.GreaterOrEqual(t, v("harvest_scheduler_transactions_total", "purpose", txTimers, "result", "committed"), 1.0)
	for _, m := range probe.Family(t, fams, "harvest_scheduler_transaction_statements").GetMetric() {
		if h := m.GetHistogram(); h.GetSampleCount() > 0 {
			require.GreaterOrEqual(t, h.GetSampleSum(), float64(h.GetSampleCount()), "at least a statement per transaction")
		}
	}
	require.Equal(t, 2.0, v("harvest_scheduler_lease_acquisitions_total"))
	require.Zero(t, v("harvest_scheduler_lease_losses_total"))
	require.Equal(t, 2.0, v("harvest_scheduler_shards_owned"))
	require.Equal(t, 1.0, v("harvest_scheduler_info", "owner", "sched-a"))

	// The backlog: nothing left to apply on either shard, and shard 0 has
	// the workflow task deadlines of the two starts that ran and the start
	// timer of the one an hour away, none of them due.
	probe.Until(t, 30*time.Second, "the backlog to be read", func() bool {
		fams = probe.Snapshot(t, reg)
		p0, n0 := probe.Read(t, fams, "harvest_scheduler_pending_commands", "shard", "0")
		p1, n1 := probe.Read(t, fams, "harvest_scheduler_pending_commands", "shard", "1")
		tm, _ := probe.Read(t, fams, "harvest_scheduler_timers_pending", "shard", "0")
		return n0 > 0 && n1 > 0 && p0 == 0 && p1 == 0 && tm == 3
	})
	require.Zero(t, v("harvest_scheduler_timers_due", "shard", "0"))
	require.Zero(t, v("harvest_scheduler_timers_pending", "shard", "1"))

	// Another owner takes both leases over (as one would whose clock says
	// they expired): this scheduler loses them.
	_, err = db.Exec(ctx, `UPDATE shard_leases SET owner = 'sched-b', epoch = epoch + 1, expires_at = now() + interval '1 hour'`)
	require.NoError(t, err)
	probe.Until(t, 30*time.Second, "the leases to be lost", func() bool {
		return testutil.ToFloat64(s.metrics.leaseLost) == 2 && len(s.OwnedShards()) == 0
	})
	fams = probe.Snapshot(t, reg)
	ok := probe.Count(t, fams, "harvest_scheduler_pending_commands") > 0
	require.False(t, ok, "a scheduler reports the backlog of the shards it holds only")
}

// TestShardBacklogIsReadAtScrapeTime: the pending commands of a held
// shard are its consumer's undelivered and unacknowledged messages, and
// its timers those PostgreSQL holds, due or not; read once per
// shardStatsTTL however often the registry is gathered.
func TestShardBacklogIsReadAtScrapeTime(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 4})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	s, err := New(Config{DB: db, Topology: top, Metrics: reg})
	require.NoError(t, err)
	// Not started: shard 3 is made held by hand, with its consumer, so
	// nothing applies its commands.
	s.runners[3] = &runner{}
	cons, err := js.CreateConsumer(ctx, broker.CommandStream, jetstream.ConsumerConfig{
		Durable: consumerName(3), FilterSubject: broker.CommandFilter(3), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	for i := range 5 {
		cmd := startCmd("onboarding", "", "w"+string(rune('a'+i)))
		_, err := top.PublishCommand(ctx, 3, &cmd)
		require.NoError(t, err)
	}
	// The server counts a stored message for its consumer
	// asynchronously: counted waits until the consumer counts n pending,
	// delivered or not.
	counted := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			info, err := cons.Info(ctx)
			return err == nil && info.NumPending+uint64(info.NumAckPending) == uint64(n)
		}, 10*time.Second, 5*time.Millisecond)
	}
	counted(5)
	// Two delivered and not acknowledged: still pending.
	batch, err := cons.FetchNoWait(2)
	require.NoError(t, err)
	for range batch.Messages() {
	}
	for _, due := range []bool{true, true, false} {
		at := "now() + interval '1 hour'"
		if due {
			at = "now() - interval '1 minute'"
		}
		_, err := db.Exec(ctx, `INSERT INTO timers (shard, execution_id, kind, fire_at, attrs) VALUES (3, gen_random_uuid(), 'workflow', `+at+`, '{}')`)
		require.NoError(t, err)
	}
	_, err = db.Exec(ctx, `INSERT INTO timers (shard, execution_id, kind, fire_at, attrs) VALUES (2, gen_random_uuid(), 'workflow', now(), '{}')`)
	require.NoError(t, err)

	const want = `
# HELP harvest_scheduler_pending_commands Commands of a shard this scheduler holds that are not applied yet: the shard consumer's undelivered and unacknowledged messages (JetStream consumer info, read at scrape time). The shard's lag.
# TYPE harvest_scheduler_pending_commands gauge
harvest_scheduler_pending_commands{shard="3"} 5
# HELP harvest_scheduler_timers_due Durable timers of a shard this scheduler holds whose time has come and that have not fired yet (read at scrape time); one that keeps growing means timers fire late.
# TYPE harvest_scheduler_timers_due gauge
harvest_scheduler_timers_due{shard="3"} 2
# HELP harvest_scheduler_timers_pending Durable timers of a shard this scheduler holds, waiting to fire (read from PostgreSQL at scrape time).
# TYPE harvest_scheduler_timers_pending gauge
harvest_scheduler_timers_pending{shard="3"} 3
`
	now := time.Now()
	s.shardStats.now = func() time.Time { return now }
	names := []string{"harvest_scheduler_pending_commands", "harvest_scheduler_timers_due", "harvest_scheduler_timers_pending"}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), names...))

	// Within shardStatsTTL the answer is the one read before.
	cmd := startCmd("onboarding", "", "wz")
	_, err = top.PublishCommand(ctx, 3, &cmd)
	require.NoError(t, err)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), names...))
	counted(6)
	now = now.Add(shardStatsTTL + time.Millisecond)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(want, `{shard="3"} 5`, `{shard="3"} 6`, 1)), names...))
}
