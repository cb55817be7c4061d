// Package harvesttype holds the worker SDK's plain types that both the
// SDK (package harvest) and its machinery under internal/ need, so that
// neither copies the other's: a leaf, as River's rivertype is.
//
// It owns:
//
//   - WorkerConfig, its defaults (WithDefaults) and its check (Validate).
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
// It must not import any Harvest package, internal or public (a test
// holds that): everything else may import it. Its dependencies are the
// standard library and the types WorkerConfig's fields name (nats.go,
// the Prometheus client, the OpenTelemetry trace API). Where it repeats a
// rule of the machinery (a task queue name's form, the default task
// queue), a test holds the two equal.
package harvesttype
