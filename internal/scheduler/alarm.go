package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// timerAlarm wakes the shard loop when its earliest durable timer is due.
type timerAlarm struct {
	t     *time.Timer
	armed time.Time
}

func newTimerAlarm() *timerAlarm {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &timerAlarm{t: t}
}

func (a *timerAlarm) c() <-chan time.Time { return a.t.C }

// arm sets the alarm for at, unless it is set for earlier already.
func (a *timerAlarm) arm(at time.Time) {
	if !a.armed.IsZero() && !at.Before(a.armed) {
		return
	}
	a.armed = at
	a.t.Reset(max(time.Until(at), 0))
}

func (a *timerAlarm) reset() {
	a.t.Stop()
	a.armed = time.Time{}
}

func (a *timerAlarm) stop() { a.t.Stop() }

// rearm sets the alarm for the shard's earliest timer.
func (r *runner) rearm(ctx context.Context, a *timerAlarm) error {
	a.reset()
	at, ok, err := store.NextTimer(ctx, r.s.cfg.DB, r.lease.Shard)
	if err != nil {
		return err
	}
	if ok {
		a.arm(at)
	}
	return nil
}

// fireDueTimers applies the shard's due timers, a bounded batch per
// transaction, then publishes what they produced; then it begins the
// executions of its due groups of deferred starts (releaseStartsTx),
// fires its due schedules (fireSchedules) and begins the executions
// waiting for a concurrency slot that freed (releaseConcurrency). A batch
// of timers or deferred starts that fails for a reason retrying will not
// fix is applied again one by one, and one that fails alone is dropped or
// set aside, logged and counted, so that it does not stop the shard
// (isolateTimers, isolateReleases).
func (r *runner) fireDueTimers(ctx context.Context) error {
	const limit = 256
	for {
		if err := r.reap(ctx, false); err != nil {
			return err
		}
		fired, err := r.fireTimersTx(ctx, limit, nil)
		if err != nil && poisonous(err) {
			fired, err = r.isolateTimers(ctx, limit, err)
		}
		if err != nil {
			return fmt.Errorf("fire timers: %w", err)
		}
		if fired < limit {
			break
		}
	}
	for {
		released, err := r.releaseStartsTx(ctx, releaseLimit, nil)
		if err != nil && poisonous(err) {
			released, err = r.isolateReleases(ctx, err)
		}
		if err != nil {
			return fmt.Errorf("begin deferred starts: %w", err)
		}
		if released < releaseLimit {
			break
		}
	}
	// Then the schedules due, and the executions waiting for a
	// concurrency slot that has freed: rounds of a transaction each,
	// until one does less than a round may.
	for _, phase := range []struct {
		what  string
		limit int
		round func(context.Context, store.Tx, applyEnv, int64, time.Time, int) (*store.Writes, int, error)
	}{
		{"fire schedules", scheduleLimit, fireSchedules},
		{"step batches", batchLimit, stepBatches},
		{"begin executions waiting for concurrency slots", concurrencyKeysPerTx, releaseConcurrency},
	} {
		for {
			n, err := r.roundTx(ctx, phase.limit, phase.round)
			if err != nil {
				return fmt.Errorf("%s: %w", phase.what, err)
			}
			if n < phase.limit {
				break
			}
		}
	}
	return nil
}

// scheduleLimit bounds the schedules one transaction fires.
const scheduleLimit = 64

