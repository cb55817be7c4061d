package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/tracing"
	"github.com/harvest-engine/harvest/internal/wire"
)

// applyBatch applies msgs in one transaction, acknowledges them, then
// publishes the outbox rows the transaction wrote. A batch that fails for
// a reason retrying will not fix is applied again command by command, and
// the command that fails alone is set aside as dead (isolate).
func (r *runner) applyBatch(ctx context.Context, msgs []jetstream.Msg) (*store.Writes, error) {
	cmds := make([]seqCommand, 0, len(msgs))
	for _, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("command metadata: %w", err)
		}
		c := seqCommand{seq: meta.Sequence.Stream, subject: m.Subject(), raw: m.Data()}
		if err := json.Unmarshal(m.Data(), &c.cmd); err != nil {
			// A malformed command can never apply: it is set aside (its
			// sequence still advances) rather than block the shard.
			c.cmd = wire.Command{CommandID: msgCommandID(m)}
			c.dead = &deadReason{code: deadMalformed, reason: fmt.Sprintf("the message is not a command: %v", err)}
		} else if !validCommand(&c.cmd) {
			c.dead = &deadReason{code: deadMalformed, reason: fmt.Sprintf("the message is not a valid %q command", c.cmd.Kind)}
		}
		cmds = append(cmds, c)
	}
	spans := r.traceApply(ctx, msgs, cmds)
	// Rows of earlier batches JetStream has acknowledged since are
	// deleted by this batch's transaction.
	if err := r.reap(ctx, false); err != nil {
		return nil, err
	}
	began := time.Now()
	writes, err := r.applyCommands(ctx, cmds, true)
	if err != nil && poisonous(err) {
		writes, err = r.isolate(ctx, cmds, err)
	}
	if err != nil {
		endApplySpans(spans, cmds, nil, err)
		return nil, err
	}
	endApplySpans(spans, cmds, writes, nil)
	r.s.metrics.applied(len(cmds), time.Since(began))
	r.s.metrics.handled(cmds)
	r.s.metrics.dead(writes.DeadCommands)
	r.s.metrics.historyCrossed(writes)
	r.s.metrics.scheduleFired(writes)
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			r.log.Warn("ack command", "err", err)
		}
	}
	r.announce(writes.Outcomes)
	r.announceUpdates(writes.UpdateChanges)
	r.announceStates(writes.States)
	return writes, r.publish(ctx, writes.Outbox)
}

// applyCommands applies cmds in one transaction and records what the
// runner keeps of it; the caller acknowledges, announces and publishes.
func (r *runner) applyCommands(ctx context.Context, cmds []seqCommand, readFree bool) (*store.Writes, error) {
	writes, err := r.applyTx(ctx, cmds, readFree)
	if readFree && (errors.Is(err, store.ErrClaimHeld) || errors.Is(err, store.ErrWorkflowIDTaken) || errors.Is(err, store.ErrFenced)) {
		// What the read-free apply assumed did not hold (a key or a
		// workflow id used before, or the fence): nothing was written.
		// Applied with reads, the batch finds what is there, and a fence
		// that fails again tells a lost lease (the runner stops) from a
		// moved sequence (a new session).
		writes, err = r.applyTx(ctx, cmds, false)
	}
	if err != nil {
		r.applied, r.known = -1, execCache{}
		return nil, fmt.Errorf("apply batch of %d commands: %w", len(cmds), err)
	}
	r.applied = writes.AppliedSeq
	r.known.remember(writes)
	r.forgetTasks(writes)
	if writes.PublishedOutbox != nil {
		r.published = nil
	}
	return writes, nil
}

// applyTx applies cmds in one transaction. With readFree, and the shard's
// applied sequence known, it first tries without reading PostgreSQL
// (applyEnv.known): the batch's reads are then assumed and checked by its
// writes, and the transaction is one round trip. A batch that cannot go
// without reads is applied with them in the same transaction, which has
// sent nothing yet.
func (r *runner) applyTx(ctx context.Context, cmds []seqCommand, readFree bool) (*store.Writes, error) {
	var (
		writes *store.Writes
		// held is what the read-free attempt logged: logged once its
		// writes commit, dropped if it is given up.
		held     *[]heldRecord
		freeUsed bool
	)
	// BEGIN goes with the reads and COMMIT with the writes (pipeTx).
	err := r.s.inTx(ctx, txApply, func(tx *pipeTx) error {
		env, applied := r.env(), r.applied
		var err error
		if applied >= 0 {
			// The shard's applied sequence is the one this session last
			// committed: apply locks the shard and checks it in the round
			// trip of its first reads, or in its writes when it reads
			// nothing.
			env.lock = &shardLock{owner: r.s.cfg.Owner, lease: r.lease}
			if readFree {
				free := env
				free.known = r.known
				free.log, held = newHeldLog(r.log.Handler())
				writes, err = apply(ctx, noReads{}, free, applied, cmds)
				if err != nil && !errors.Is(err, errNeedsReads) {
					return err
				}
				freeUsed = err == nil
			}
		} else if applied, err = store.LockShard(ctx, tx, r.s.cfg.Owner, r.lease); err != nil {
			return err
		}
		if writes == nil {
			if writes, err = apply(ctx, tx, env, applied, cmds); err != nil {
				return err
			}
		}
		if writes.AppliedSeq == applied {
			return nil // all redelivered
		}
		writes.PublishedOutbox = r.published
		tx.commitWithNext()
		return store.Write(ctx, tx, writes)
	})
	if err != nil {
		return nil, err
	}
	if freeUsed {
		release(ctx, *held)
	}
	return writes, nil
}

