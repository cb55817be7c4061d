package scheduler

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/wire"
)

func TestThrottleSlotsKeepTheLimitAndTheOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const limit, period = 2, 10 * time.Second
	var st []time.Time
	slot := func(now time.Time) time.Time {
		at := throttleSlot(st, now, limit, period)
		st = throttleRecord(st, at, now, limit, period)
		return at
	}
	require.Equal(t, t0, slot(t0))
	require.Equal(t, t0, slot(t0))
	require.Equal(t, t0.Add(period), slot(t0.Add(time.Second)), "the third within a period waits for the first's to end")
	require.Equal(t, t0.Add(period), slot(t0.Add(2*time.Second)))
	require.Equal(t, t0.Add(2*period), slot(t0.Add(3*time.Second)))
	// Long after: at once again, and what no longer counts is dropped.
	later := t0.Add(time.Hour)
	require.Equal(t, later, slot(later))
	require.Len(t, st, 1)
	// Never before the last start scheduled, even with room.
	require.Equal(t, t0.Add(5*time.Second), throttleSlot([]time.Time{t0.Add(5 * time.Second)}, t0, 3, period))
}

func policyStartCmd(id string, p wire.StartPolicy, input string) wire.Command {
	return wire.Command{CommandID: id, Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: "digest", WorkflowID: dedup.NewID(), WorkflowIDMinted: true, TaskQueue: wire.DefaultTaskQueue,
		Input: json.RawMessage(input), Policy: &p,
	}}
}

// releaseAt runs one release transaction as owner of lease l, at now.
func releaseAt(t *testing.T, db *pgxpool.Pool, l store.Lease, now time.Time) *store.Writes {
	t.Helper()
	ctx := context.Background()
	var w *store.Writes
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		applied, err := store.LockShard(ctx, tx, "a", l)
		if err != nil {
			return err
		}
		env := applyEnv{shard: l.Shard, shards: 4, window: time.Hour, log: slog.New(slog.DiscardHandler)}
		if w, _, err = releaseDue(ctx, tx, env, applied, now, 100); err != nil || w == nil {
			return err
		}
		return store.Write(ctx, tx, w)
	})
	require.NoError(t, err)
	return w
}

func storedOutcome(t *testing.T, db *pgxpool.Pool, commandID string) wire.Outcome {
	t.Helper()
	out, ok, err := store.GetOutcome(context.Background(), db, commandID)
	require.NoError(t, err)
	require.True(t, ok, "no outcome for %s", commandID)
	return out
}