// roundTx runs one round of the shard's timer loop in a transaction:
// round decides, at now, up to limit of what is due, and returns what to
// write (nil: nothing was) and how many it looked at; the writes'
// outbox is published after the commit.
func (r *runner) roundTx(ctx context.Context, limit int,
	round func(context.Context, store.Tx, applyEnv, int64, time.Time, int) (*store.Writes, int, error)) (int, error) {
	var n int
	writes, err := r.timersTx(ctx, func(tx *pipeTx, applied int64) (writes *store.Writes, err error) {
		writes, n, err = round(ctx, tx, r.env(), applied, time.Now(), limit)
		return writes, err
	})
	if err != nil {
		return 0, err
	}
	if writes != nil {
		if err := r.committed(ctx, writes); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// releaseLimit bounds the groups of deferred starts one transaction
// begins: each may hold up to startpolicy.MaxBatchSize starts.
const releaseLimit = 16

// isolateReleases begins the due groups of deferred starts one per
// transaction after their batch failed for a reason retrying will not fix
// (cause); a group that fails alone is set aside: its starts are answered
// command_rejected, and it is deleted, so that it does not stop the shard.
// It returns how many groups it handled.
func (r *runner) isolateReleases(ctx context.Context, cause error) (int, error) {
	r.log.Warn("beginning deferred starts failed for a reason retrying will not fix: beginning them one by one", "err", cause)
	var due []*store.DeferredGroup
	err := pgx.BeginFunc(ctx, r.s.cfg.DB, func(tx pgx.Tx) error {
		var err error
		due, _, err = store.DueGroups(ctx, tx, r.lease.Shard, time.Now(), releaseLimit)
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, g := range due {
		_, err := r.releaseStartsTx(ctx, 1, []string{g.GroupID})
		if err != nil && poisonous(err) {
			logattr.With(r.log, "", g.WorkflowName, "").Error("setting aside deferred starts that cannot begin", "kind", g.Kind, "group_id", g.GroupID, "starts", g.Size, "err", err)
			err = r.refuseGroupTx(ctx, g.GroupID, err)
		}
		if err != nil {
			return 0, err
		}
	}
	return len(due), nil
}

// refuseGroupTx sets aside the deferred group id, which cannot begin
// because of cause: its starts are answered command_rejected.
func (r *runner) refuseGroupTx(ctx context.Context, id string, cause error) error {
	writes, err := r.timersTx(ctx, func(tx *pipeTx, applied int64) (*store.Writes, error) {
		groups, members, err := store.DueGroups(ctx, tx, r.lease.Shard, time.Now(), 1, id)
		if err != nil || len(groups) == 0 {
			return nil, err
		}
		keys, err := loadThrottleKeys(ctx, tx, groups)
		if err != nil {
			return nil, err
		}
		return refuseGroups(ctx, r.env(), applied, time.Now(), groups, members, keys, cause), nil
	})
	if err != nil {
		return err
	}
	if writes != nil {
		r.s.metrics.deadCommands.WithLabelValues(deadUnappliable).Add(float64(len(writes.Outcomes)))
		return r.committed(ctx, writes)
	}
	return nil
}

// releaseStartsTx begins the executions of up to limit due groups of
// deferred starts in one transaction and publishes their first tasks; it
// returns how many groups it released.
func (r *runner) releaseStartsTx(ctx context.Context, limit int, ids []string) (int, error) {
	var groups []*store.DeferredGroup
	writes, err := r.timersTx(ctx, func(tx *pipeTx, applied int64) (writes *store.Writes, err error) {
		writes, groups, err = releaseDue(ctx, tx, r.env(), applied, time.Now(), limit, ids...)
		return writes, err
	})
	if err != nil {
		return 0, err
	}
	if writes != nil {
		r.s.metrics.releasedGroups(groups, writes.Policies.Released)
		if err := r.committed(ctx, writes); err != nil {
			return 0, err
		}
	}
	return len(groups), nil
}

// timersTx runs one transaction of the shard's timers or deferred starts:
// with the shard locked, build says what it writes (nil: nothing, and the
// transaction ends there), which is written with the deletion of the
// outbox rows published so far. It returns what was written, for the
// caller to count and then pass to committed.
func (r *runner) timersTx(ctx context.Context, build func(tx *pipeTx, applied int64) (*store.Writes, error)) (*store.Writes, error) {
	var writes *store.Writes
	err := r.s.inTx(ctx, txTimers, func(tx *pipeTx) error {
		applied, err := store.LockShard(ctx, tx, r.s.cfg.Owner, r.lease)
		if err != nil {
			return err
		}
		if writes, err = build(tx, applied); err != nil || writes == nil {
			return err
		}
		writes.PublishedOutbox = r.published
		tx.commitWithNext()
		return store.Write(ctx, tx, writes)
	})
	if err != nil {
		return nil, err
	}
	return writes, nil
}

// committed does what follows the commit of a transaction of the shard's
// timers or deferred starts: the published outbox rows it deleted are
// forgotten, what it changed is remembered, its outcomes announced and
// its outbox published.
func (r *runner) committed(ctx context.Context, writes *store.Writes) error {
	r.s.metrics.historyCrossed(writes)
	r.s.metrics.scheduleFired(writes)
	r.published = nil
	r.known.remember(writes)
	r.forgetTasks(writes)
	r.announce(writes.Outcomes)
	r.announceUpdates(writes.UpdateChanges)
	return r.publish(ctx, writes.Outbox)
}

// fireTimersTx fires up to limit due timers (only those of ids, when
// given) in one transaction and publishes what they produced; it returns
// how many it fired.
func (r *runner) fireTimersTx(ctx context.Context, limit int, ids []int64) (int, error) {
	var due []store.Timer
	writes, err := r.timersTx(ctx, func(tx *pipeTx, applied int64) (*store.Writes, error) {
		var err error
		due, err = store.DueTimers(ctx, tx, r.lease.Shard, time.Now(), limit, ids...)
		if err != nil || len(due) == 0 {
			return nil, err
		}
		return fireTimers(ctx, tx, r.env(), applied, due)
	})
	if err != nil {
		return 0, err
	}
	r.s.metrics.fired(due)
	if writes != nil {
		if err := r.committed(ctx, writes); err != nil {
			return 0, err
		}
	}
	return len(due), nil
}

// isolateTimers fires the due timers one per transaction after their
// batch failed for a reason retrying will not fix (cause); a timer that
// fails alone for such a reason is deleted. It returns how many timers it
// handled.
func (r *runner) isolateTimers(ctx context.Context, limit int, cause error) (int, error) {
	r.log.Warn("firing timers failed for a reason retrying will not fix: firing them one by one", "err", cause)
	due, err := store.DueTimers(ctx, r.s.cfg.DB, r.lease.Shard, time.Now(), limit)
	if err != nil {
		return 0, err
	}
	for _, tm := range due {
		_, err := r.fireTimersTx(ctx, 1, []int64{tm.ID})
		if err != nil && poisonous(err) {
			// The timer's row names no workflow: the line has it if the
			// runner's cache has the execution, and goes without it
			// rather than read the execution for it.
			logattr.With(r.log, tm.ExecutionID, r.known[tm.ExecutionID].WorkflowName, "").Error("dropping a timer that cannot fire", "kind", tm.Kind, "timer_id", tm.ID, "err", err)
			r.s.metrics.deadTimers.Inc()
			err = pgx.BeginFunc(ctx, r.s.cfg.DB, func(tx pgx.Tx) error {
				if _, err := store.LockShard(ctx, tx, r.s.cfg.Owner, r.lease); err != nil {
					return err
				}
				return store.DeleteTimer(ctx, tx, tm.ID)
			})
		}
		if err != nil {
			return 0, err
		}
	}
	return len(due), nil
}

// releaseDue begins, in tx, the executions of up to limit of the shard's
// groups of deferred starts that are due at now (see releaseGroups); nil
// writes when none is.
func releaseDue(ctx context.Context, tx store.Tx, env applyEnv, applied int64, now time.Time, limit int, ids ...string) (*store.Writes, []*store.DeferredGroup, error) {
	groups, members, err := store.DueGroups(ctx, tx, env.shard, now, limit, ids...)
	if err != nil || len(groups) == 0 {
		return nil, nil, err
	}
	keys, err := loadThrottleKeys(ctx, tx, groups)
	if err != nil {
		return nil, nil, err
	}
	writes, err := releaseGroups(ctx, tx, env, applied, now, groups, members, keys)
	return writes, groups, err
}

// loadThrottleKeys reads, locked, the states of the throttled groups'
// keys: a throttle's starts may have to wait longer than they were
// scheduled to.
func loadThrottleKeys(ctx context.Context, tx store.Tx, groups []*store.DeferredGroup) (map[store.PolicyRef]*store.PolicyState, error) {
	var (
		reads store.Reads
		refs  []store.PolicyRef
		seen  = map[store.PolicyRef]bool{}
	)
	for _, g := range groups {
		if g.Kind == wire.PolicyThrottle && !seen[g.Ref()] {
			seen[g.Ref()] = true
			refs = append(refs, g.Ref())
		}
	}
	keys := make(map[store.PolicyRef]*store.PolicyState, len(refs))
	reads.LoadPolicyKeys(refs, keys)
	return keys, reads.Send(ctx, tx)
}
