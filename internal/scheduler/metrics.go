package scheduler

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// metrics are the scheduler's counters, on the registry given in Config.
// Every label takes values from a fixed set (command kinds, timer kinds,
// results), never ids: a value the scheduler does not know is counted
// under "other".
type metrics struct {
	commands     map[string]prometheus.Counter
	deadCommands *prometheus.CounterVec
	deadTimers   prometheus.Counter
	failures     prometheus.Counter
	gaps         prometheus.Counter
	// failing counts the shards of this scheduler that are failing; two
	// gauges report it (failingShards, and its deprecated first name).
	failing       atomic.Int64
	failingShards prometheus.GaugeFunc
	failingOld    prometheus.GaugeFunc
	owned         prometheus.GaugeFunc
	info          prometheus.Gauge

	batchSize     prometheus.Histogram
	applySeconds  prometheus.Histogram
	transactions  *prometheus.CounterVec
	statements    *prometheus.HistogramVec
	leaseAcquired prometheus.Counter
	leaseLost     prometheus.Counter
	timersFired   map[string]prometheus.Counter
	callbacks     *prometheus.CounterVec
	deferred      *prometheus.CounterVec
	released      *prometheus.CounterVec
	// historyLimits counts executions whose histories passed a limit, by
	// kind (historyWarning, historyExceeded).
	historyLimits *prometheus.CounterVec
	// stickyMoved counts sticky workflow tasks moved to every worker.
	stickyMoved prometheus.Counter
	// scheduleFires counts schedules' fires by outcome.
	scheduleFires *prometheus.CounterVec
}

// The values of the kind label of harvest_scheduler_history_limits_total.
const (
	historyWarning  = "warning"
	historyExceeded = "exceeded"
)

// other is the label value of what is not one of a label's known values.
const other = "other"

// timerKinds are the values of the kind label of timers.
var timerKinds = []string{store.TimerStart, store.TimerWorkflow, store.TimerActivityTimeout, store.TimerActivityRetry,
	store.TimerActivityHeartbeat, store.TimerWorkflowTask, store.TimerWorkflowTaskRetry, other}

// What a transaction is for, the purpose label of the transaction metrics.
const (
	txApply  = "apply"
	txTimers = "timers"
)

// Results of a completion callback delivery attempt.
const (
	callbackDelivered = "delivered"
	callbackRetrying  = "retrying"
	callbackFailed    = "failed"
)

