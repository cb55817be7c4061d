// Package harvesttype holds the worker SDK's plain types that both the
// SDK (package harvest) and its machinery under internal/ need, so that
// neither copies the other's: a leaf, as River's rivertype is, but for
// the pure rules of internal/dedup (below).
//
// It owns:
//
//   - WorkerConfig, its defaults (WithDefaults) and its check (Validate),
//     with ReplayCheck, the replay check a worker runs as it starts.
//     harvest.WorkerConfig is an alias of it, so a worker's code names it
//     as before; the worker runtime (internal/workerrt) takes it as it
//     is, where it once took a field-by-field copy that a new field could
//     silently miss. The root package imports the runtime, so the type
//     cannot live in the root package without a cycle.
//   - TestKitWorker, what harvest.BindTestKit hands the test kit
//     (package harvesttest): a Worker's registrations bound in process.
//
// How the test kit binds a Worker: the binding is made in the root
// package (only it sees a Worker's registrations) and carries handlers of
// internal types. A public function whose signature named those types
// would be API no user can call; a function the root package hands the
// test kit through a package variable would be global state. So
// harvest.BindTestKit's signature names only this package's
// TestKitWorker, and the test kit reaches the internal rest through an
// interface of internal/inproc that the value also satisfies. A method on
// Worker would do the same but needs a Worker without NATS, which
// harvest.NewWorker does not make: one function is the smaller surface.
//
// Of Harvest's packages it imports internal/dedup alone, and through it
// only what dedup imports (a test holds that): everything else may import
// it. dedup is pure computation, with no I/O and no state, and its
// ValidateName is the deployment's rule for a task queue name, which
// Validate applies as it is rather than repeat it. Its other dependencies
// are the standard library and the types WorkerConfig's fields name
// (nats.go, the Prometheus client, the OpenTelemetry trace API). Where it
// repeats a value of the machinery (the default task queue, which lives
// in internal/wire), a test holds the two equal.
package harvesttype
