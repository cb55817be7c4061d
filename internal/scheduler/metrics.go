package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/internal/store"
)

// metrics are the scheduler's counters, on the registry given in Config.
type metrics struct {
	applied      prometheus.Counter
	deadCommands *prometheus.CounterVec
	deadTimers   prometheus.Counter
	failures     prometheus.Counter
	gaps         prometheus.Counter
	failing      prometheus.Gauge
	owned        prometheus.GaugeFunc
}

// newMetrics registers the scheduler's metrics on reg; owned counts the
// shards it holds.
func newMetrics(reg prometheus.Registerer, owned func() int) (*metrics, error) {
	m := &metrics{
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harvest_scheduler_commands_total",
			Help: "Command deliveries the scheduler's shards handled: applied, set aside as dead, or skipped as applied before.",
		}),
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
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "harvest_scheduler_shards_failing",
			Help: "Shards of this scheduler whose last session failed and that have not applied since.",
		}),
		owned: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "harvest_scheduler_shards_owned",
			Help: "Shards this scheduler holds the lease of and applies.",
		}, func() float64 { return float64(owned()) }),
	}
	for _, c := range []prometheus.Collector{m.applied, m.deadCommands, m.deadTimers, m.failures, m.gaps, m.failing, m.owned} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.deadCommands.WithLabelValues(deadMalformed)
	m.deadCommands.WithLabelValues(deadUnappliable)
	return m, nil
}

func (m *metrics) dead(ds []store.DeadCommand) {
	for _, d := range ds {
		m.deadCommands.WithLabelValues(d.Error).Inc()
	}
}
