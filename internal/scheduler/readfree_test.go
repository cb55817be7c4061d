package scheduler

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// readFree applies cmds as a runner does without reads: over known, in
// no transaction, then writes the result with its preconditions in one.
func readFree(t *testing.T, db *pgxpool.Pool, owner string, l store.Lease, applied int64, known execCache, cmds []seqCommand) (*store.Writes, error) {
	t.Helper()
	ctx := context.Background()
	env := applyEnv{shard: l.Shard, shards: 4, window: time.Hour, log: slog.New(slog.DiscardHandler),
		lock: &shardLock{owner: owner, lease: l}, known: known}
	w, err := apply(ctx, noReads{}, env, applied, cmds)
	if err != nil {
		return nil, err
	}
	return w, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return store.Write(ctx, tx, w) })
}

func outcomeOf(t *testing.T, w *store.Writes, commandID string) wire.Outcome {
	t.Helper()
	for _, o := range w.Outcomes {
		if o.CommandID == commandID {
			var out wire.Outcome
			require.NoError(t, json.Unmarshal(o.Payload, &out))
			return out
		}
	}
	t.Fatalf("no outcome for command %s", commandID)
	return wire.Outcome{}
}

// TestReadFreeApplyRunsAWorkflowAsReadsWould runs W1's two commands (a
// keyed start, then its workflow task's result with an eager activity)
// without reads, and checks the rows against the same commands applied
// with reads.
func TestReadFreeApplyRunsAWorkflowAsReadsWould(t *testing.T) {
	t.Parallel()
	type rows struct {
		history []string
		status  string
		claims  int
		acts    int
	}
	run := func(free bool) (rows, wire.Outcome) {
		db, l := leasedDB(t)
		known := execCache{}
		step := func(applied int64, cmds []seqCommand) *store.Writes {
			if !free {
				return applyOnce(t, db, "a", l, cmds)
			}
			w, err := readFree(t, db, "a", l, applied, known, cmds)
			require.NoError(t, err)
			known.remember(w)
			return w
		}
		// The runner's first batch of a session reads: it learns the
		// applied sequence from it.
		step(0, []seqCommand{{seq: 1, cmd: startCmd("pay", "", "w0")}})
		start := startCmd("pay", "k1", placement.MintWorkflowID(4, l.Shard, "pay"))
		start.Start.WorkflowIDMinted = true
		w := step(1, []seqCommand{{seq: 2, cmd: start}})
		out := outcomeOf(t, w, start.CommandID)
		require.Len(t, w.NewExecutions, 1)
		exec := w.NewExecutions[0].ExecutionID
		tasks := tasksIn(t, w)
		require.Len(t, tasks.workflow, 1)
		step(2, []seqCommand{{seq: 3, cmd: eagerResult(tasks.workflow[0], nil)}})

		var r rows
		r.history = historyTypes(t, db, exec)
		require.NoError(t, db.QueryRow(t.Context(), `SELECT status FROM executions WHERE execution_id = $1`, exec).Scan(&r.status))
		r.claims = count(t, db, `SELECT count(*) FROM start_claims WHERE execution_id = $1`, exec)
		r.acts = count(t, db, `SELECT count(*) FROM activities WHERE execution_id = $1 AND status = 'Completed'`, exec)
		require.Equal(t, 3, count(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = $1`, l.Shard))
		return r, out
	}
	withReads, outR := run(false)
	without, outF := run(true)
	require.Equal(t, withReads, without)
	require.Equal(t, wire.StatusCompleted, without.status)
	require.True(t, outF.StartedFresh)
	require.Equal(t, outR.StartedFresh, outF.StartedFresh)
	require.Equal(t, outR.Deduplicated, outF.Deduplicated)
}

// TestReadFreeApplyChecksWhatItAssumed: a key claimed before, a workflow
// id in use, or a fence that moved makes the read-free batch's writes
// fail with the precondition, and write nothing.
func TestReadFreeApplyChecksWhatItAssumed(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	first := startCmd("pay", "k1", "w1")
	applyOnce(t, db, "a", l, []seqCommand{{seq: 1, cmd: first}})
	before := func() (int, int, int) {
		return count(t, db, `SELECT count(*) FROM executions`), count(t, db, `SELECT count(*) FROM start_claims`),
			count(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = $1`, l.Shard)
	}
	e0, c0, a0 := before()

	// A retry of k1 under another workflow id: its claim is held.
	_, err := readFree(t, db, "a", l, 1, execCache{}, []seqCommand{{seq: 2, cmd: startCmd("pay", "k1", "w2")}})
	require.ErrorIs(t, err, store.ErrClaimHeld)
	e, c, a := before()
	require.Equal(t, [3]int{e0, c0, a0}, [3]int{e, c, a})
	// Applied with reads, it is the replay it is.
	w := applyOnce(t, db, "a", l, []seqCommand{{seq: 2, cmd: startCmd("pay", "k1", "w2")}})
	require.True(t, outcomeOf(t, w, first.CommandID).Deduplicated)

	// A new key on a workflow id that has an execution.
	_, err = readFree(t, db, "a", l, 2, execCache{}, []seqCommand{{seq: 3, cmd: startCmd("pay", "k2", "w1")}})
	require.ErrorIs(t, err, store.ErrWorkflowIDTaken)
	require.Zero(t, count(t, db, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'k2'`))

	// The applied sequence is not the one the batch started from.
	_, err = readFree(t, db, "a", l, 1, execCache{}, []seqCommand{{seq: 3, cmd: startCmd("pay", "k3", "w3")}})
	require.ErrorIs(t, err, store.ErrFenced)
	// Another scheduler took the shard over.
	_, err = db.Exec(t.Context(), `UPDATE shard_leases SET epoch = epoch + 1 WHERE shard = $1`, l.Shard)
	require.NoError(t, err)
	_, err = readFree(t, db, "a", l, 2, execCache{}, []seqCommand{{seq: 3, cmd: startCmd("pay", "k3", "w3")}})
	require.ErrorIs(t, err, store.ErrFenced)
	require.Zero(t, count(t, db, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'k3'`))
	require.Equal(t, 2, count(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = $1`, l.Shard))
}

// TestReadFreeApplyAsksForReads: batches whose rows it does not have, or
// whose checks it cannot defer, are refused before anything is sent.
func TestReadFreeApplyAsksForReads(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	w := applyOnce(t, db, "a", l, []seqCommand{{seq: 1, cmd: startCmd("pay", "", "w1")}})
	exec := w.NewExecutions[0].ExecutionID
	task := tasksIn(t, w).workflow[0]
	known := execCache{}
	for name, cmds := range map[string][]seqCommand{
		"an execution it does not know": {{seq: 2, cmd: eagerResult(task, nil)}},
		"a key used twice in the batch": {{seq: 2, cmd: startCmd("pay", "k", "a")}, {seq: 3, cmd: startCmd("pay", "k", "b")}},
		"a signal-with-start": {{seq: 2, cmd: wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignalWithStart,
			Start:  &wire.StartCommand{WorkflowName: "pay", WorkflowID: "w1", TaskQueue: wire.DefaultTaskQueue},
			Signal: &wire.SignalCommand{SignalName: "go"}}}},
		"a keyed signal": {{seq: 2, cmd: wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignal,
			Signal: &wire.SignalCommand{ExecutionID: exec, SignalName: "go", IdempotencyKey: "s1"}}}},
	} {
		_, err := readFree(t, db, "a", l, 1, known, cmds)
		require.ErrorIs(t, err, errNeedsReads, name)
	}
	// A known execution whose next workflow task needs its history read:
	// its first task completed without decisions, then a signal came.
	w = applyOnce(t, db, "a", l, []seqCommand{{seq: 2, cmd: wire.Command{CommandID: dedup.NewID(), Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: exec, TaskID: task.TaskID, BaseSeq: task.History[len(task.History)-1].Seq}}}})
	require.Len(t, w.UpdatedExecutions, 1)
	known.remember(w)
	_, err := readFree(t, db, "a", l, 2, known, []seqCommand{{seq: 3, cmd: wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignal,
		Signal: &wire.SignalCommand{ExecutionID: exec, SignalName: "go"}}}})
	require.ErrorIs(t, err, errNeedsReads)
	require.Equal(t, 2, count(t, db, `SELECT applied_seq FROM shard_offsets WHERE shard = $1`, l.Shard), "nothing written")
	// The runner then applies it with reads.
	w = applyOnce(t, db, "a", l, []seqCommand{{seq: 3, cmd: wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSignal,
		Signal: &wire.SignalCommand{ExecutionID: exec, SignalName: "go"}}}})
	require.Len(t, tasksIn(t, w).workflow, 1)
}
