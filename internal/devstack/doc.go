// Package devstack runs the whole of Harvest in one process — an embedded
// NATS server with JetStream, a private PostgreSQL started from the local
// binaries, the scheduler, a worker with the example workflows, and the
// HTTP API — or runs the same services on an external NATS and PostgreSQL.
// `harvest dev` and the end-to-end tests use it.
//
// It wires the same packages the service binaries run (internal/service
// for the separate processes) and adds nothing of its own to the engine's
// behaviour; production services must not import it.
package devstack
