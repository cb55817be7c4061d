// Package store owns Harvest's PostgreSQL state: the embedded, numbered
// migrations, and every query the scheduler and the read API make through
// pgx — executions and their event history, start idempotency claims, shard
// leases fenced by an epoch, the applied command sequence per shard, timers,
// the task outbox, and command outcomes.
//
// All SQL in Harvest lives in this package.
package store
