// Package stacktest starts whole Harvest stacks for stack tests — a
// feature tried through ingest, the scheduler and a worker in one process
// (internal/dev/devstack) on an embedded NATS server and a private
// PostgreSQL database — and holds what those tests share: Start and Stop,
// a client (Client), HTTP calls to the API (Call, StartWorkflow, Signal,
// and the waits on an execution), counts in the stack's stores (DBCount),
// webhook deliveries signed as Stripe signs them (Deliver), the users'
// own JetStream streams (UserStreams), the stack's log (Logger), and the
// contract run again on several stores (RunOnStores).
//
// A stack test lives beside the package that owns its feature, in that
// package's external test package (package console_test in
// internal/console): an external test package may import devstack, and
// so this package, although devstack imports the package under test.
// CONTRIBUTING.md says which test goes where.
//
// It imports devstack, which imports every service: only _test.go files
// may import it, never a package's own code.
package stacktest
