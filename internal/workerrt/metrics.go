package workerrt

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/internal/wire"
)

// outcome is how a worker settled a task, for the metrics.
type outcome int

const (
	// outcomeDropped: nothing to report (a malformed task, an attempt past
	// its deadline or of a cancelled execution); acknowledged.
	outcomeDropped outcome = iota
	// outcomeCompleted: the workflow task's decisions, or the attempt's
	// result, are published and the task acknowledged.
	outcomeCompleted
	// outcomeFailed: the replay or the attempt failed, or its result could
	// not be published.
	outcomeFailed
	// outcomeHandedBack: handed back unstarted, for another worker or for
	// later (not registered here, or the worker is stopping).
	outcomeHandedBack
)

// String is the outcome label's value.
func (o outcome) String() string {
	switch o {
	case outcomeCompleted:
		return "completed"
	case outcomeFailed:
		return "failed"
	case outcomeHandedBack:
		return "handed_back"
	default:
		return "dropped"
	}
}

var outcomes = []outcome{outcomeCompleted, outcomeFailed, outcomeHandedBack, outcomeDropped}

// Outcomes of an activity attempt, the outcome label of
// harvest_worker_activity_attempts_total.
const (
	attemptCompleted = "completed"
	attemptFailed    = "failed"
	attemptTimedOut  = "timed_out"
	attemptShutdown  = "shutdown"
)

var attemptOutcomes = []string{attemptCompleted, attemptFailed, attemptTimedOut, attemptShutdown}

// Results of a call of harvest.Once, the result label of
// harvest_worker_ledger_calls_total.
const (
	// LedgerHit: the key's result was recorded; the effect did not run.
	LedgerHit = "hit"
	// LedgerRun: the key was free; the effect ran.
	LedgerRun = "run"
	// LedgerTakeover: the run that held the key let its lease lapse; the
	// effect ran again.
	LedgerTakeover = "takeover"
)

var ledgerResults = []string{LedgerHit, LedgerRun, LedgerTakeover}

// Kinds of replay, the kind label of harvest_worker_workflow_replays_total.
const (
	// replayTask: a workflow task delivered to the worker.
	replayTask = "task"
	// replaySpeculative: the next workflow task after eager attempts,
	// replayed at once by the worker that ran them (eager.go).
	replaySpeculative = "speculative"
)

// Results of a workflow task's look-up in the worker's cache, the
// result label of harvest_worker_workflow_cache_total.
const (
	cacheHit  = "hit"
	cacheMiss = "miss"
)

// Results of fetching the history a workflow task does not carry, the
// result label of harvest_worker_history_fetches_total.
const (
	fetchDone   = "fetched"
	fetchFailed = "failed"
)

// otherName is the workflow or activity label of a name this worker has
// not registered: tasks name what workflow code asked for, which the
// worker does not control, so a label takes only the names it knows.
const otherName = "other"

// metrics are a worker's, labelled with its task queue, on the registry
// given in Config; with none they are counted and not registered. Workers
// of one process may share a registry: each one's series are its task
// queue's (two workers of one queue add up).
type metrics struct {
	received, completed, failed, handedBack *prometheus.CounterVec
	// taskFailures counts the workflow tasks reported failing, by
	// workflow and reason.
	taskFailures *prometheus.CounterVec
	running      prometheus.Gauge
	inFlight     *prometheus.GaugeVec
	// newestBuild is 1 for each workflow whose shared tasks the worker
	// takes (builds.go), by workflow.
	newestBuild *prometheus.GaugeVec
	duration    prometheus.ObserverVec

	workflowTasks  *prometheus.CounterVec // workflow, outcome
	replays        *prometheus.CounterVec // workflow, kind
	replayEvents   *prometheus.CounterVec // workflow
	cache          *prometheus.CounterVec // workflow, result
	cacheEvicted   *prometheus.CounterVec // (task_queue only)
	historyFetches *prometheus.CounterVec // workflow, result
	historyFetched *prometheus.CounterVec // workflow
	replaySeconds  prometheus.ObserverVec // workflow
	attempts       *prometheus.CounterVec // activity, outcome
	attemptSeconds prometheus.ObserverVec // activity
	retries        *prometheus.CounterVec // activity
	heartbeats     *prometheus.CounterVec // activity, result
	ledger         *prometheus.CounterVec // activity, result
	replayCheck    *prometheus.CounterVec // workflow, result
}

