// Package ingest is Harvest's front door: the HTTP API that turns start,
// signal, signal-with-start, cancel and terminate requests (and webhook
// deliveries and ArcFlow-compatible runs) into commands on the command
// stream, waits a bounded time for their outcome, and serves executions
// (and ArcFlow runs), their history and query states, commands and dead
// commands,
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
//     answer is a type of the public api package, and every error code
//     one of its Code constants, so that the server and its Go client
//     (package client, which re-exports them) cannot drift. Commands and
//     outcomes are internal/wire's; streams, buckets and publishing are
//     internal/broker's.
package ingest

// Where things are:
//
//   - server.go: Server, New (every route is registered there: add a
//     route there), Start, Stop, Handler. config.go: Config, its
//     defaults, Validate. stores.go: which PostgreSQL store holds a shard
//     or an execution, and reading every store at once.
//   - What every request passes before its handler: guard.go (request
//     ids, the HTTP server's limits, panics and 500s), metrics.go (ingest's
//     metrics, counted by route), browser.go (Host names the API does not
//     answer, state-changing requests from another site), budgets.go (how
//     many requests of each class are served at once, slow bodies),
//     auth.go (a route's token scope, tokens limited to some workflows),
//     query.go (query parameters a route does not read), deadline.go (the
//     read routes' PostgreSQL deadline).
//   - A request's own checks: body.go (reading a body, members its type
//     does not declare), validate.go (a start: its names, schedule,
//     callback, policy, admission gate and input schema), execid.go
//     (execution ids in paths), storable.go (values PostgreSQL cannot
//     store). errors.go: the JSON answers and errors.
//   - The writing routes: start.go (starts, and answering a keyed start's
//     replay from its claim), signal.go (signals and signal-with-start),
//     cancel.go (cancel and terminate), reset.go (resets and
//     their dry runs), batches.go (batch operations: creating,
//     reading, listing and cancelling them), updates.go (updates, waiting
//     for their answers, and reading them), hooks.go (webhook deliveries),
//     arcflow.go (ArcFlow-compatible runs and their signed external
//     callbacks), admission.go (closing and opening admission gates),
//     retention.go (what is past retention, and pruning it),
//     schedules.go (schedules: creating, replacing, pausing, triggering,
//     backfilling and deleting them, and reading them and their
//     ledgers), schedules_config.go (the configuration's schedules,
//     reconciled at start-up).
//   - wakers.go: waking the reads that wait for a change the scheduler
//     announces (an update's answer, a newer query state).
//   - submit.go, outcomes.go: publishing a command, and waiting for the
//     outcome the scheduler announces (or reading it when late).
//   - The read routes: reads.go (what they share: 503s, ?limit=),
//     executions.go, history.go, states.go (query states, and waiting
//     for a newer one), commands.go (a command by id), dead.go
//     (dead commands), workflows.go, versions.go (a workflow's open
//     executions by build and version), webhooks.go, workers_api.go (live
//     workers), taskqueues.go, concurrency.go (a concurrency start
//     policy's key: running, pending, limit). health.go: /healthz and /readyz.
//   - workers.go: whether a live worker serves a workflow, and which task
//     queue a start goes to. pinned.go: a start's versioning and the
//     build it is pinned to, and whether that build has a live worker. mirror.go: the in-memory copies of the
//     admission gates and input schemas buckets every replica follows.
//   - replaycheck.go: the answers to starting workers' replay checks
//     over core NATS (a sample of a workflow's running executions, one
//     execution's history), read as the read routes read them.
