package scheduler

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func reportCmd(d wire.DuplicateCommand) wire.Command {
	return wire.Command{CommandID: dedup.NewID(), Kind: wire.KindDuplicate, Duplicate: &d}
}

func signalCmd(executionID, key string) wire.Command {
	return wire.Command{CommandID: dedup.SignalCommandID(executionID, key), Kind: wire.KindSignal,
		Signal: &wire.SignalCommand{ExecutionID: executionID, SignalName: "item", IdempotencyKey: key}}
}

func swsCmd(workflowID, key string) wire.Command {
	return wire.Command{CommandID: dedup.SignalWithStartCommandID("collect", workflowID, key), Kind: wire.KindSignalWithStart, SignalWithStart: true,
		Start:  &wire.StartCommand{WorkflowName: "collect", WorkflowID: workflowID, TaskQueue: wire.DefaultTaskQueue},
		Signal: &wire.SignalCommand{SignalName: "item", IdempotencyKey: key}}
}

// startDups reads the duplicate counts of a start key's claim.
func startDups(t *testing.T, db *pgxpool.Pool, name, key string) store.Duplicates {
	t.Helper()
	var d store.Duplicates
	require.NoError(t, db.QueryRow(context.Background(), `SELECT replay_duplicates, broker_duplicates, claim_duplicates
		FROM start_claims WHERE workflow_name = $1 AND idempotency_key = $2`, name, key).Scan(&d.Replay, &d.Broker, &d.Claim))
	return d
}

func signalDups(t *testing.T, db *pgxpool.Pool, executionID, key string) store.Duplicates {
	t.Helper()
	var d store.Duplicates
	require.NoError(t, db.QueryRow(context.Background(), `SELECT broker_duplicates, claim_duplicates
		FROM signal_claims WHERE execution_id = $1 AND idempotency_key = $2`, executionID, key).Scan(&d.Broker, &d.Claim))
	return d
}

// TestDuplicatesAreCountedOnTheirKeys: the scheduler counts the claim
// layer as it applies a start or a keyed signal whose key was used
// before, and the reports of the other layers (ingest's, the bindings')
// that follow the duplicated command on its shard, in the batch's own
// write; a report whose key has no claim is dropped, and an expired claim
// taken over starts its counts again.
func TestDuplicatesAreCountedOnTheirKeys(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	startReport := func(layer, key string) wire.Command {
		return reportCmd(wire.DuplicateCommand{Layer: layer, WorkflowName: "onboarding", IdempotencyKey: key})
	}

	// In one batch: the start, the broker's duplicate of it reported, and
	// a replay the scheduler catches. The report finds the claim the
	// batch took.
	w := applyOnce(t, db, "a", l, []seqCommand{
		{seq: 1, cmd: startCmd("onboarding", "k1", "w1")},
		{seq: 2, cmd: startReport(wire.DuplicateBroker, "k1")},
		{seq: 3, cmd: startCmd("onboarding", "k1", "w1")},
	})
	require.Len(t, w.NewExecutions, 1)
	exec := w.NewExecutions[0].ExecutionID
	require.Len(t, w.Outcomes, 2, "a report has no outcome")
	require.Equal(t, store.Duplicates{Broker: 1, Claim: 1}, startDups(t, db, "onboarding", "k1"))

	// Later batches add to it; a report for a key nobody claimed (its
	// start was refused) changes nothing.
	applyOnce(t, db, "a", l, []seqCommand{
		{seq: 4, cmd: startCmd("onboarding", "k1", "w1")},
		{seq: 5, cmd: startReport(wire.DuplicateReplay, "k1")},
		{seq: 6, cmd: startReport(wire.DuplicateBroker, "k-unclaimed")},
	})
	require.Equal(t, store.Duplicates{Replay: 1, Broker: 1, Claim: 2}, startDups(t, db, "onboarding", "k1"))
	require.Zero(t, count(t, db, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'k-unclaimed'`))

	// A keyed signal delivered twice in one batch, then its broker
	// duplicate reported; an unkeyed one counts nothing.
	applyOnce(t, db, "a", l, []seqCommand{
		{seq: 7, cmd: signalCmd(exec, "s1")},
		{seq: 8, cmd: signalCmd(exec, "s1")},
		{seq: 9, cmd: reportCmd(wire.DuplicateCommand{Layer: wire.DuplicateBroker, ExecutionID: exec, SignalKey: "s1"})},
		{seq: 10, cmd: signalCmd(exec, "")},
	})
	require.Equal(t, store.Duplicates{Broker: 1, Claim: 1}, signalDups(t, db, exec, "s1"))
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'SignalReceived'`, exec), "s1 once, and the unkeyed one")

	// A signal-with-start's key, named by its workflow id: the report
	// counts against the execution the signal went to.
	w = applyOnce(t, db, "a", l, []seqCommand{
		{seq: 11, cmd: swsCmd("order-1", "sk")},
		{seq: 12, cmd: reportCmd(wire.DuplicateCommand{Layer: wire.DuplicateBroker, WorkflowName: "collect", WorkflowID: "order-1", SignalKey: "sk"})},
	})
	require.Len(t, w.NewExecutions, 1)
	order := w.NewExecutions[0].ExecutionID
	applyOnce(t, db, "a", l, []seqCommand{{seq: 13, cmd: swsCmd("order-1", "sk")}})
	require.Equal(t, store.Duplicates{Broker: 1, Claim: 1}, signalDups(t, db, order, "sk"))

	// The claim expires and a new start of the key takes it over: a new
	// execution, whose counts start from nothing.
	_, err := db.Exec(context.Background(), `UPDATE start_claims SET expires_at = now() - interval '1 second' WHERE idempotency_key = 'k1'`)
	require.NoError(t, err)
	applyOnce(t, db, "a", l, []seqCommand{{seq: 14, cmd: startReport(wire.DuplicateBroker, "k1")}})
	require.Equal(t, store.Duplicates{Replay: 1, Broker: 1, Claim: 2}, startDups(t, db, "onboarding", "k1"), "an expired claim counts nothing more")
	w = applyOnce(t, db, "a", l, []seqCommand{{seq: 15, cmd: startCmd("onboarding", "k1", "w2")}})
	require.Len(t, w.NewExecutions, 1)
	require.Equal(t, store.Duplicates{}, startDups(t, db, "onboarding", "k1"))
}

