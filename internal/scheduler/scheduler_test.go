package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/wire"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func startCmd(name, key, workflowID string) wire.Command {
	id := dedup.NewID()
	if key != "" {
		id = dedup.StartCommandID(name, key)
	}
	return wire.Command{CommandID: id, Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: name, WorkflowID: workflowID, IdempotencyKey: key, TaskQueue: wire.DefaultTaskQueue,
		Input: json.RawMessage(`{"n":1}`),
	}}
}

// applyOnce runs one apply transaction as owner of lease l.
func applyOnce(t *testing.T, db *pgxpool.Pool, owner string, l store.Lease, cmds []seqCommand) *store.Writes {
	t.Helper()
	ctx := context.Background()
	var w *store.Writes
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		applied, err := store.LockShard(ctx, tx, owner, l)
		if err != nil {
			return err
		}
		env := applyEnv{shard: l.Shard, shards: 4, window: time.Hour, log: slog.New(slog.DiscardHandler), searchAttrs: testSearchAttrs}
		if w, err = apply(ctx, tx, env, applied, cmds); err != nil {
			return err
		}
		return store.Write(ctx, tx, w)
	})
	require.NoError(t, err)
	return w
}

// testSearchAttrs are the search attributes the tests' workflow "pay"
// declares.
var testSearchAttrs = searchattr.Schema{"pay": {"customer_id": wire.SearchKeyword, "amount": wire.SearchInt}}

// leasedDB is a fresh database with 4 shards, one of them leased by "a".
func leasedDB(t *testing.T) (*pgxpool.Pool, store.Lease) {
	t.Helper()
	db := pgtest.NewPool(t)
	require.NoError(t, store.EnsureShards(context.Background(), db, 4))
	leases, err := store.AcquireLeases(context.Background(), db, "a", time.Minute, 1)
	require.NoError(t, err)
	return db, leases[0]
}

func count(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func TestRedeliveredCommandsApplyOnce(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)

	cmds := []seqCommand{
		{seq: 3, cmd: startCmd("onboarding", "k1", "w1")},
		{seq: 5, cmd: startCmd("onboarding", "k1", "w2")}, // same key in one batch: a replay
		{seq: 9, cmd: startCmd("onboarding", "", "w3")},
	}
	w := applyOnce(t, db, "a", l, cmds)
	require.EqualValues(t, 9, w.AppliedSeq)
	require.Len(t, w.NewExecutions, 2)
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM executions`))
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM history_events WHERE type = 'WorkflowStarted'`))
	// 2 workflow tasks wait in the outbox; the 3 outcomes are stored, the
	// key's two under its one command id, the later message's kept.
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM outbox`))
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM command_outcomes`))
	var outcomes []wire.Outcome
	for _, o := range w.Outcomes {
		if o.CommandID == cmds[0].cmd.CommandID {
			var out wire.Outcome
			require.NoError(t, json.Unmarshal(o.Payload, &out))
			outcomes = append(outcomes, out)
		}
	}
	require.Len(t, outcomes, 2)
	require.True(t, outcomes[0].StartedFresh)
	require.True(t, outcomes[1].Deduplicated)
	require.Equal(t, outcomes[0].ExecutionID, outcomes[1].ExecutionID)
	stored, ok, err := store.GetOutcome(context.Background(), db, cmds[0].cmd.CommandID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, outcomes[1], stored)

	// The same messages delivered again apply nothing.
	w = applyOnce(t, db, "a", l, cmds)
	require.Empty(t, w.NewExecutions)
	require.Empty(t, w.Outbox)
	require.Empty(t, w.Outcomes)
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM executions`))
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM outbox`))

	// A later message with a claimed key is a replay, not a new execution.
	w = applyOnce(t, db, "a", l, []seqCommand{{seq: 12, cmd: startCmd("onboarding", "k1", "w9")}})
	require.Empty(t, w.NewExecutions)
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM executions`))
	require.Equal(t, 12, count(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = $1`, l.Shard))
}

