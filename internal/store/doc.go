// Package store owns Harvest's PostgreSQL state: the embedded, numbered
// migrations, and every query the scheduler and the read API make through
// pgx — executions and their event history, activities, start idempotency
// claims, keyed signal claims, shard leases fenced by an epoch, the applied
// command sequence per shard, timers, completion callbacks, the task
// outbox, command outcomes and dead commands. Each table family has its
// own file; batch.go gathers an apply transaction's reads and writes into
// one round trip each.
//
// All SQL on Harvest's tables lives in this package. It touches nothing
// else: no NATS, no HTTP, no workflow logic. Callers decide what to read
// and write, and most pass in the transaction (Tx) it runs in.
package store
