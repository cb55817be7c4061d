// Package console is Harvest's web console, served by ingest under /ui/:
// executions (filtered, paged by the API's cursor), one execution (its
// activities and their idempotency keys, signals, timers and history,
// with cancel and terminate behind a confirmation), workflows (counts by
// status, input schemas, admission gates), webhooks, the live workers
// and one task queue (each name's backlog and workers).
//
// The console is a client of the HTTP API like any other: it holds no
// SQL and no NATS, and calls the API's handler in the process with the
// token its user signed in with, so the API's scopes and workflow limits
// decide what it shows and does. The token stays in a session in the
// process's memory; the browser holds only the session's opaque id. Pages are html/template, which escapes
// everything they show; there is no script, and forms that change
// something are refused from other sites (http.CrossOriginProtection).
//
// Files: console.go (routes, rendering, sign-in), sessions.go (the
// sessions and their cookie), api.go (the in-process
// API caller), executions.go, workflows.go and workers.go (the pages),
// funcs.go (the templates' helpers), templates/ and static/ (embedded).
package console
