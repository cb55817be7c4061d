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

// metrics are a worker's, labelled with its task queue, on the registry
// given in Config; with none they are counted and not registered. Workers
// of one process may share a registry: each one's series are its task
// queue's (two workers of one queue add up).
type metrics struct {
	received, completed, failed, handedBack *prometheus.CounterVec
	running                                 prometheus.Gauge
	duration                                prometheus.ObserverVec
}

func newMetrics(reg prometheus.Registerer, taskQueue string) (*metrics, error) {
	q := prometheus.Labels{"task_queue": taskQueue}
	byKind, kinds := []string{"task_queue", "kind"}, []string{wire.TaskWorkflow, wire.TaskActivity}
	var errs []error
	counter := func(name, help string) *prometheus.CounterVec {
		vec, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, byKind))
		errs = append(errs, err)
		vec = vec.MustCurryWith(q)
		for _, kind := range kinds {
			vec.WithLabelValues(kind) // every series from the start
		}
		return vec
	}
	m := &metrics{
		received: counter("harvest_worker_tasks_received_total", "Tasks the worker received, by kind (workflow, activity)."),
		completed: counter("harvest_worker_tasks_completed_total",
			"Tasks whose workflow task decisions, or activity attempt result, the worker published, by kind."),
		failed: counter("harvest_worker_tasks_failed_total",
			"Tasks whose replay or attempt failed (a failed attempt's failure is reported), or whose result could not be published, by kind."),
		handedBack: counter("harvest_worker_tasks_handed_back_total",
			"Tasks handed back unstarted, by kind: for a workflow or an activity not registered on this worker, or because the worker was stopping."),
	}
	running, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "harvest_worker_activity_attempts_running",
		Help: "Activity attempts running now, eager ones included.",
	}, []string{"task_queue"}))
	errs = append(errs, err)
	m.running = running.With(q)
	duration, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "harvest_worker_task_duration_seconds",
		Help:    "How long the worker held a task, from its arrival to its settling (published and acknowledged, or handed back), by kind.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms to 4.4 min
	}, byKind))
	errs = append(errs, err)
	m.duration = duration.MustCurryWith(q)
	for _, kind := range kinds {
		m.duration.WithLabelValues(kind)
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

// settled counts a task of kind held for d and settled as o.
func (m *metrics) settled(kind string, o outcome, d time.Duration) {
	switch o {
	case outcomeCompleted:
		m.completed.WithLabelValues(kind).Inc()
	case outcomeFailed:
		m.failed.WithLabelValues(kind).Inc()
	case outcomeHandedBack:
		m.handedBack.WithLabelValues(kind).Inc()
	}
	m.duration.WithLabelValues(kind).Observe(d.Seconds())
}