func newMetrics(reg prometheus.Registerer, taskQueue string) (*metrics, error) {
	q := prometheus.Labels{"task_queue": taskQueue}
	byKind, kinds := []string{"task_queue", "kind"}, []string{wire.TaskWorkflow, wire.TaskActivity}
	var errs []error
	counterBy := func(name, help string, labels ...string) *prometheus.CounterVec {
		vec, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"task_queue"}, labels...)))
		errs = append(errs, err)
		return vec.MustCurryWith(q)
	}
	histogramBy := func(name, help string, buckets []float64, labels ...string) prometheus.ObserverVec {
		vec, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets},
			append([]string{"task_queue"}, labels...)))
		errs = append(errs, err)
		return vec.MustCurryWith(q)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		vec := counterBy(name, help, "kind")
		for _, kind := range kinds {
			vec.WithLabelValues(kind) // every series from the start
		}
		return vec
	}
	// 1 ms to 4.4 min.
	seconds := prometheus.ExponentialBuckets(0.001, 4, 10)
	m := &metrics{
		received: counter("harvest_worker_tasks_received_total", "Tasks the worker received, by kind (workflow, activity)."),
		completed: counter("harvest_worker_tasks_completed_total",
			"Tasks whose workflow task decisions, or activity attempt result, the worker published, by kind."),
		failed: counter("harvest_worker_tasks_failed_total",
			"Tasks whose replay or attempt failed (a failed attempt's failure is reported), or whose result could not be published, by kind."),
		handedBack: counterBy("harvest_worker_tasks_handed_back_total",
			"Tasks handed back unstarted, by kind and reason: unknown (a task of the unrouted subject an older scheduler wrote, for a workflow or an activity not registered on this worker), stopping (the worker was stopping), newer_build (a newer build took the workflow's shared tasks as the task came).",
			"kind", "reason"),
		taskFailures: counterBy("harvest_worker_workflow_task_failures_total",
			"Workflow tasks the worker reported failing to the scheduler, by workflow (other: one not registered here) and reason: nondeterminism, version_unsupported, panic. The execution waits, shown as task_failing, and its task is dispatched again after a backoff.",
			"workflow", "reason"),
		workflowTasks: counterBy("harvest_worker_workflow_tasks_total",
			"Workflow tasks the worker settled, by workflow (other: one not registered here) and outcome: completed, failed, handed_back, dropped.",
			"workflow", "outcome"),
		replays: counterBy("harvest_worker_workflow_replays_total",
			"Workflow tasks run, by workflow and kind: task (a workflow task delivered) or speculative (the next task after eager attempts).",
			"workflow", "kind"),
		replayEvents: counterBy("harvest_worker_workflow_replay_events_total",
			"History events the workflow tasks run consumed, by workflow: the whole history for a task whose execution was not in the worker's cache (it is replayed), only what the last task did not see for one that was.",
			"workflow"),
		cache: counterBy("harvest_worker_workflow_cache_total",
			"Workflow tasks by what the worker's workflow cache held, by workflow and result: hit (the execution's code was kept, parked, and ran on) or miss (it was not, or did not continue the task's history: the history was replayed).",
			"workflow", "result"),
		cacheEvicted: counterBy("harvest_worker_workflow_cache_evictions_total",
			"Executions the worker's workflow cache ended to make room for another (least recently used first, WorkflowCacheSize): their next workflow task replays the history. Executions that closed, or whose task ran elsewhere, are not counted."),
		historyFetches: counterBy("harvest_worker_history_fetches_total",
			"Workflow tasks whose execution the worker did not hold in its cache, so that it fetched the history before the events the task carries (a task carries those since the execution's last task), by workflow and result: fetched, failed (no ingest or scheduler answered, or the store failed; the task is tried again).",
			"workflow", "result"),
		historyFetched: counterBy("harvest_worker_history_fetched_events_total",
			"History events the worker fetched for tasks of executions it did not hold, by workflow.",
			"workflow"),
		replaySeconds: histogramBy("harvest_worker_workflow_replay_duration_seconds",
			"How long one replay of workflow code over its history took to decide, by workflow (eager attempts not included).",
			seconds, "workflow"),
		attempts: counterBy("harvest_worker_activity_attempts_total",
			"Activity attempts the worker ran, eager ones included, by activity and outcome: completed, failed, timed_out (past its deadline or its heartbeat timeout), shutdown (cancelled by a stopping worker).",
			"activity", "outcome"),
		attemptSeconds: histogramBy("harvest_worker_activity_attempt_duration_seconds",
			"How long the activity code of one attempt ran (its reconcile function included), by activity.",
			seconds, "activity"),
		retries: counterBy("harvest_worker_activity_retries_total",
			"Activity attempts run that were retries (attempt 2 or later), by activity.",
			"activity"),
		heartbeats: counterBy("harvest_worker_activity_heartbeats_total",
			"Activity heartbeats the worker published, by activity and result: sent, failed.",
			"activity", "result"),
		ledger: counterBy("harvest_worker_ledger_calls_total",
			"Calls of harvest.Once, by activity and result: hit (the effect's recorded result was reused, the effect did not run), run (the effect ran), takeover (a lapsed run's key was taken over and the effect ran).",
			"activity", "result"),
		replayCheck: counterBy("harvest_worker_replay_check_total",
			"Histories the worker's replay check (WorkerConfig.ReplayCheck) met as it started, by workflow and result: passed (replayed as recorded), refused (did not replay: the worker does not take the workflow), skipped (not replayed: no ingest answered, the history was larger than a NATS message or could not be read, the check ran out of time; a workflow whose sample could not be listed counts one).",
			"workflow", "result"),
	}
	running, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "harvest_worker_activity_attempts_running",
		Help: "Activity attempts running now, eager ones included.",
	}, []string{"task_queue"}))
	errs = append(errs, err)
	m.running = running.With(q)
	inFlight, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "harvest_worker_tasks_in_flight",
		Help: "Tasks the worker holds now, from their arrival to their settling, by kind.",
	}, byKind))
	errs = append(errs, err)
	m.inFlight = inFlight.MustCurryWith(q)
	newest, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "harvest_worker_workflow_newest_build",
		Help: "1 while the worker's build is the newest that registers the workflow on its task queue, and so takes its executions that are not pinned to another build; 0 while a newer build does, and the worker takes only the executions pinned to its own build. Workers of one process that share a registry add up.",
	}, []string{"task_queue", "workflow"}))
	errs = append(errs, err)
	m.newestBuild = newest.MustCurryWith(q)
	m.duration = histogramBy("harvest_worker_task_duration_seconds",
		"How long the worker held a task, from its arrival to its settling (published and acknowledged, or handed back), by kind.",
		seconds, "kind")
	for _, kind := range kinds {
		m.duration.WithLabelValues(kind)
		m.inFlight.WithLabelValues(kind)
		for _, reason := range handBackReasons {
			m.handedBack.WithLabelValues(kind, reason)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("worker metrics: %w", err)
	}
	return m, nil
}

