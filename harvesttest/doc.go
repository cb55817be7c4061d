// Package harvesttest runs a worker's registered workflows and activities
// in process, without NATS or PostgreSQL, on a clock the test controls,
// and injects what production does to them: a start or signal delivered
// twice, an activity's result lost after its effect happened, a worker
// that dies between two steps, time passing beyond the start idempotency
// window or the retention of closed executions.
//
// It is not a simulation of Harvest. Workflow code is replayed by the
// worker's own replayer; activity attempts run through the worker's own
// attempt code (the reconcile function first when the previous attempt's
// outcome is unknown, then the activity, with the idempotency key from the
// history, errors turned into failures as a worker reports them); and
// every command, timer and fault is applied by the scheduler's own apply
// code, to a shard kept in memory instead of PostgreSQL. Retries wait for
// their policy's backoff, attempts time out at their start-to-close
// timeout, a lost task comes back after the worker's task ack wait, all on
// the test's clock (Env.Advance).
//
// What differs from a deployment is written down in docs/testing.md: tasks
// run one at a time on the goroutine that called the Env, first attempts
// never run eagerly, activity contexts carry no deadline, Once's ledger is
// kept in memory, and of ingest's own checks only input schemas and what
// Harvest can store are made.
package harvesttest
