package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestPoisonCommandsAreSetAsideAndTheShardGoesOn: commands PostgreSQL
// refuses to store (a NUL in a workflow_id, a \u0000 escape in an input)
// and a message that is no command, queued between ordinary starts in one
// batch, are set aside as dead with their reasons and answered with an
// error; every ordinary start is applied, before and after them, and the
// shard keeps applying what comes next.
func TestPoisonCommandsAreSetAsideAndTheShardGoesOn(t *testing.T) {
	t.Parallel()
	db, js, top := oneShard(t)
	ctx := natstest.Context(t)

	publish := func(cmd wire.Command) uint64 {
		ack, err := top.PublishCommand(ctx, 0, &cmd)
		require.NoError(t, err)
		return ack.Sequence
	}
	nulID := startCmd("onboarding", "k-nul-id", "wf\x00nul")
	nulInput := startCmd("onboarding", "k-nul-input", "wf-nul-input")
	nulInput.Start.Input = json.RawMessage(`{"name": "a\u0000b"}`)
	// Starts under a policy, sent past ingest: a key, and a batch
	// member's input, that PostgreSQL refuses, as it applies them.
	nulKey := policyStartCmd(dedup.NewID(), wire.StartPolicy{Kind: wire.PolicyDebounce, Key: "k\x00", Period: time.Hour}, `{"n": 1}`)
	nulMember := policyStartCmd(dedup.NewID(), wire.StartPolicy{Kind: wire.PolicyBatch, Key: "k", MaxSize: 2, MaxWait: time.Hour}, `{"name": "a\u0000b"}`)
	publish(nulKey)
	publish(nulMember)
	publish(startCmd("onboarding", "k1", "wf-1"))
	publish(nulID)
	publish(startCmd("onboarding", "k2", "wf-2"))
	publish(nulInput)
	_, err := js.Publish(ctx, broker.CommandSubject(0, wire.KindStart), []byte("not a command"), jetstream.WithMsgID("garbage"))
	require.NoError(t, err)
	last := publish(startCmd("onboarding", "k3", "wf-3"))

	s := startScheduler(t, Config{DB: db, Topology: top, Metrics: prometheus.NewRegistry()})

	probe.Until(t, 20*time.Second, "the shard to apply every command", func() bool {
		return count(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = 0`) == int(last)
	})
	require.Equal(t, 3, count(t, db, `SELECT count(*) FROM executions`))
	require.Equal(t, 3, count(t, db, `SELECT count(*) FROM executions WHERE workflow_id IN ('wf-1', 'wf-2', 'wf-3')`))

	dead, err := store.ListDeadCommands(ctx, db, store.DeadFilter{})
	require.NoError(t, err)
	require.Len(t, dead, 5)
	byID := map[string]store.DeadCommand{}
	for _, d := range dead {
		byID[d.CommandID] = d
	}
	for _, c := range []wire.Command{nulID, nulInput, nulKey, nulMember} {
		d, ok := byID[c.CommandID]
		require.True(t, ok, "dead letter of %s", c.CommandID)
		require.Equal(t, deadUnappliable, d.Error)
		require.Equal(t, wire.KindStart, d.Kind)
		require.Contains(t, d.Reason, "PostgreSQL refused it")
		full, err := store.GetDeadCommand(ctx, db, d.ID)
		require.NoError(t, err)
		var stored wire.Command
		require.NoError(t, json.Unmarshal(full.Payload, &stored), "the payload is the message as it came")
		require.Equal(t, c.Start.WorkflowID, stored.Start.WorkflowID)

		out, ok, err := store.GetOutcome(ctx, db, c.CommandID)
		require.NoError(t, err)
		require.True(t, ok, "the dead command's outcome is stored")
		require.Equal(t, "command_rejected", out.Error)
		require.Equal(t, 422, out.HTTPStatus)
		require.Contains(t, out.Message, "PostgreSQL refused it")
	}
	garbage := byID[""]
	require.Equal(t, deadMalformed, garbage.Error)
	require.Equal(t, "not a command", string(mustDead(t, db, garbage.ID).Payload))
	require.Equal(t, 4.0, testutil.ToFloat64(s.metrics.deadCommands.WithLabelValues(deadUnappliable)))
	require.Zero(t, count(t, db, `SELECT count(*) FROM deferred_starts`), "nothing of them is kept")
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.deadCommands.WithLabelValues(deadMalformed)))

	// The shard goes on.
	publish(startCmd("onboarding", "k4", "wf-4"))
	probe.Until(t, 20*time.Second, "a later start to apply", func() bool {
		return count(t, db, `SELECT count(*) FROM executions WHERE workflow_id = 'wf-4'`) == 1
	})
	require.Zero(t, count(t, db, `SELECT count(*) FROM shard_offsets WHERE failing_since IS NOT NULL`))
}

func mustDead(t *testing.T, db store.DBTX, id int64) *store.DeadCommand {
	t.Helper()
	d, err := store.GetDeadCommand(context.Background(), db, id)
	require.NoError(t, err)
	return d
}

// TestOnlyWhatTheCommandCarriesIsPoison: the errors that dead-letter a
// command are PostgreSQL refusing its data; a connection lost, an
// operator's shutdown, a timeout, a lost lease or a statement the schema
// lacks are retried.
func TestOnlyWhatTheCommandCarriesIsPoison(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"22021": true,  // invalid byte sequence (a NUL)
		"22P05": true,  // untranslatable character (\u0000 in jsonb)
		"22003": true,  // numeric value out of range
		"23505": true,  // unique violation
		"54001": true,  // statement too complex
		"57P01": false, // admin shutdown
		"57014": false, // query cancelled (statement timeout)
		"08006": false, // connection failure
		"40001": false, // serialization failure
		"53100": false, // disk full
		"42P01": false, // undefined table: a deploy gone wrong
		"HX001": false, // the shard fence
	} {
		err := error(&pgconn.PgError{Code: code, Message: "x"})
		require.Equal(t, want, poisonous(err), code)
		require.Equal(t, want, poisonous(errors.Join(errors.New("apply"), err)), code)
	}
	require.False(t, poisonous(&net.OpError{Op: "dial", Err: errors.New("connection refused")}))
	// What pgx cannot encode never reaches PostgreSQL, and never will.
	db := pgtest.NewPool(t)
	b := &pgx.Batch{}
	b.Queue(`SELECT $1::int`, int64(1)<<40)
	err := db.SendBatch(context.Background(), b).Close()
	require.Error(t, err)
	require.True(t, poisonous(err), "%v", err)
	require.False(t, poisonous(context.DeadlineExceeded))
	require.False(t, poisonous(store.ErrLeaseLost))
	require.False(t, poisonous(errDeliveryGap))
}

// TestATimerThatCannotFireIsDropped: a due timer whose firing PostgreSQL
// refuses (here the event it appends would overflow the history's
// sequence) is dropped and counted; the shard's other timers fire.
func TestATimerThatCannotFireIsDropped(t *testing.T) {
	t.Parallel()
	db, _, top := oneShard(t)
	ctx := natstest.Context(t)
	require.NoError(t, store.EnsureShards(ctx, db, 1))
	leases, err := store.AcquireLeases(ctx, db, "setup", time.Minute, 1)
	require.NoError(t, err)
	applyOnce(t, db, "setup", leases[0], []seqCommand{
		{seq: 1, cmd: startCmd("onboarding", "", "wf-good")}, {seq: 2, cmd: startCmd("onboarding", "", "wf-bad")}})
	require.NoError(t, store.Leave(ctx, db, "setup"))
	_, err = db.Exec(ctx, `UPDATE executions SET last_seq = 2147483647 WHERE workflow_id = 'wf-bad'`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO timers (shard, execution_id, kind, fire_at, attrs)
		SELECT 0, execution_id, 'workflow', now(), '{"timer_id": 1}' FROM executions`)
	require.NoError(t, err)

	s := startScheduler(t, Config{DB: db, Topology: top})
	probe.Until(t, 20*time.Second, "the good timer to fire", func() bool {
		return count(t, db, `SELECT count(*) FROM history_events h JOIN executions e USING (execution_id)
			WHERE e.workflow_id = 'wf-good' AND h.type = 'TimerFired'`) == 1
	})
	probe.Until(t, 20*time.Second, "the bad timer to be dropped", func() bool {
		return count(t, db, `SELECT count(*) FROM timers WHERE kind = 'workflow'`) == 0
	})
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.deadTimers))
}

