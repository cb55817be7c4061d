package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// markFixture is a one-shard deployment whose scheduler reaches
// PostgreSQL through a proxy that can lose answers or cut it off; the
// test reads and breaks the database directly.
type markFixture struct {
	direct *pgxpool.Pool
	proxy  *pgtest.Proxy
	via    *pgxpool.Pool
	js     jetstream.JetStream
	top    *broker.Topology
}

func newMarkFixture(t *testing.T) *markFixture {
	t.Helper()
	ctx := natstest.Context(t)
	dsn := pgtest.NewDatabase(t)
	f := &markFixture{proxy: pgtest.NewProxy(t, dsn)}
	var err error
	f.direct, err = store.NewPool(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(f.direct.Close)
	f.via, err = store.NewPool(ctx, f.proxy.URL())
	require.NoError(t, err)
	t.Cleanup(f.via.Close)
	ns := natstest.RunServer(t, natstest.Options{})
	_, f.js = natstest.Connect(t, ns)
	f.top, err = broker.Declare(ctx, f.js, broker.Config{Shards: 1})
	require.NoError(t, err)
	return f
}

func (f *markFixture) exec(t *testing.T, sql string) {
	t.Helper()
	_, err := f.direct.Exec(context.Background(), sql)
	require.NoError(t, err)
}

// start publishes a keyed start to the shard and waits until it is
// applied.
func (f *markFixture) start(t *testing.T, key string) {
	t.Helper()
	f.publish(t, key)
	f.waitApplied(t, key)
}

func (f *markFixture) publish(t *testing.T, key string) {
	t.Helper()
	cmd := startCmd("onboarding", key, "wf-"+key)
	_, err := f.top.PublishCommand(natstest.Context(t), 0, &cmd)
	require.NoError(t, err)
}

func (f *markFixture) waitApplied(t *testing.T, key string) {
	t.Helper()
	probe.Until(t, 30*time.Second, "start "+key+" to be applied", func() bool {
		return count(t, f.direct, `SELECT count(*) FROM executions WHERE idempotency_key = $1`, key) == 1
	})
}

// marked says whether the shard has a failure mark at all, counting or
// not.
func (f *markFixture) marked(t *testing.T) bool {
	return count(t, f.direct, `SELECT count(*) FROM shard_offsets WHERE failing_since IS NOT NULL`) > 0
}

// counted returns the failing shards as ingest's readiness reads them.
func (f *markFixture) counted(t *testing.T) []store.ShardFailure {
	t.Helper()
	failing, err := store.FailingShards(context.Background(), f.direct, 0)
	require.NoError(t, err)
	return failing
}

// failSession ends the shard's running session with an error: its
// consumer is deleted under it.
func (f *markFixture) failSession(t *testing.T) {
	t.Helper()
	require.NoError(t, f.js.DeleteConsumer(natstest.Context(t), broker.CommandStream, consumerName(0)))
}

// isMarkWrite matches the statement that writes a shard's failure mark.
func isMarkWrite(sql string) bool {
	return strings.Contains(sql, "UPDATE shard_offsets") && strings.Contains(sql, "last_error = $")
}

// TestAMarkWhoseWriteWentUnansweredIsClearedByTheNextApply: a failure
// mark PostgreSQL committed but whose answer was lost (the scheduler
// cannot know it was written) is cleared by the shard's next apply.
func TestAMarkWhoseWriteWentUnansweredIsClearedByTheNextApply(t *testing.T) {
	t.Parallel()
	f := newMarkFixture(t)
	s := startScheduler(t, Config{DB: f.via, Topology: f.top, Metrics: prometheus.NewRegistry()})
	f.start(t, "before")

	f.exec(t, `ALTER TABLE history_events RENAME TO history_events_away`)
	f.proxy.LoseAnswers(isMarkWrite)
	f.publish(t, "while-broken")
	probe.Until(t, 30*time.Second, "a mark written whose answer was lost", func() bool {
		return len(f.proxy.Lost()) > 0 && f.marked(t)
	})
	f.exec(t, `ALTER TABLE history_events_away RENAME TO history_events`)
	f.waitApplied(t, "while-broken")
	f.proxy.LoseAnswers(nil)

	probe.Until(t, 5*time.Second, "the apply to clear the mark", func() bool { return !f.marked(t) })
	require.Empty(t, f.counted(t))
	probe.Until(t, 5*time.Second, "the gauge to say so", func() bool { return s.metrics.failing.Load() == 0 })
	require.Empty(t, s.Ready(context.Background()))
}

// TestAMarkWhoseWriteWentUnansweredStopsCountingWithoutTraffic: the same
// lost answer, for a failure no command causes (the shard's sessions
// fail as they start), then nothing to apply once it is over: the mark
// does not outlive the failure, although no apply comes to clear it.
func TestAMarkWhoseWriteWentUnansweredStopsCountingWithoutTraffic(t *testing.T) {
	t.Parallel()
	f := newMarkFixture(t)
	s := startScheduler(t, Config{DB: f.via, Topology: f.top, Metrics: prometheus.NewRegistry()})
	f.start(t, "before")

	f.exec(t, `ALTER TABLE outbox RENAME TO outbox_away`)
	f.proxy.LoseAnswers(isMarkWrite)
	f.failSession(t)
	probe.Until(t, 30*time.Second, "a mark written whose answer was lost", func() bool {
		return len(f.proxy.Lost()) > 0 && f.marked(t)
	})
	// A failing shard keeps refreshing its mark, and counts as failing.
	probe.Until(t, 10*time.Second, "the mark to count", func() bool { return len(f.counted(t)) == 1 })
	f.exec(t, `ALTER TABLE outbox_away RENAME TO outbox`)
	f.proxy.LoseAnswers(nil)

	probe.Until(t, healthyAfter+store.MarkStaleAfter+10*time.Second, "the mark to stop counting", func() bool {
		return len(f.counted(t)) == 0
	})
	probe.Until(t, healthyAfter+10*time.Second, "the gauge to say the shard applies", func() bool { return s.metrics.failing.Load() == 0 })
	require.Empty(t, s.Ready(context.Background()))
}

// TestAMarkOfALeaseThatMovedDoesNotCount: a scheduler whose shard is
// failing is cut off from PostgreSQL (as a killed or partitioned one
// is) and another takes the shard over: the first one's mark, which it
// can neither refresh nor clear, does not count, and goes when the new
// owner's session begins.
func TestAMarkOfALeaseThatMovedDoesNotCount(t *testing.T) {
	t.Parallel()
	f := newMarkFixture(t)
	startScheduler(t, Config{DB: f.via, Topology: f.top, Owner: "a", LeaseTTL: time.Second, Metrics: prometheus.NewRegistry()})
	f.start(t, "before")

	f.exec(t, `ALTER TABLE outbox RENAME TO outbox_away`)
	f.failSession(t)
	probe.Until(t, 30*time.Second, "a's mark to count", func() bool {
		failing := f.counted(t)
		return len(failing) == 1 && failing[0].Cause == store.FailingCause &&
			count(t, f.direct, `SELECT count(*) FROM shard_offsets WHERE failing_owner = 'a'`) == 1
	})
	f.proxy.Cut()
	f.exec(t, `ALTER TABLE outbox_away RENAME TO outbox`)
	// While no scheduler holds the shard, a's mark no longer counts once
	// its lease has expired.
	probe.Until(t, 10*time.Second, "a's lease to expire", func() bool {
		return count(t, f.direct, `SELECT count(*) FROM shard_leases WHERE expires_at <= now()`) == 1
	})
	failing := f.counted(t)
	require.Len(t, failing, 1)
	require.Equal(t, store.UnownedCause, failing[0].Cause, "a mark of an expired lease does not count: the shard is unowned")

	startScheduler(t, Config{DB: f.direct, Topology: f.top, Owner: "b", LeaseTTL: time.Second, Metrics: prometheus.NewRegistry()})
	probe.Until(t, 10*time.Second, "b to hold the shard", func() bool {
		return count(t, f.direct, `SELECT count(*) FROM shard_leases WHERE owner = 'b' AND expires_at > now()`) == 1
	})
	require.Empty(t, f.counted(t), "a mark of another lease does not count")
	probe.Until(t, 10*time.Second, "b's session to clear a's mark", func() bool { return !f.marked(t) })
	f.start(t, "after")
	require.Empty(t, f.counted(t))
}
