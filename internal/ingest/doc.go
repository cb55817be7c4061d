// Package ingest is Harvest's front door: the HTTP API that turns start,
// signal, signal-with-start, cancel and terminate requests (and webhook
// deliveries and ArcFlow-compatible runs) into commands on the command
// stream, waits a bounded time for their outcome, and serves executions
// (and ArcFlow runs), their history, commands and dead commands,
// workflows, live workers and task queues, admission gates, /healthz,
// /readyz and /metrics. It mounts the web console (internal/console) at
// /ui/, which calls these routes in the process with its user's token.
//
// It owns the routes, the checks a request passes before anything is
// published (names, keys, schedules, input schemas, admission gates,
// values PostgreSQL cannot store, members a body Harvest defines does not
// have, query parameters a route does not read), the message ids that
// make retries collapse, and the waiting for outcomes: announced by the
// scheduler on core NATS, read from PostgreSQL when the announcement is
// late.
//
// What it must not do:
//
//   - Write PostgreSQL, or hold SQL: a command is accepted once JetStream
//     holds it, and the database is only read, through internal/store's
//     functions (the read routes, late outcomes, the claims of keyed
//     starts). Config.DB may be nil; then reads answer 503.
//   - Apply commands or change an execution: that is the scheduler's
//     (internal/scheduler), which stores each outcome and announces it.
//   - Declare its own HTTP bodies or error codes: every request and
//     answer is a type of the public client package, and every error
//     code a client.Code constant, so that the server and its Go client
//     cannot drift. Commands and outcomes are internal/wire's; streams,
//     buckets and publishing are internal/broker'.
//
// Files, by job: config.go (Config, defaults, Validate), server.go
// (Server and its routes), body.go, query.go, validate.go, execid.go and
// storable.go (a request's own checks), start.go (starts and their replays),
// submit.go and outcomes.go (publishing a command and waiting for its
// outcome), signal.go, cancel.go (cancel and terminate), hooks.go,
// arcflow.go and admission.go (the other writing routes), reads.go,
// executions.go, workflows.go, history.go, commands.go, dead.go,
// workers_api.go and taskqueues.go (the read routes), health.go
// (/healthz, /readyz), errors.go (the JSON writer), browser.go (what a
// web page may not make the API do: requests from another site, Host
// names that are not the API's).
package ingest
