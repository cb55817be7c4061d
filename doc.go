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
// The public packages are this one (with ActivityKey, the key activities hand
// to providers and derive subkeys from), client (the Go client of the HTTP
// API), api (the API's request, answer and error types, which client
// re-exports), harvesttest (the test kit, which runs a worker's registrations
// in process on a clock the test moves, docs/testing.md), harvesttype (the
// plain types this package shares with its machinery, such as WorkerConfig)
// and harvestcheck (an analyzer that reports workflow code a replay could not
// repeat). They are what a user's code calls: a worker in your own binary
// needs only a NATS connection (WorkerConfig.NATS) and binds to the streams
// the deployment declared. Ingest and the scheduler run from Harvest's own
// binaries (cmd/ingest, cmd/scheduler, or harvest dev), so their machinery —
// broker, store, scheduler, ingest, wire, dedup and the rest — lives under
// internal/, where changing it is never a change to this API.
package harvest

// Where things are:
//
//   - worker.go: WorkerConfig (package harvesttype's), Worker,
//     NewWorker, registration (RegisterWorkflow, RegisterActivity,
//     RegisterReconcile), Start, Ready, Stop. handlers.go: what a Worker
//     hands the worker runtime (internal/workerrt): a workflow task's
//     replay, an activity attempt. testkit_binding.go: BindTestKit, a
//     Worker's registrations bound in process for harvesttest.
//   - What workflow code calls: workflow.go (WorkflowContext, Now,
//     ExecuteActivity, Future), determinism.go (Go, Await, SideEffect,
//     Channel, a logger silent on replay), signals.go (SignalChannel and
//     typed Signals), signals_client.go (sending a typed Signal through
//     package client), timers.go (Timer, Sleep), selector.go (Selector),
//     versioning.go (GetVersion, Patched, DeprecatePatch: changing the
//     code while executions run), continueasnew.go (ContinueAsNew),
//     updates.go (SetUpdateHandler: updates the workflow answers, and
//     their delivery and replay), querystate.go (SetQueryState: values
//     read over the API), cancel.go (cooperative cancellation: Done,
//     Err, ErrCanceled, NewDisconnectedContext, and what the execution's
//     cancellation request gives up), children.go (ExecuteChildWorkflow,
//     ChildOptions, parent-close policies, SignalExternalWorkflow),
//     searchattributes.go (UpsertSearchAttributes).
//   - What activity code calls: activity.go (ActivityContext, heartbeats,
//     the errors that stop retries), activity_typed.go (typed
//     Activities), activitykey.go (ActivityKey), ledger.go (Once and the
//     effect ledger), options.go (ActivityOptions, RetryPolicy).
//   - Replay: engine.go (an execution replayed over its history, its
//     decisions, non-determinism), coroutine.go (workflow goroutines run
//     one at a time), cache.go (executions kept in memory between their
//     workflow tasks).
