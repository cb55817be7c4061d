// Package service assembles Harvest's service binaries: the command line
// every service shares (--config, the configuration flags that stand for
// their keys' variables, the log line saying which configuration file was
// read, exit codes), connecting to NATS and PostgreSQL with retries (a
// container may start before its dependencies), declaring the topology,
// and running ingest, a scheduler or a worker from their configuration
// until a signal, the scheduler and the worker with their admin server
// (internal/admin) on admin_addr. The cmd/ mains call it and do nothing
// else; it owns no state of its own.
package service

// Where things are:
//
//   - command.go: Command and Exit, the command line every service binary
//     shares. flags.go: the configuration keys commands also take as
//     flags (add one there). configfile.go: which configuration file is
//     read (--config, HARVEST_CONFIG), and the line that says so.
//   - configs.go: each service's Config built from the configuration
//     (internal/config): the topology, ingest's, a scheduler's, a
//     worker's, the pool's options. auth.go: the API's tokens, and the
//     refusal to serve an open API beyond loopback.
//   - service.go: connecting to NATS and the stores, with retries and
//     bounds, and the signals that stop a service. nats.go: NATS
//     credentials and TLS, and the refusals not worth retrying.
//     tracing.go: OpenTelemetry from the standard environment.
//   - One file per service, each its Run function: ingest.go, scheduler.go,
//     worker.go. admin.go: the admin server (health, readiness, metrics)
//     a scheduler and a worker run on admin_addr, and the metrics alone
//     on metrics_addr.