// newMetrics registers the scheduler's metrics on reg; owned counts the
// shards it holds, and shards reports its shards' pending commands and
// timers at scrape time.
func newMetrics(reg prometheus.Registerer, owner string, owned func() int, shards prometheus.Collector) (*metrics, error) {
	commands := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "harvest_scheduler_commands_total",
		Help: "Command deliveries the scheduler's shards handled, by kind (start, signal, wft_completed, ...; other for a message that is not a command): applied, set aside as dead, or skipped as applied before.",
	}, []string{"kind"})
	fired := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "harvest_scheduler_timers_fired_total",
		Help: "Durable timers fired, by kind (start, workflow, activity_timeout, activity_retry, activity_heartbeat, workflow_task).",
	}, []string{"kind"})
	m := &metrics{
		deadCommands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_scheduler_dead_commands_total",
			Help: "Commands set aside unapplied (dead-lettered), by error: malformed (not a command) or unappliable (PostgreSQL refuses what it carries).",
		}, []string{"error"}),
		deadTimers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_scheduler_dead_timers_total",
			Help: "Durable timers dropped because firing them fails for a reason retrying will not fix (logged with their execution).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_scheduler_shard_session_failures_total",
			Help: "Shard sessions that ended in an error and were restarted (PostgreSQL or NATS unreachable, for instance).",
		}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_scheduler_delivery_gaps_total",
			Help: "Command deliveries lost in flight (a broken connection): the shard applied again from its oldest unacknowledged command.",
		}),
		owned: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "harvest_scheduler_shards_owned",
			Help: "Shards this scheduler holds the lease of and applies.",
		}, func() float64 { return float64(owned()) }),
		info: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "harvest_scheduler_info",
			Help:        "Always 1; its owner label is the name this scheduler holds shard leases under (shard_leases.owner, and the owner of its log lines).",
			ConstLabels: prometheus.Labels{"owner": owner},
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "harvest_scheduler_apply_batch_commands",
			Help:    "Commands per apply batch: the deliveries a shard applied in one transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10), // 1 to 512
		}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "harvest_scheduler_apply_duration_seconds",
			Help:    "How long a batch of commands took to apply: its transaction, from the first statement to the commit (and the transactions of a batch applied again command by command).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms to 4 s
		}),
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_scheduler_transactions_total",
			Help: "PostgreSQL transactions of the shards, by purpose (apply: a batch of commands; timers: a batch of due timers) and result (committed, rolled_back).",
		}, []string{"purpose", "result"}),
		statements: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "harvest_scheduler_transaction_statements",
			Help:    "SQL statements per shard transaction, by purpose, BEGIN and COMMIT not counted: _sum is the statements sent, _count the transactions.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}, []string{"purpose"}),
		leaseAcquired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_scheduler_lease_acquisitions_total",
			Help: "Shard leases this scheduler took (free, expired, or released by another scheduler).",
		}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_scheduler_lease_losses_total",
			Help: "Shard leases this scheduler lost while applying the shard: not renewed in time, and taken by another scheduler (or fenced by a newer epoch).",
		}),
		callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_scheduler_callbacks_total",
			Help: "Completion callback delivery attempts, by result: delivered, retrying (failed, another attempt is scheduled), failed (failed for good).",
		}, []string{"result"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_scheduler_starts_deferred_total",
			Help: "Starts a start policy held back, by policy (throttle, debounce, batch).",
		}, []string{"policy"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_scheduler_deferred_executions_started_total",
			Help: "Executions begun by groups of deferred starts, by policy (throttle, debounce, batch).",
		}, []string{"policy"}),
		historyLimits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_scheduler_history_limits_total",
			Help: "Executions whose history passed a limit, each once, by kind: warning (its warning threshold of events or bytes; it carries a history_warning), exceeded (its hard limit; it failed with HistoryLimitExceeded).",
		}, []string{"kind"}),
		stickyMoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_scheduler_sticky_tasks_moved_total",
			Help: "Sticky workflow tasks (sent to the worker that holds their execution in its cache) that their worker did not take within 2 s, moved to every worker of their workflow.",
		}),
		scheduleFires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_schedule_fires_total",
			Help: "Schedules' fires, by outcome: started, deduplicated, skipped_overlap, missed_catchup, paused, start_failed (docs/schedules.md).",
		}, []string{"outcome"}),
		commands:    map[string]prometheus.Counter{},
		timersFired: map[string]prometheus.Counter{},
	}
	m.failingShards = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "harvest_scheduler_failing_shards",
		Help: "Shards of this scheduler whose last session failed and that have not applied since.",
	}, func() float64 { return float64(m.failing.Load()) })
	m.failingOld = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "harvest_scheduler_shards_failing",
		Help: "Deprecated: harvest_scheduler_failing_shards, under its first name; it goes in a later release.",
	}, func() float64 { return float64(m.failing.Load()) })
	for _, c := range []prometheus.Collector{commands, m.deadCommands, m.deadTimers, m.failures, m.gaps, m.failingShards, m.failingOld, m.owned, m.info,
		m.batchSize, m.applySeconds, m.transactions, m.statements, m.leaseAcquired, m.leaseLost, fired, m.callbacks, m.deferred, m.released, m.historyLimits, m.stickyMoved, shards} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.info.Set(1)
	// Every series from the start, so that rates and dashboards see zeros
	// rather than nothing.
	// The values of the kind label of commands: the kinds applied, and
	// other.
	for _, k := range append(commandKindNames(), other) {
		m.commands[k] = commands.WithLabelValues(k)
	}
	for _, k := range timerKinds {
		m.timersFired[k] = fired.WithLabelValues(k)
	}
	m.deadCommands.WithLabelValues(deadMalformed)
	m.deadCommands.WithLabelValues(deadUnappliable)
	for _, p := range []string{txApply, txTimers} {
		m.transactions.WithLabelValues(p, "committed")
		m.transactions.WithLabelValues(p, "rolled_back")
		m.statements.WithLabelValues(p)
	}
	for _, r := range []string{callbackDelivered, callbackRetrying, callbackFailed} {
		m.callbacks.WithLabelValues(r)
	}
	for _, p := range policyKinds {
		m.deferred.WithLabelValues(p)
		m.released.WithLabelValues(p)
	}
	m.historyLimits.WithLabelValues(historyWarning)
	m.historyLimits.WithLabelValues(historyExceeded)
	return m, nil
}

