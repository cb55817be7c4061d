// Package client is a Go client for Harvest's HTTP API: start workflows
// (keyed starts are idempotent), send signals (keyed signals land once),
// signal-with-start, cancel and terminate executions, and read executions
// and their history.
//
//	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:8080"})
//	run, err := c.Start(ctx, "charge", in, client.StartOptions{IdempotencyKey: "evt-123"})
//	var out ChargeResult
//	_, err = c.WaitResult(ctx, run.ExecutionID, &out)
//
// Every method takes a context, which bounds the call and any polling it
// does. When the server answers 202 (the command is durable but its
// outcome is not known yet), Start, SendSignal, SendSignalIdempotent,
// SignalWithStart, Cancel and Terminate poll the command until it is
// applied; if ctx ends first they return a *PendingError naming the
// command.
//
// Errors the API answers are *APIError values carrying the HTTP status,
// the machine-readable code (one of the Code constants), the message and
// the answer's other members. errors.Is(err, ErrNotFound) and
// errors.Is(err, ErrConflict) test for any 404 and 409; the Err sentinels
// (ErrExecutionNotFound, ErrExecutionTerminal, ErrWorkflowIDConflict, …)
// test for one code each:
//
//	err := c.SendSignal(ctx, id, "item", v)
//	switch {
//	case errors.Is(err, client.ErrExecutionNotFound): // 404 execution_not_found
//	case errors.Is(err, client.ErrExecutionTerminal): // 409 execution_terminal
//	}
//
// WaitResult returns an *ExecutionFailedError when the execution closes
// other than Completed, and a call whose command is still pending when ctx
// ends a *PendingError.
//
// The request and answer bodies of every route, the error codes and the
// execution statuses are package api's, the one home of the HTTP API's
// shapes, which the server encodes exactly. This package re-exports each
// under the same name (StartRequest is api.StartRequest, CodeInvalidJSON
// is api.CodeInvalidJSON), so a user needs no other import.
//
// The package depends on the standard library and package api only;
// typed signals (harvest.Signal[T].Send) are built on it in the harvest
// package. It is the user's client, not the server's dependency: nothing
// under internal/ but the dev tools (internal/dev/...) imports it.
package client

// Where things are:
//
//   - client.go: Config, Client, New, and what every call shares: sending
//     a request, reading its answer, polling.
//   - api.go: the calls that make commands: Start, SendSignal,
//     SendSignalIdempotent, SignalWithStart, and polling a command the
//     server answered 202 for. close.go: Cancel, Terminate,
//     Reset and PlanReset. batches.go: StartBatch, Batch, ListBatches,
//     CancelBatch.
//     updates.go: Update, GetUpdate, AwaitUpdate.
//   - reads.go: Describe, History, List, WaitResult, State (a query
//     state, or waiting for a newer one) and States. dead.go: dead
//     commands. retention.go: Retention and PruneNow. workers.go: live
//     workers and task queues, with their answers' types. concurrency.go:
//     Concurrency, what runs and waits under a concurrency start policy.
//   - schedules.go: PutSchedule, GetSchedule, ListSchedules,
//     ScheduleFires, DeleteSchedule, PauseSchedule, UnpauseSchedule,
//     TriggerSchedule, BackfillSchedule, with the schedules' types and
//     constants.
//   - errors.go: APIError, the error codes and the Err sentinels that
//     match them, PendingError, ExecutionFailedError.
//   - bodies.go: the other request and answer bodies, re-exported from
//     package api under the same names (add a route's types there).