// TestAPolicyStartComingAgainIsAppliedOnce: a start under a policy whose
// command id was applied before (an event delivered again after the
// broker's window) changes nothing, whether it began at once or waits.
func TestAPolicyStartComingAgainIsAppliedOnce(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	debounce := wire.StartPolicy{Kind: wire.PolicyDebounce, Key: "k", Period: time.Hour}
	throttle := wire.StartPolicy{Kind: wire.PolicyThrottle, Key: "k", Limit: 1, Period: time.Hour}
	applyOnce(t, db, "a", l, []seqCommand{
		{seq: 1, cmd: policyStartCmd("cmd-d", debounce, `{"n": 1}`)},
		{seq: 2, cmd: policyStartCmd("cmd-t", throttle, `{"n": 2}`)},
		{seq: 3, cmd: policyStartCmd("cmd-d", debounce, `{"n": 1}`)}, // in the same batch
	})
	require.True(t, storedOutcome(t, db, "cmd-d").Deferred)
	require.NotEmpty(t, storedOutcome(t, db, "cmd-t").ExecutionID, "within its limit: begun at once")
	w := applyOnce(t, db, "a", l, []seqCommand{
		{seq: 4, cmd: policyStartCmd("cmd-d", debounce, `{"n": 1}`)},
		{seq: 5, cmd: policyStartCmd("cmd-t", throttle, `{"n": 2}`)},
	})
	require.Empty(t, w.Outcomes)
	require.Empty(t, w.NewExecutions)
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM deferred_start_members`))
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, count(t, db, `SELECT size FROM deferred_starts`))
}

// TestAThrottledStartThatSlippedWaitsForItsWindow: starts whose scheduled
// time passed while their shard was not applied (a scheduler down) begin
// one by one as the throttle allows, in the order they came, not all at
// once.
func TestAThrottledStartThatSlippedWaitsForItsWindow(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	const period = time.Hour
	throttle := wire.StartPolicy{Kind: wire.PolicyThrottle, Key: "k", Limit: 1, Period: period}
	applyOnce(t, db, "a", l, []seqCommand{
		{seq: 1, cmd: policyStartCmd("a", throttle, `{"n": 1}`)},
		{seq: 2, cmd: policyStartCmd("b", throttle, `{"n": 2}`)},
		{seq: 3, cmd: policyStartCmd("c", throttle, `{"n": 3}`)},
	})
	var begun time.Time
	require.NoError(t, db.QueryRow(context.Background(), `SELECT created_at FROM executions`).Scan(&begun))
	require.True(t, storedOutcome(t, db, "b").Deferred)
	require.True(t, storedOutcome(t, db, "c").Deferred)
	// Nothing is due yet.
	require.Nil(t, releaseAt(t, db, l, begun.Add(time.Minute)))

	// b's turn comes at begun+period, c's at begun+2 periods; a release
	// two periods late (the shard was not applied) begins b only, and
	// puts c off for a period from then.
	late := begun.Add(2*period + time.Minute)
	w := releaseAt(t, db, l, late)
	require.Len(t, w.NewExecutions, 1)
	require.JSONEq(t, `{"n": 2}`, string(w.NewExecutions[0].Input))
	require.Equal(t, w.NewExecutions[0].ExecutionID, storedOutcome(t, db, "b").ExecutionID)
	require.True(t, storedOutcome(t, db, "c").Deferred)
	var due time.Time
	require.NoError(t, db.QueryRow(context.Background(), `SELECT due_at FROM deferred_starts`).Scan(&due))
	require.WithinDuration(t, late.Add(period), due, time.Millisecond)
	require.Nil(t, releaseAt(t, db, l, late.Add(period-time.Second)))
	w = releaseAt(t, db, l, late.Add(period))
	require.Len(t, w.NewExecutions, 1)
	require.JSONEq(t, `{"n": 3}`, string(w.NewExecutions[0].Input))
	require.Zero(t, count(t, db, `SELECT count(*) FROM deferred_starts`))
	require.Zero(t, count(t, db, `SELECT queued FROM start_policy_keys`))
}

// TestABatchBeginsWhenFullOrDue: members join the key's open group in
// order; a full group closes and begins at once, the next start opens
// another, which begins at max_wait.
func TestABatchBeginsWhenFullOrDue(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	batch := wire.StartPolicy{Kind: wire.PolicyBatch, Key: "k", MaxSize: 2, MaxWait: time.Hour}
	applyOnce(t, db, "a", l, []seqCommand{
		{seq: 1, cmd: policyStartCmd("b1", batch, `{"n": 1}`)},
		{seq: 2, cmd: policyStartCmd("b2", batch, `"two"`)},
		{seq: 3, cmd: policyStartCmd("b3", batch, `{"n": 3}`)},
	})
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM deferred_starts`))
	now := time.Now()
	w := releaseAt(t, db, l, now)
	require.Len(t, w.NewExecutions, 1, "the full batch begins; the open one waits")
	require.JSONEq(t, `[{"n": 1}, "two"]`, string(w.NewExecutions[0].Input))
	require.Equal(t, storedOutcome(t, db, "b1").ExecutionID, storedOutcome(t, db, "b2").ExecutionID)
	require.True(t, storedOutcome(t, db, "b3").Deferred)
	w = releaseAt(t, db, l, now.Add(time.Hour+time.Second))
	require.Len(t, w.NewExecutions, 1)
	require.JSONEq(t, `[{"n": 3}]`, string(w.NewExecutions[0].Input))
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM history_events WHERE type = 'WorkflowStarted'`))
	require.Zero(t, count(t, db, `SELECT count(*) FROM deferred_start_members`))
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM start_policy_keys WHERE open_group IS NULL`))
}

