// Package store owns Harvest's PostgreSQL state: the embedded, numbered
// migrations, and every query the scheduler and the read API make through
// pgx — executions and their event history, activities, start idempotency
// claims, keyed signal claims, shard leases fenced by an epoch, the applied
// command sequence per shard, timers, completion callbacks, the task
// outbox, command outcomes, dead commands and query states.
//
// All SQL on Harvest's tables lives in this package. It touches nothing
// else: no NATS, no HTTP, no workflow logic. Callers decide what to read
// and write, and most pass in the transaction (Tx) it runs in.
package store

// Where things are:
//
//   - migrate.go: Migrate, and the numbered migrations/*.sql it embeds;
//     change the schema with a new file there, never by editing one
//     applied. pool.go: the pgx pool Harvest runs with. db.go: DBTX and
//     Tx, what the functions run in.
//   - batch.go: an apply transaction's round trips: Reads, whose methods
//     (in each table family's file) queue its reads, and Writes, sent by
//     Write. preconditions.go: what an apply that read nothing assumed,
//     checked inside the write batch.
//   - One file per table family, each with its reads, its queued writes
//     and its types; add a query beside its table's others:
//     executions.go, history.go (events), activities.go, claims.go (start
//     idempotency claims, and a drain's report), signal_claims.go (keyed
//     signals), updates.go (updates and a run's updates in flight),
//     children.go (an execution's child workflows as it knows them),
//     duplicates.go (duplicates counted on claims, by the layer
//     that caught them), timers.go, callbacks.go (completion callbacks),
//     policies.go (start policy keys and deferred starts), concurrency.go
//     (concurrency keys' Pending executions and the slots given back),
//     schedules.go
//     (schedules, their ledgers of fires, and as the API answers them),
//     batches.go (batch operations' parts, their pages of executions and
//     the executions' reports), search.go (search attributes: their
//     rows, the filters on them, and reading an execution's), outbox.go,
//     outcomes.go, dead.go (dead commands), versions.go (open executions
//     by build and by recorded version, across executions and history),
//     states.go (executions' query states, set by workflow code).
//   - leases.go: shard leases and their epochs, live schedulers, the
//     shard's applied sequence and its command stream, failing shards.
//   - prune.go: retention: pruning closed executions, and what is past
//     retention. view.go: rows as the API answers them.