// announce tells the ingest requests waiting on the outcomes a batch just
// committed, on core NATS: nothing is stored, since the outcomes are in
// PostgreSQL already, where a reader that misses the message finds them.
func (r *runner) announce(outcomes []store.OutcomeRow) {
	nc := r.s.cfg.Topology.JS.Conn()
	for _, o := range outcomes {
		if err := nc.Publish(broker.OutcomeSubject(o.CommandID), o.Payload); err != nil {
			var out wire.Outcome
			_ = json.Unmarshal(o.Payload, &out) // for the log only
			logattr.With(r.log, out.ExecutionID, out.WorkflowName, o.CommandID).Debug("announce outcome", "err", err)
		}
	}
}

// announceUpdates tells the ingest requests waiting on updates that a
// batch just changed them (broker.UpdateSubject): they read the update
// from PostgreSQL, where a reader that misses the message finds it too.
func (r *runner) announceUpdates(changes []store.UpdateChange) {
	nc := r.s.cfg.Topology.JS.Conn()
	for _, c := range changes {
		if err := nc.Publish(broker.UpdateSubject(c.UpdateID), []byte(c.Status)); err != nil {
			r.log.Debug("announce update", "update_id", c.UpdateID, "err", err)
		}
	}
}

// announceStates wakes the ingest requests waiting for a newer value of
// the query states a batch just committed (long polls of
// GET /api/harvest/executions/{id}/state/{name}): one message per
// execution on core NATS, carrying nothing, since the readers read the
// values from PostgreSQL. A lost message costs a reader its next periodic
// read.
func (r *runner) announceStates(states []store.StateRow) {
	nc := r.s.cfg.Topology.JS.Conn()
	seen := make(map[string]bool, len(states))
	for _, st := range states {
		if seen[st.ExecutionID] {
			continue
		}
		seen[st.ExecutionID] = true
		if err := nc.Publish(broker.StateSubject(st.ExecutionID), nil); err != nil {
			r.log.Debug("announce query states", "execution_id", st.ExecutionID, "err", err)
		}
	}
}

// traceApply starts a span for the apply of each command, a child of the
// trace context its message carries (the ingest request's, or the worker
// task's that published it); nil when tracing is off. Each command's
// trace is set to its span's, for the tasks it leads to.
func (r *runner) traceApply(ctx context.Context, msgs []jetstream.Msg, cmds []seqCommand) []trace.Span {
	tr := r.s.cfg.Topology.Tracing
	if !tr.Enabled() {
		return nil
	}
	spans := make([]trace.Span, len(cmds))
	for i, m := range msgs {
		c := &cmds[i]
		_, span := tr.Start(tr.Extract(ctx, m.Headers()), "apply "+c.cmd.Kind, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(tracing.AttrCommandID.String(c.cmd.CommandID), tracing.AttrCommandKind.String(c.cmd.Kind),
				tracing.AttrShard.Int(r.lease.Shard), tracing.AttrBatchSize.Int(len(cmds))))
		if id := c.cmd.TargetExecution(); id != "" {
			span.SetAttributes(tracing.AttrExecutionID.String(id))
		}
		c.trace = tr.Traceparent(trace.ContextWithSpan(ctx, span))
		spans[i] = span
	}
	return spans
}

// endApplySpans ends the apply spans of a batch once it committed (or
// failed with err), with what each command came to: its execution and
// workflow, and whether it was a duplicate the claims absorbed.
func endApplySpans(spans []trace.Span, cmds []seqCommand, writes *store.Writes, err error) {
	if spans == nil {
		return
	}
	if err != nil {
		for _, span := range spans {
			span.RecordError(err)
			span.SetStatus(codes.Error, "batch not applied")
			span.End()
		}
		return
	}
	outcomes := make(map[string][]byte, len(writes.Outcomes))
	for _, o := range writes.Outcomes {
		outcomes[o.CommandID] = o.Payload
	}
	workflows := map[string]string{}
	for _, es := range [][]*store.Execution{writes.NewExecutions, writes.UpdatedExecutions} {
		for _, e := range es {
			workflows[e.ExecutionID] = e.WorkflowName
		}
	}
	dead := make(map[string]bool, len(writes.DeadCommands))
	for _, d := range writes.DeadCommands {
		dead[d.CommandID] = true
	}
	for i, span := range spans {
		c := &cmds[i]
		execID := c.cmd.TargetExecution()
		if data, ok := outcomes[c.cmd.CommandID]; ok {
			var out wire.Outcome
			if json.Unmarshal(data, &out) == nil {
				if out.ExecutionID != "" {
					execID = out.ExecutionID
					span.SetAttributes(tracing.AttrExecutionID.String(out.ExecutionID))
				}
				if out.WorkflowName != "" {
					workflows[execID] = out.WorkflowName
				}
				span.SetAttributes(tracing.AttrDeduplicated.Bool(out.Deduplicated))
				if out.Deduplicated {
					span.SetAttributes(tracing.AttrDedupLayer.String("claim"))
				}
				if out.Error != "" {
					span.SetAttributes(tracing.AttrErrorCode.String(out.Error))
				}
			}
		}
		if name := workflows[execID]; name != "" {
			span.SetAttributes(tracing.AttrWorkflow.String(name))
		}
		if dead[c.cmd.CommandID] || c.dead != nil {
			span.SetStatus(codes.Error, "command set aside as dead")
		}
		span.End()
	}
}
