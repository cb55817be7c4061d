package ingest

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are ingest's counters, on the registry given in Config.
type metrics struct {
	starts       *prometheus.CounterVec
	duplicates   *prometheus.CounterVec
	hooksIgnored prometheus.Counter
	lost         prometheus.Counter
	refused      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_starts_total",
			Help: "Start requests answered, by result: started_fresh, deduplicated, existing, accepted (202), refused.",
		}, []string{"result"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harvest_ingest_start_duplicates_total",
			Help: "Duplicate starts caught, by layer: broker (PubAck.Duplicate) or claim (a replay answered from a PostgreSQL claim).",
		}, []string{"layer"}),
	}
	m.hooksIgnored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "harvest_ingest_webhooks_ignored_total",
		Help: "Verified webhook events that no routing rule names.",
	})
	m.lost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "harvest_ingest_lost_commands_total",
		Help: "Retries of a command whose first message left the command stream unapplied, accepted again.",
	})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "harvest_ingest_requests_refused_total",
		Help: "API requests refused before they were read, by reason: unauthenticated (401), forbidden (403), overloaded (503: max_in_flight reached).",
	}, []string{"reason"})
	for _, c := range []prometheus.Collector{m.starts, m.duplicates, m.hooksIgnored, m.lost, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"started_fresh", "deduplicated", "existing", "accepted", "refused"} {
		m.starts.WithLabelValues(r)
	}
	m.duplicates.WithLabelValues("broker")
	m.duplicates.WithLabelValues("claim")
	m.refused.WithLabelValues("unauthenticated")
	m.refused.WithLabelValues("forbidden")
	m.refused.WithLabelValues("overloaded")
	return m, nil
}
