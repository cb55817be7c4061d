package scheduler

import (
	"cmp"
	"context"
	"time"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Concurrency start policies (docs/start-policies.md#concurrency). Every
// start of a (workflow, key) goes to one shard, whose start_policy_keys
// row counts the key's running executions and its Pending ones. A start
// creates its execution at once (its key claimed, as any keyed start's):
// Running when the key has a free slot and nothing waits ahead of it,
// else Pending, queued by its command's stream sequence. An execution's
// chain gives its slot back as it closes (a continue-as-new keeps it),
// counted without a read, and the shard's timer loop then begins the
// oldest Pending executions of the keys with free slots, a key at a time
// in turn (round-robin), so that one key's burst does not hold up
// another's. The counts change only in the shard's transactions, so a
// key never runs more than its limit.

// concurrencyKeysPerTx bounds the keys one release transaction looks
// at.
const concurrencyKeysPerTx = 64

// concurrencyStart applies a start under a concurrency policy to its
// key's state st.
func (b *batch) concurrencyStart(c seqCommand, ref store.PolicyRef, st *store.PolicyState) {
	p := c.cmd.Start.Policy
	st.Limit, st.StaleAt = p.Limit, b.now
	b.keyChanged(ref, st)
	admit := st.Queued == 0 && st.Running < p.Limit
	start := *c.cmd.Start
	start.Policy = nil
	c.cmd.Start = &start
	b.concurrency, b.concurrencyPending = &store.ConcurrencyRef{Key: p.Key, Limit: p.Limit}, !admit
	before := len(b.writes.NewExecutions)
	b.start(c)
	b.concurrency, b.concurrencyPending = nil, false
	if len(b.writes.NewExecutions) == before {
		return // its key found its execution, or it was refused
	}
	e := b.writes.NewExecutions[len(b.writes.NewExecutions)-1]
	if admit {
		st.Running++
		return
	}
	st.Queued++
	b.writes.Concurrency.Waiting = append(b.writes.Concurrency.Waiting, store.ConcurrencyWaiter{
		ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, Key: p.Key, Seq: int64(c.seq)})
	if st.Running < st.Limit {
		// A start that raised the limit: the slots it made are taken by
		// the oldest waiting, this one after them.
		b.writes.Concurrency.Release = true
	}
}

// concurrencyRef is the key of e's concurrency policy.
func concurrencyRef(e *store.Execution) store.PolicyRef {
	return store.PolicyRef{WorkflowName: cmp.Or(e.Concurrency.Workflow, e.WorkflowName), Kind: wire.PolicyConcurrency, Key: e.Concurrency.Key}
}

// concurrencyRetake takes a slot of the key of e, a closed run under a
// concurrency policy that a reset runs again, when one is free and no
// execution waits for one; false, taking nothing, when none is. The
// key's state was read for the reset (resetKeys), or the batch wrote it.
func (b *batch) concurrencyRetake(e *store.Execution) bool {
	ref := concurrencyRef(e)
	st := b.policyKeys[ref]
	if st == nil {
		if !b.resetKeysRead[ref] {
			// Never read: what the key holds is not known here, and a
			// write of a guess would overwrite it.
			return false
		}
		// Read, and no row: the key runs nothing and queues nothing.
		st = &store.PolicyState{Limit: e.Concurrency.Limit}
		b.policyKeys[ref] = st
	}
	// The counts as they stand after the batch's closes so far, which
	// adjust the row after it is written (store.ConcurrencyWrites).
	running, queued := st.Running, st.Queued
	for _, adj := range b.writes.Concurrency.Adjust {
		if adj.WorkflowName == ref.WorkflowName && adj.Key == ref.Key {
			running, queued = running+adj.Running, queued+adj.Queued
		}
	}
	limit := cmp.Or(st.Limit, e.Concurrency.Limit)
	if queued > 0 || running >= limit {
		return false
	}
	st.Limit, st.StaleAt = limit, b.now
	st.Running++
	b.keyChanged(ref, st)
	return true
}

// concurrencyClosed gives back the slot of e's chain, which closes, or
// its place in the queue if it was Pending.
func (b *batch) concurrencyClosed(e *store.Execution, pending bool) {
	ref := concurrencyRef(e)
	adj := store.ConcurrencyAdjust{WorkflowName: ref.WorkflowName, Key: ref.Key, Running: -1}
	if pending {
		adj.Running, adj.Queued = 0, -1
		b.writes.Concurrency.Begun = append(b.writes.Concurrency.Begun, e.ExecutionID)
	}
	b.writes.Concurrency.Adjust = append(b.writes.Concurrency.Adjust, adj)
	b.writes.Concurrency.Release = b.writes.Concurrency.Release || !pending
}

// beginPending begins the Pending execution e: it takes a slot, its
// timeouts are armed, and its first workflow task goes.
func (b *batch) beginPending(e *store.Execution) {
	e.Status, e.UpdatedAt = wire.StatusRunning, b.now
	began := b.now
	ref := *e.Concurrency
	ref.BeganAt = &began
	e.Concurrency = &ref
	b.setTimeouts(e, &wire.StartCommand{RunTimeoutMS: ref.RunTimeoutMS, ExecutionTimeoutMS: ref.ExecutionTimeoutMS}, nil, b.now)
	b.changed[e.ExecutionID] = true
	b.needWorkflowTask(e)
	if b.debug {
		b.logFor(e.ExecutionID).Debug("a Pending execution took a concurrency slot", "key", ref.Key, "limit", ref.Limit)
	}
}

// releaseConcurrency begins, in tx, the Pending executions the shard's
// keys with free slots may begin: the oldest of each key, the keys taken
// in turn. It returns what to write (nil: none had a free slot and a
// waiting execution) and how many keys it looked at.
func releaseConcurrency(ctx context.Context, tx store.Tx, env applyEnv, applied int64, now time.Time, limit int) (*store.Writes, int, error) {
	keys, err := store.DueReleases(ctx, tx, env.shard, limit)
	if err != nil || len(keys) == 0 {
		return nil, 0, err
	}
	var ids []string
	for _, k := range keys {
		ids = append(ids, k.Waiting...)
	}
	var reads store.Reads
	execs := make(map[string]*store.Execution, len(ids))
	reads.LoadExecutions(ids, execs)
	if err := reads.Send(ctx, tx); err != nil {
		return nil, 0, err
	}
	b := newBatch(ctx, env, now.UTC(), applied)
	b.execs = execs
	free := make([]int, len(keys))
	for i, k := range keys {
		free[i] = k.State.Limit - k.State.Running
	}
	for round := 0; ; round++ {
		more := false
		for _, k := range keys {
			if round >= len(k.Waiting) {
				continue
			}
			more = true
			id := k.Waiting[round]
			b.writes.Concurrency.Begun = append(b.writes.Concurrency.Begun, id)
			e := execs[id]
			if e == nil || e.Status != wire.StatusPending {
				// Not waiting any more (its close took it off the queue's
				// count already): its row goes.
				continue
			}
			k.State.Queued--
			k.State.Running++
			b.beginPending(e)
		}
		if !more {
			break
		}
	}
	for i, k := range keys {
		if len(k.Waiting) < free[i] && k.State.Queued != 0 {
			// Fewer wait than its count says (it never happens: each
			// wait and its count change in one transaction): the count
			// is made true, rather than the key looked at for ever.
			b.log.Warn("a concurrency key counted more Pending executions than wait: counted again", "workflow", k.WorkflowName, "key", k.Key,
				"counted", k.State.Queued, "waiting", len(k.Waiting))
			k.State.Queued = 0
		}
		k.State.StaleAt = b.now
		b.keyChanged(store.PolicyRef{WorkflowName: k.WorkflowName, Kind: wire.PolicyConcurrency, Key: k.Key}, k.State)
	}
	if err := b.scheduleWorkflowTasks(ctx, txHistories(tx)); err != nil {
		return nil, 0, err
	}
	for id := range b.changed {
		b.writes.UpdatedExecutions = append(b.writes.UpdatedExecutions, b.execs[id])
	}
	return &b.writes, len(keys), nil
}