// policyKinds are the values of the policy label.
var policyKinds = []string{wire.PolicyThrottle, wire.PolicyDebounce, wire.PolicyBatch}

// policyLabel is kind, or other if it is not a policy kind.
func policyLabel(kind string) string {
	for _, p := range policyKinds {
		if p == kind {
			return p
		}
	}
	return other
}

// deferredStarts counts the starts a committed batch deferred.
func (m *metrics) deferredStarts(w *store.Writes) {
	if len(w.Policies.Members) == 0 {
		return
	}
	kinds := make(map[string]string, len(w.Policies.Groups))
	for _, g := range w.Policies.Groups {
		kinds[g.GroupID] = g.Kind
	}
	for _, mem := range w.Policies.Members {
		m.deferred.WithLabelValues(policyLabel(kinds[mem.GroupID])).Inc()
	}
}

// releasedGroups counts the executions groups of deferred starts began:
// those of groups that are in released (the others were put off).
func (m *metrics) releasedGroups(groups []*store.DeferredGroup, released []string) {
	for _, g := range groups {
		if slices.Contains(released, g.GroupID) {
			m.released.WithLabelValues(policyLabel(g.Kind)).Inc()
		}
	}
}

// scheduleFired counts the outcomes of schedules' fires a committed
// batch decided.
func (m *metrics) scheduleFired(w *store.Writes) {
	for _, o := range w.Schedules.Counted {
		m.scheduleFires.WithLabelValues(o).Inc()
	}
}

// historyCrossed counts the executions whose histories a committed batch
// took past a limit.
func (m *metrics) historyCrossed(w *store.Writes) {
	if n := w.HistoryCrossings.Warned; n > 0 {
		m.historyLimits.WithLabelValues(historyWarning).Add(float64(n))
	}
	if n := w.HistoryCrossings.Exceeded; n > 0 {
		m.historyLimits.WithLabelValues(historyExceeded).Add(float64(n))
	}
	if w.StickyMoved > 0 {
		m.stickyMoved.Add(float64(w.StickyMoved))
	}
}

func (m *metrics) dead(ds []store.DeadCommand) {
	for _, d := range ds {
		m.deadCommands.WithLabelValues(d.Error).Inc()
	}
}

// handled counts a batch of command deliveries, by kind.
func (m *metrics) handled(cmds []seqCommand) {
	for _, c := range cmds {
		counter, ok := m.commands[c.cmd.Kind]
		if !ok {
			counter = m.commands[other]
		}
		counter.Inc()
	}
}

// applied records a batch of n deliveries applied in d.
func (m *metrics) applied(n int, d time.Duration) {
	m.batchSize.Observe(float64(n))
	m.applySeconds.Observe(d.Seconds())
}

// fired counts timers fired.
func (m *metrics) fired(timers []store.Timer) {
	for _, tm := range timers {
		counter, ok := m.timersFired[tm.Kind]
		if !ok {
			counter = m.timersFired[other]
		}
		counter.Inc()
	}
}

// transaction records a shard transaction for purpose that sent
// statements and committed, or not.
func (m *metrics) transaction(purpose string, statements int, committed bool) {
	result := "committed"
	if !committed {
		result = "rolled_back"
	}
	m.transactions.WithLabelValues(purpose, result).Inc()
	m.statements.WithLabelValues(purpose).Observe(float64(statements))
}