func TestStaleOwnerIsFencedOut(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	require.NoError(t, store.EnsureShards(ctx, db, 1))
	a, err := store.AcquireLeases(ctx, db, "a", time.Minute, 16)
	require.NoError(t, err)
	require.Len(t, a, 1)
	// While a holds the lease, b gets nothing.
	b, err := store.AcquireLeases(ctx, db, "b", time.Minute, 16)
	require.NoError(t, err)
	require.Empty(t, b)
	// a stalls past its lease; b takes over with a new epoch.
	_, err = db.Exec(ctx, `UPDATE shard_leases SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	b, err = store.AcquireLeases(ctx, db, "b", time.Minute, 16)
	require.NoError(t, err)
	require.Len(t, b, 1)
	require.Equal(t, a[0].Epoch+1, b[0].Epoch)

	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		_, err := store.LockShard(ctx, tx, "a", a[0])
		return err
	})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	renewed, err := store.RenewLeases(ctx, db, "a", time.Minute)
	require.NoError(t, err)
	require.Empty(t, renewed, "the stale owner renews nothing")
}

func TestShardsMoveWhenASchedulerDies(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 8})
	require.NoError(t, err)

	newSched := func(owner string) *Scheduler {
		s, err := New(Config{DB: db, Topology: top, Owner: owner, LeaseTTL: 400 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		return s
	}
	a := newSched("a")
	b := newSched("b")
	owned := func(s *Scheduler) []int {
		o := s.OwnedShards()
		sort.Ints(o)
		return o
	}
	probe.Until(t, 10*time.Second, "the shards to be shared", func() bool {
		return len(owned(a)) == 4 && len(owned(b)) == 4
	})
	// a dies without releasing anything: b takes every shard once a's
	// leases expire.
	a.cancel()
	<-a.done
	probe.Until(t, 10*time.Second, "b to own every shard", func() bool { return len(owned(b)) == 8 })
	require.Equal(t, 8, count(t, db, `SELECT count(*) FROM shard_leases WHERE owner = 'b'`))
	require.Equal(t, 8, count(t, db, `SELECT count(*) FROM shard_leases WHERE epoch >= 1`))
}

// oneShard is a fresh database and NATS server with a one-shard topology.
func oneShard(t *testing.T) (*pgxpool.Pool, jetstream.JetStream, *broker.Topology) {
	t.Helper()
	db := pgtest.NewPool(t)
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	top, err := broker.Declare(natstest.Context(t), js, broker.Config{Shards: 1})
	require.NoError(t, err)
	return db, js, top
}

// startScheduler starts a scheduler, stopped at cleanup.
func startScheduler(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	s, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start(natstest.Context(t)))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// TestApplyLocksTheShardWithItsReads checks the fence apply takes itself,
// in the round trip of its first reads: it applies when the shard's
// applied sequence is the one its runner expects, and refuses when it
// moved or the lease is gone.
func TestApplyLocksTheShardWithItsReads(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	ctx := context.Background()
	run := func(owner string, lease store.Lease, expect int64, seq uint64) error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			env := applyEnv{shard: l.Shard, shards: 4, window: time.Hour, log: slog.New(slog.DiscardHandler), lock: &shardLock{owner: owner, lease: lease}}
			w, err := apply(ctx, tx, env, expect, []seqCommand{{seq: seq, cmd: startCmd("onboarding", "", fmt.Sprintf("w%d", seq))}})
			if err != nil {
				return err
			}
			return store.Write(ctx, tx, w)
		})
	}
	require.NoError(t, run("a", l, 0, 4))
	require.ErrorIs(t, run("a", l, 0, 5), errAppliedMoved, "the shard applied 4 since")
	require.NoError(t, run("a", l, 4, 5))
	stale := l
	stale.Epoch--
	require.ErrorIs(t, run("a", stale, 5, 6), store.ErrLeaseLost)
	require.ErrorIs(t, run("b", l, 5, 6), store.ErrLeaseLost)
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM executions`))
	require.Equal(t, 5, count(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = $1`, l.Shard))
}
