// Package api holds the shapes of Harvest's HTTP API: the request and
// answer bodies of every route (…Request and …Response, with Execution,
// Event, DeadCommand and Worker), the error answer (ErrorResponse) and its
// machine-readable codes (the Code constants), execution statuses, reuse
// policies and the other string values the bodies carry.
//
// It is the one home of these types, so that the server and its clients
// cannot drift: ingest (internal/ingest) and the admin server encode
// exactly them and declare none of their own, internal/openapi reflects
// the API's description from them, internal/wire takes its execution
// statuses and reuse policies from here, and the scheduler stores its
// outcomes' error codes from here. Package client, the Go client of the
// API, decodes into them and re-exports each under the same name
// (client.StartRequest is api.StartRequest), so a user of the client
// need not import this package.
//
// It is a leaf: it imports the standard library only, and nothing of
// Harvest's, so that both the machinery and the public client can depend
// on it without depending on each other. A test holds that true.
//
// Where things are:
//
//   - bodies.go: the routes' bodies (starts, signals, cancellations, …).
//   - execution.go: Execution, Event, what describe adds, and an
//     exported history's file.
//   - status.go: execution statuses, reuse policies.
//   - errors.go: the error codes and ErrorResponse.
//   - dead.go, retention.go, workers.go: those routes' answers.
//   - updates.go: an update, as its routes answer it.
//   - schedules.go: schedules, their specs, overlap policies and ledger
//     of fires.
//   - reset.go: a reset's request, its answer and its dry run's plan.
//   - batches.go: batch operations: the request, its filter, a batch as
//     it stands.
package api
