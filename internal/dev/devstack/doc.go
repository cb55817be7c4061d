// Package devstack runs the whole of Harvest in one process — an embedded
// NATS server with JetStream, a private PostgreSQL started from the local
// binaries, the scheduler, a worker with the example workflows, and the
// HTTP API — or runs the same services on an external NATS and PostgreSQL.
// `harvest dev` and the end-to-end tests use it. The embedded NATS server
// and the private PostgreSQL listen on 127.0.0.1 and require credentials
// that the stack makes at the first start on a state dir and keeps in it
// (credentials.go).
//
// It wires the same packages the service binaries run (internal/service
// for the separate processes) and adds nothing of its own to the engine's
// behaviour; production services must not import it.
package devstack
