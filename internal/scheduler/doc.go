// Package scheduler applies Harvest's commands to PostgreSQL. A scheduler
// process takes shard leases (fenced by an epoch), and for each shard it
// owns it consumes that shard's commands in stream order, applies them in
// batches — one transaction per batch, which also records the applied
// stream sequence, so a redelivered command is never applied twice — then
// acknowledges them and publishes the tasks and outcomes the batch put in
// the outbox. It holds no user code.
//
// Several schedulers share the shards; a dead one's shards move to the
// others once its leases expire.
//
// The package owns the decisions: what each command and each durable timer
// does to an execution, when a shard's session starts again, what is set
// aside as dead. It must not write SQL: every statement against a table
// lives in internal/store (the only statements it sends itself are its
// transactions' BEGIN, COMMIT and ROLLBACK, in pipeTx). It serves no HTTP
// and takes no requests: commands reach it only through the command
// stream, and the only HTTP it speaks is the completion callbacks it
// dials, through internal/callback. Workflows and activities run on
// workers, which it reaches only through the task stream.
package scheduler

// Where things are:
//
//   - scheduler.go: Config, New, Start, Stop.
//   - lease.go, sweep.go: the lease loop and rounds; the sweep of expired
//     claims and outcomes. callbacks.go: completion callback delivery.
//     retention.go: pruning closed executions past their retention.
//   - runner.go: a shard's runner, its restarts and health marks;
//     ready.go: Ready, the scheduler's readiness (admin_addr's /readyz).
//   - session.go: a shard session, delivery order checks, catch-up.
//   - applytx.go: a batch of messages in one apply transaction (pipetx.go
//     is the transaction), acknowledged and announced.
//   - commands.go: the table of command kinds, each with its validation,
//     its reads and its apply; add a kind of command there.
//   - apply.go: the apply itself: the batch's reads, then each command by
//     its kind. Each kind's apply: apply_start.go, apply_policy.go (starts
//     under a start policy), apply_signal.go, apply_workflowtask.go (a
//     workflow task's decisions, whose meaning is internal/decide's),
//     apply_activity.go (results, heartbeats, attempts and their
//     dispatch), apply_duplicate.go, apply_close.go (closing an
//     execution; terminate), apply_cancel.go (cooperative
//     cancellation: the request, its grace, activities given up),
//     apply_timeout.go (run and execution timeouts), apply_children.go
//     (child workflows, the reports between shards, parent-close
//     policies, signals between workflows), apply_search.go (search attributes
//     indexed as set, and a task that sets undeclared ones refused),
//     apply_batch.go (batch operations: their
//     parts created and cancelled, stepped by the timer loop, and the
//     reports of how each execution went), apply_reset.go (a reset: the new run from
//     a point of the history, the old run closed), apply_continue.go (a run that
//     continues as new, its next run, and the signals it passes on),
//     apply_update.go (updates: admitted, accepted, answered, refused,
//     failed as their run closes, moved to the run it continued as),
//     apply_concurrency.go (concurrency start policies: Pending
//     executions, slots given back, the oldest waiting begun),
//     apply_schedule.go (schedules: their commands, their fires decided
//     from their rows, overlap, catch-up and the reports of the
//     executions they started).
//   - sticky.go: sticky workflow tasks: sent to the worker that keeps
//     their execution, moved to every worker when it does not take them.
//   - history_limits.go: what each history is held to, checked once a
//     batch is applied: the warning, the failure past the hard limit,
//     the suggestion to continue as new a workflow task carries.
//   - alarm.go, apply_timer.go: durable timers: firing them (and dropping
//     one that cannot fire), and what each kind does.
//   - validate.go: what makes a command's fields valid. dead.go: dead
//     letters, and isolating the command that cannot apply.
//   - outbox.go, reap.go, tasks.go: publishing the outbox, collecting its
//     acknowledgements, the workflow tasks the task stream holds.
//   - cache.go, heldlog.go: what read-free batches rely on.
//   - memory.go: Memory, one shard in memory, applied by the same code;
//     the test kit (harvesttest) runs on it.
//   - metrics.go, shardstats.go: the scheduler's metrics; the shards'
//     backlogs, read at scrape time. logfor.go: a batch's log lines.
