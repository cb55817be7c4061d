package harvesttype

// TestKitWorker is a Worker's registrations bound to run in this process,
// with no NATS server and no runtime: what package harvesttest runs its
// Env and its replays on. harvest.BindTestKit makes one; a worker's own
// code has no use for it.
//
// The handlers the test kit runs tasks with, and the workflows' input
// schemas, are of types internal to the Harvest module, which no public
// signature may name: the value harvest.BindTestKit returns also
// satisfies an interface of the module's internal/inproc, through which
// the test kit reaches them. Only this module implements TestKitWorker.
//
// A TestKitWorker may be used from several goroutines.
type TestKitWorker interface {
	// Workflows are the names of the workflows registered, sorted.
	Workflows() []string
	// ReplaceActivity makes fn, a function of an activity's form,
	// func(*harvest.ActivityContext, In) (Out, error), the activity name,
	// registered or not, from its next attempt on (the test kit's
	// Env.OnActivity). A function of another form is refused.
	ReplaceActivity(name string, fn any) error
	// Close ends the workflow code kept in memory between workflow tasks
	// (the goroutines of executions still running), as a stopping
	// worker does. Safe to call twice.
	Close()
}