// TestAnUnstorableDecisionIsSetAsideAndTheShardGoesOn: a workflow task
// result sent past the SDK whose side-effect marker PostgreSQL refuses
// (a \u0000 escape in its value) is set aside as dead, the execution is
// left as it was, and the shard goes on.
func TestAnUnstorableDecisionIsSetAsideAndTheShardGoesOn(t *testing.T) {
	t.Parallel()
	db, _, top := oneShard(t)
	ctx := natstest.Context(t)
	startScheduler(t, Config{DB: db, Topology: top, Metrics: prometheus.NewRegistry()})
	publish := func(cmd wire.Command) {
		_, err := top.PublishCommand(ctx, 0, &cmd)
		require.NoError(t, err)
	}
	publish(startCmd("onboarding", "k-marker", "wf-marker"))
	var exec string
	var taskID, lastSeq int
	probe.Until(t, 20*time.Second, "the start to apply", func() bool {
		return db.QueryRow(ctx, `SELECT execution_id::text, wft_id, last_seq FROM executions WHERE workflow_id = 'wf-marker'`).Scan(&exec, &taskID, &lastSeq) == nil
	})
	bad := wire.Command{CommandID: dedup.WorkflowTaskCommandID(exec, taskID), Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
		ExecutionID: exec, TaskID: taskID, BaseSeq: lastSeq, Time: time.Now(),
		Decisions: []wire.Decision{{Type: wire.DecisionRecordMarker, Marker: &wire.MarkerAttrs{Kind: wire.MarkerSideEffect, MarkerID: 1, Value: json.RawMessage(`"a\u0000b"`)}}},
	}}
	publish(bad)
	publish(startCmd("onboarding", "k-after", "wf-after"))
	probe.Until(t, 20*time.Second, "a later start to apply", func() bool {
		return count(t, db, `SELECT count(*) FROM executions WHERE workflow_id = 'wf-after'`) == 1
	})
	dead, err := store.ListDeadCommands(ctx, db, store.DeadFilter{})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, bad.CommandID, dead[0].CommandID)
	require.Equal(t, deadUnappliable, dead[0].Error)
	require.Equal(t, lastSeq, count(t, db, `SELECT last_seq FROM executions WHERE execution_id = $1`, exec), "the execution is as it was")
}
