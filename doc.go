// Package harvest is the worker SDK of Harvest, a durable workflow engine on
// NATS JetStream and PostgreSQL. Users register workflow functions and
// activities on a Worker, which pulls tasks from a task queue:
//
//   - workflow tasks replay the workflow function deterministically over the
//     execution's history and return its decisions (schedule an activity,
//     complete, fail) to the scheduler;
//   - activity tasks run user code with an ActivityContext whose
//     IdempotencyKey is the same for every attempt, redelivery and replay
//     of one logical invocation, and different for every other invocation.
//
// Workflow code must be deterministic: given the same history it must make
// the same calls in the same order. It must not start goroutines, read the
// clock or do I/O itself; side effects belong in activities.
//
// This package holds what users call: registration, the workflow and
// activity contexts, signals, timers, Once and the options. The worker
// runtime that pulls, holds, runs and reports tasks lives in
// internal/workerrt; a Worker hands it the registrations.
//
// # What the module exports
//
// Three packages are public: this one (with ActivityKey, the key activities
// hand to providers and derive subkeys from), client (the HTTP API and
// its answer and error types) and harvesttest (the test kit, which runs a
// worker's registrations in process on a clock the test moves,
// docs/testing.md). They are what a user's code calls: a worker in your own binary needs only a NATS connection
// (WorkerConfig.NATS) and binds to the streams the deployment declared.
// Ingest and the scheduler run from Harvest's own binaries (cmd/ingest,
// cmd/scheduler, or harvest dev), so their machinery — streams, store,
// scheduler, ingest, wire, dedup and the rest — lives under internal/, where
// changing it is never a change to this API.
package harvest