// register registers c on reg, if any, or finds the same collector another
// worker of the process registered there.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// known creates the series of the registered workflows and activities,
// so that they read zero rather than nothing until something happens.
func (m *metrics) known(workflows, activities []string) {
	for _, w := range append(workflows, otherName) {
		for _, o := range outcomes {
			m.workflowTasks.WithLabelValues(w, o.String())
		}
		for _, r := range []string{wire.TaskFailedNondeterminism, wire.TaskFailedVersionUnsupported, wire.TaskFailedPanic} {
			m.taskFailures.WithLabelValues(w, r)
		}
		m.replays.WithLabelValues(w, replayTask)
		m.replays.WithLabelValues(w, replaySpeculative)
		m.replayEvents.WithLabelValues(w)
		m.cache.WithLabelValues(w, cacheHit)
		m.cache.WithLabelValues(w, cacheMiss)
		m.cacheEvicted.WithLabelValues()
		m.historyFetches.WithLabelValues(w, fetchDone)
		m.historyFetches.WithLabelValues(w, fetchFailed)
		m.historyFetched.WithLabelValues(w)
	}
	for _, a := range activities {
		for _, o := range attemptOutcomes {
			m.attempts.WithLabelValues(a, o)
		}
		m.retries.WithLabelValues(a)
		m.heartbeats.WithLabelValues(a, "sent")
		m.heartbeats.WithLabelValues(a, "failed")
		for _, r := range ledgerResults {
			m.ledger.WithLabelValues(a, r)
		}
	}
}

// arrived counts a task of kind received, and held until settled.
func (m *metrics) arrived(kind string) {
	m.received.WithLabelValues(kind).Inc()
	m.inFlight.WithLabelValues(kind).Inc()
}

// settled counts a task of kind held for d and settled as o.
func (m *metrics) settled(kind string, o outcome, d time.Duration) {
	switch o {
	case outcomeCompleted:
		m.completed.WithLabelValues(kind).Inc()
	case outcomeFailed:
		m.failed.WithLabelValues(kind).Inc()
	}
	m.inFlight.WithLabelValues(kind).Dec()
	m.duration.WithLabelValues(kind).Observe(d.Seconds())
}

// attemptOutcome is the outcome label of an attempt that ended with
// result.
func attemptOutcome(result *wire.ActivityResult) string {
	switch {
	case result.Failure == nil:
		return attemptCompleted
	case result.Failure.Type == "StartToCloseTimeout" || result.Failure.Type == "HeartbeatTimeout":
		return attemptTimedOut
	case result.Failure.Type == "WorkerShutdown":
		return attemptShutdown
	default:
		return attemptFailed
	}
}
