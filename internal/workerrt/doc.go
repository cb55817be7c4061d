// Package workerrt is the worker runtime behind harvest.Worker: the
// machinery that takes a task queue's tasks from NATS JetStream and
// reports what came of them, with the SDK's registrations seen only
// through Handlers.
//
// It owns:
//
//   - binding: the deployment's streams and buckets (broker.Bind), the
//     input schemas the SDK hands it, and the task queue's two durable
//     consumers on the task stream, one for workflow tasks and one for
//     activity tasks, each pulled through a broker.Window no larger than
//     its concurrency;
//   - the activity slots (ActivityConcurrency), shared by the attempts
//     of activity tasks and eager attempts;
//   - the keeper, which acknowledges every held task in progress each
//     third of TaskAckWait, and the hand-back marks that let the next
//     delivery of a task handed back unstarted run it as a first;
//   - redelivery: an activity task delivered again after a delivery that
//     may have started it is reported lost (WorkerLost), never run again;
//   - one attempt's frame: its deadline, its heartbeats and their
//     watchdog, the cancellation of its execution, and the
//     classification of how it ended;
//   - eager dispatch: running a workflow task's activities and the next
//     workflow task at once, in one command;
//   - publishing results as commands (a result too large fails the
//     workflow or the activity), then acknowledging or handing back;
//   - shutdown: handing back what has not started, and letting what runs
//     finish within ShutdownGrace;
//   - the replay check (WorkerConfig.ReplayCheck): before it registers
//     anything, a sample of each workflow's running histories replayed on
//     the SDK's code; a workflow that diverges is not taken;
//   - the worker's metrics, and Ready: whether a task queue's consumers
//     are in place, for a worker process's /readyz.
//
// It takes the worker's configuration as the SDK's leaf of plain types
// defines it (harvesttype.WorkerConfig, which harvest.WorkerConfig is),
// not a copy of it. It must not touch the SDK's user-facing types
// (WorkflowContext, ActivityContext, options, errors): it works on
// internal/wire types and the func types it defines, and never imports
// the root package, which imports it. It does no PostgreSQL: a worker's
// only link to the deployment is NATS (the replay check asks ingest for
// histories).
package workerrt

// Where things are:
//
//   - runtime.go: Config, Handlers, Runtime, New, Bind, Start and
//     stopping; the task consumers and their pull loops.
//   - tasks.go: handling a workflow task and an activity task, publishing
//     their results, their spans. attempt.go: one activity attempt, its
//     heartbeats, a lost attempt.
//   - eager.go: eager dispatch. held.go: the tasks a worker holds, the
//     keeper, hand-backs. cancel.go: the cancelled executions a worker
//     follows, and cancelling their running activities.
//   - slots.go: the slots tasks run in, taken highest priority first.
//   - metrics.go: the worker's metrics. ready.go: Ready.
//   - history.go: fetching the history a workflow task does not carry
//     (it carries the events since the execution's last task) for an
//     execution the worker does not hold.
//   - builds.go: routing among builds: the consumers of executions pinned
//     to this build, and pulling a workflow's shared tasks only while
//     this build is the newest that registers it.
//   - replaycheck.go: the replay check a worker runs in Bind (fetching
//     a sample of each workflow's running histories from ingest over
//     core NATS, replaying them, refusing a workflow that diverges).
