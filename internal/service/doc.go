// Package service assembles Harvest's service binaries: the command line
// every service shares (--config, the configuration flags that stand for
// their keys' variables, the log line saying which configuration file was
// read, exit codes), connecting to NATS and
// PostgreSQL with retries (a container may start before its dependencies),
// declaring the topology, and running ingest, a scheduler or a worker from
// their configuration until a signal, the scheduler and the worker with
// their admin server (internal/admin) on admin_addr. The cmd/ mains call
// it and do nothing else; it owns no state of its own.
package service
