// Package admin is the small HTTP server the scheduler and the worker
// run on admin_addr, for orchestrators and Prometheus: GET /healthz (the
// process is alive: 200), GET /readyz (200, or 503 with the reasons it is
// not ready) and GET /metrics (the process's registry, in Prometheus's
// exposition format).
//
// With Config.MetricsOnly it serves GET /metrics alone: a process's
// metrics_addr.
//
// It owns the routes and their answers, which are package api's
// HealthResponse and ReadinessResponse, as ingest's are; what makes a
// process ready is the caller's, given as Config.Ready. It serves nothing
// else: ingest serves the same three routes on its API address.
package admin