// TestDuplicateReportsApplyWithoutReads: a batch of reports (and starts)
// goes the read-free way, and its counts land.
func TestDuplicateReportsApplyWithoutReads(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	applyOnce(t, db, "a", l, []seqCommand{{seq: 1, cmd: startCmd("onboarding", "k1", "w1")}})
	w, err := readFree(t, db, "a", l, 1, execCache{}, []seqCommand{
		{seq: 2, cmd: reportCmd(wire.DuplicateCommand{Layer: wire.DuplicateBroker, WorkflowName: "onboarding", IdempotencyKey: "k1"})},
		{seq: 3, cmd: startCmd("onboarding", "k2", "w2")},
	})
	require.NoError(t, err)
	require.NotNil(t, w.Preconditions, "applied without reads")
	require.Equal(t, store.Duplicates{Broker: 1}, startDups(t, db, "onboarding", "k1"))
	require.Equal(t, store.Duplicates{}, startDups(t, db, "onboarding", "k2"))
}

func TestDuplicateReportsAreValidated(t *testing.T) {
	t.Parallel()
	exec := placement.MintExecutionID(4, 0)
	for _, tc := range []struct {
		d  *wire.DuplicateCommand
		ok bool
	}{
		{&wire.DuplicateCommand{Layer: "broker", WorkflowName: "w", IdempotencyKey: "k"}, true},
		{&wire.DuplicateCommand{Layer: "replay", WorkflowName: "w", IdempotencyKey: "k"}, true},
		{&wire.DuplicateCommand{Layer: "broker", ExecutionID: exec, SignalKey: "k"}, true},
		{&wire.DuplicateCommand{Layer: "broker", WorkflowName: "w", WorkflowID: "id", SignalKey: "k"}, true},
		{nil, false},
		{&wire.DuplicateCommand{Layer: "claim", WorkflowName: "w", IdempotencyKey: "k"}, false},
		{&wire.DuplicateCommand{Layer: "broker", IdempotencyKey: "k"}, false},
		{&wire.DuplicateCommand{Layer: "broker", ExecutionID: "not-a-uuid", SignalKey: "k"}, false},
		{&wire.DuplicateCommand{Layer: "broker", ExecutionID: exec}, false},
		{&wire.DuplicateCommand{Layer: "broker", WorkflowName: "w", WorkflowID: "id"}, false},
		{&wire.DuplicateCommand{Layer: "broker", WorkflowName: "w", IdempotencyKey: "k", SignalKey: "s"}, false},
	} {
		require.Equal(t, tc.ok, validCommand(&wire.Command{Kind: wire.KindDuplicate, Duplicate: tc.d}), "%+v", tc.d)
	}
}