// TestAGroupThatCannotBeginIsSetAside: a due group of deferred starts
// whose release fails for a reason retrying will not fix is set aside
// (its starts answered command_rejected) and the shard goes on: the other
// groups begin.
func TestAGroupThatCannotBeginIsSetAside(t *testing.T) {
	t.Parallel()
	db, _, top := oneShard(t)
	ctx := context.Background()
	require.NoError(t, store.EnsureShards(ctx, db, 1))
	// Two due groups, written as a scheduler would, one of a kind no
	// scheduler writes.
	insert := func(kind, commandID string) {
		_, err := db.Exec(ctx, `WITH g AS (
				INSERT INTO deferred_starts (group_id, shard, workflow_name, kind, policy_key, due_at, first_seq, policy, task_queue, input, size, created_at)
				VALUES (gen_random_uuid(), 0, 'digest', $1, 'k', now() - interval '1 second', 1, '{}', 'default', '{"n": 1}', 1, now())
				RETURNING group_id)
			INSERT INTO deferred_start_members (group_id, position, command_id, stream_seq) SELECT group_id, 0, $2, 1 FROM g`, kind, commandID)
		require.NoError(t, err)
	}
	insert("bogus", "cmd-bogus")
	insert(wire.PolicyDebounce, "cmd-good")
	startScheduler(t, Config{DB: db, Topology: top, LeaseTTL: time.Second})
	probe.Until(t, 30*time.Second, "both groups to be handled", func() bool {
		return count(t, db, `SELECT count(*) FROM deferred_starts`) == 0
	})
	good := storedOutcome(t, db, "cmd-good")
	require.NotEmpty(t, good.ExecutionID)
	require.False(t, good.Deferred)
	bad := storedOutcome(t, db, "cmd-bogus")
	require.Equal(t, "command_rejected", bad.Error)
	require.Equal(t, 422, bad.HTTPStatus)
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM executions`))
	require.Zero(t, count(t, db, `SELECT count(*) FROM deferred_start_members`))
}

// TestABatchClosesBeforeItOutgrowsATask: a batch whose inputs would
// outgrow what a task carries begins with those it has, and the next
// start opens the key's next batch.
func TestABatchClosesBeforeItOutgrowsATask(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	batch := wire.StartPolicy{Kind: wire.PolicyBatch, Key: "k", MaxSize: 100, MaxWait: time.Hour}
	big := `{"pad": "` + strings.Repeat("x", 300<<10) + `"}`
	applyOnce(t, db, "a", l, []seqCommand{
		{seq: 1, cmd: policyStartCmd("b1", batch, big)},
		{seq: 2, cmd: policyStartCmd("b2", batch, big)},
		{seq: 3, cmd: policyStartCmd("b3", batch, big)},
	})
	// 768 KiB a batch, without a task size known: two of 300 KiB fit.
	require.Equal(t, []int{2, 1}, sizes(t, db))
	w := releaseAt(t, db, l, time.Now())
	require.Len(t, w.NewExecutions, 1)
	require.Equal(t, storedOutcome(t, db, "b1").ExecutionID, storedOutcome(t, db, "b2").ExecutionID)
	require.True(t, storedOutcome(t, db, "b3").Deferred)
}

func sizes(t *testing.T, db *pgxpool.Pool) []int {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT size FROM deferred_starts ORDER BY first_seq`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return out
}

// TestAStartAfterTheWindowOpensTheNextGroup: a group whose period (or
// max_wait) has passed takes no more starts, even before it is released.
func TestAStartAfterTheWindowOpensTheNextGroup(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	for i, p := range []wire.StartPolicy{
		{Kind: wire.PolicyDebounce, Key: "d", Period: time.Millisecond},
		{Kind: wire.PolicyBatch, Key: "b", MaxSize: 10, MaxWait: time.Millisecond},
	} {
		seq := uint64(2*i + 1)
		applyOnce(t, db, "a", l, []seqCommand{{seq: seq, cmd: policyStartCmd(p.Kind+"-1", p, `{"n": 1}`)}})
		probe.Until(t, 5*time.Second, "the window to pass", func() bool {
			return count(t, db, `SELECT count(*) FROM deferred_starts WHERE kind = $1 AND due_at < now()`, p.Kind) == 1
		})
		applyOnce(t, db, "a", l, []seqCommand{{seq: seq + 1, cmd: policyStartCmd(p.Kind+"-2", p, `{"n": 2}`)}})
		require.Equal(t, 2, count(t, db, `SELECT count(*) FROM deferred_starts WHERE kind = $1`, p.Kind), p.Kind)
		require.Equal(t, 1, count(t, db, `SELECT max(size) FROM deferred_starts WHERE kind = $1`, p.Kind), p.Kind)
	}
}
