package harvesttest

// Fault is something production does to a workflow that the test injects
// with Env.Inject. Each fault happens once, at the first task it matches.
type Fault struct {
	workflow string
	activity string
	// skip is how many matching tasks go through before the fault.
	skip int
}

// Skip lets n matching tasks go through untouched first: the fault
// happens at the one after them.
func (f Fault) Skip(n int) Fault {
	f.skip = n
	return f
}

// loses says whether f loses the result of a task of workflow (a
// workflow task) or activity (an activity attempt).
func (f Fault) loses(workflow, activity string) bool {
	if workflow != "" {
		return f.workflow == workflow
	}
	return f.activity != "" && f.activity == activity
}

// LoseActivityResult is a worker that dies after the next attempt of
// activity has run (its effect happened) and before its result was
// recorded. The attempt's task is delivered again, after the task ack
// wait, to a new worker, which reports the attempt lost without running
// it; the scheduler retries it after the retry policy's backoff with the
// same idempotency key, and the activity's reconcile function, if it
// registered one, runs first. Advance the clock to see it through.
func LoseActivityResult(activity string) Fault {
	return Fault{activity: activity}
}

// LoseWorkflowTaskResult is a worker that dies after running the next
// workflow task of workflow and before its decisions were recorded: the
// crash between two steps. The task is delivered again, after the task
// ack wait, to a new worker, which replays the history and must decide
// the same. If the decisions only schedule activities, the new worker
// marks them possibly started (the dead one could have run their first
// attempts eagerly), so their attempt 1 counts as lost and attempt 2
// reconciles first. Advance the clock to see it through.
func LoseWorkflowTaskResult(workflow string) Fault {
	return Fault{workflow: workflow}
}

// Inject queues a fault for the next task it matches.
func (e *Env) Inject(f Fault) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = append(e.faults, f)
}
