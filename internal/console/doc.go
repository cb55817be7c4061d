// Package console is Harvest's web console, served by ingest under /ui/:
// executions (filtered, by search attributes too, paged by the API's
// cursor), one execution (what it waits for, its search attributes,
// activities and their idempotency keys, signals, timers and history as
// a timeline, the runs it was reset from or to, refreshing itself while
// it runs, with Signal… as a form, cancel and terminate behind a
// confirmation and reset behind its dry run's plan), workflows (counts
// by status, input schemas, admission gates, which builds and versions
// their open executions run, and Start… as a form), webhooks, the live
// workers and one task queue (each name's backlog and workers), and
// schedules (each one's definition, next and running fires and ledger,
// with pause, unpause, trigger and delete behind a confirmation).
//
// The console is a client of the HTTP API like any other: it holds no
// SQL and no NATS, and calls the API's handler in the process with the
// token its user signed in with, so the API's scopes and workflow limits
// decide what it shows and does. The token stays in a session in the
// process's memory; the browser holds only the session's opaque id. Pages
// are html/template, which escapes everything they show; there is no
// script, and forms that change something are refused from other sites
// (http.CrossOriginProtection).
package console

// Where things are:
//
//   - console.go: Config, New (the routes and the pages' templates: add
//     a page to both), rendering, security headers, sign-in and
//     sign-out. sessions.go: the sessions and their cookie. api.go:
//     calling the API in the process.
//   - The pages, each a handler here and a template in templates/:
//     executions.go (the list, one execution, its cancel and terminate),
//     timeline.go (an execution's history as a timeline, its search
//     attributes, what it waits for), signal.go (an execution's
//     Signal…), reset.go (an execution's Reset…: the form, the dry
//     run's plan, the reset),
//     workflows.go (workflows, admission gates, webhooks), start.go (a
//     workflow's Start…), workers.go
//     (live workers, a task queue), schedules.go (the schedules, one
//     schedule and its ledger, its actions).
//   - funcs.go: the templates' helpers. templates/ and static/ are
//     embedded.
