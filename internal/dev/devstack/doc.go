// Package devstack runs the whole of Harvest in one process — an embedded
// NATS server with JetStream, a private PostgreSQL started from the local
// binaries, the scheduler, a worker with the example workflows, and the
// HTTP API — or runs the same services on an external NATS and PostgreSQL.
// `harvest dev`, `harvest bench` and the packages' stack tests (through
// internal/testing/stacktest) use it. The embedded NATS server
// and the private PostgreSQL listen on 127.0.0.1 and require credentials
// that the stack makes at the first start on a state dir and keeps in it.
//
// It wires the same packages the service binaries run (internal/service
// for the separate processes) and adds nothing of its own to the engine's
// behaviour; production services must not import it.
package devstack

// Where things are:
//
//   - devstack.go: Stack and Start, which brings the services up in order
//     (the scheduler of each store, the worker, the bindings, the HTTP
//     API), and Stop. config.go: Config. errors.go: what Start fails
//     with (a state dir in use, an address taken, another shard count).
//   - nats.go: the embedded NATS server, or the external one.
//     postgres.go: the private PostgreSQL, or the external database.
//     stores.go: a stack with several stores. credentials.go: the state
//     dir's credentials, kept private. worker.go: the stack's worker.
