package harvesttype

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest/internal/dedup"
)

// Defaults for WorkerConfig's zero values.
const (
	// DefaultTaskQueue is the task queue of a worker, a start and an
	// activity that name none. It is a persisted name: the same string
	// as the deployment's own default (internal/wire.DefaultTaskQueue,
	// which a test of this package holds equal).
	DefaultTaskQueue               = "default"
	DefaultActivityConcurrency     = 32
	DefaultWorkflowTaskConcurrency = 8
	DefaultTaskAckWait             = 5 * time.Second
	DefaultShutdownGrace           = 30 * time.Second
	// DefaultWorkflowCacheSize is how many executions a worker keeps in
	// memory between their workflow tasks, by default.
	DefaultWorkflowCacheSize = 1000
	// DefaultReplayCheckTimeout bounds a worker's replay check
	// (ReplayCheck.Timeout), by default.
	DefaultReplayCheckTimeout = 30 * time.Second
	// MaxReplayCheckSample is the largest ReplayCheck.Sample: the same
	// bound as the deployment's (internal/wire.MaxReplaySample, which a
	// test of this package holds equal).
	MaxReplayCheckSample = 1000
)

// EnvNATSURL is the environment variable harvest.NewWorker connects to
// when WorkerConfig.NATS is nil.
const EnvNATSURL = "HARVEST_NATS_URL"

// WorkerConfig configures a Worker (harvest.WorkerConfig is this type).
// Zero values mean the documented defaults.
type WorkerConfig struct {
	// NATS is the connection to the deployment's NATS server. Without
	// one, NewWorker connects to the URL in the HARVEST_NATS_URL
	// environment variable (which harvest dev prints, and writes to its
	// state dir's nats.url), and Stop closes that connection; with
	// neither, NewWorker fails. Start binds to the streams and buckets
	// the deployment's scheduler and ingest declared (it fails with an
	// error wrapping harvest.ErrNotDeclared when there are none yet), and
	// never changes them.
	NATS *nats.Conn
	// TaskQueue to pull from, default "default".
	TaskQueue string
	// BuildID names this worker's code: every workflow task the worker
	// completes records it (in its WorkflowTaskCompleted event), and the
	// workers route shows it. Empty means the default: the binary's
	// module version and VCS revision (as the workers route's build) and
	// a hash of the workflow names it registers, so that two binaries
	// with other code or other workflows differ. 1 to 128 bytes of
	// letters, digits and '.', '_', '-', '+', '~'.
	BuildID string
	// ActivityConcurrency caps activities run at once, default 32.
	ActivityConcurrency int
	// WorkflowTaskConcurrency caps workflow tasks replayed at once,
	// default 8.
	WorkflowTaskConcurrency int
	// TaskAckWait bounds how long a task held by a worker that vanishes
	// waits before it is delivered again, default 5 s. A worker tells the
	// server that each task it holds is in progress every third of it,
	// from the moment the task arrives until its result is published and
	// it is acknowledged, so a live worker keeps its tasks however long
	// they run, and a vanished worker's are delivered again within
	// TaskAckWait of its last acknowledgement. The task queue's consumers
	// are shared: give every worker of a queue the same value (the last
	// to start sets it).
	TaskAckWait time.Duration
	// ShutdownGrace bounds how long Stop lets running tasks finish,
	// default 30 s; a context given to Stop that ends sooner shortens it.
	ShutdownGrace time.Duration
	// WorkflowCacheSize is how many executions the worker keeps in
	// memory between their workflow tasks, default 1000 (negative: none).
	// A task of a cached execution runs on from where the last one
	// stopped; any other replays the execution's history first. Each
	// execution kept holds its workflow goroutines, parked.
	WorkflowCacheSize int
	// DisableEagerActivities turns eager dispatch off: every activity
	// attempt then goes through the task stream. By default a worker that
	// completes a workflow task scheduling only activities it has, none
	// with a heartbeat timeout, runs their first attempts at once when it
	// has free activity slots, then the next workflow task over their
	// results, and reports all of it in one command.
	DisableEagerActivities bool
	// Metrics, when set, is the Prometheus registry the worker's metrics
	// go to (harvest_worker_*, docs/metrics.md), labelled with its task
	// queue: the tasks it received, completed, failed and handed back by
	// kind (workflow, activity), how long it held them and how many it
	// holds; its workflow tasks, replays and activity attempts by workflow
	// or activity and outcome, with their durations; retries, heartbeats
	// and calls of Once. Workflow and activity labels take the names
	// registered on the worker, and "other" for any other name a task
	// carries. Workers of one process may share a registry.
	Metrics prometheus.Registerer
	// TracerProvider, when set, traces the worker's workflow tasks and
	// activity attempts with OpenTelemetry, each span a child of the
	// trace context its task carries (the scheduler's apply of the
	// command that led to it; ultimately the request that started the
	// execution), and carries each span's context in the commands the
	// worker publishes. An activity's ctx holds its span, so calls the
	// activity makes with an instrumented client join the trace.
	//
	// Nil traces nothing, as a nil Metrics measures nothing: the worker
	// neither reads the OTEL_* environment nor falls back on OpenTelemetry's
	// global provider, so that the SDK links the OpenTelemetry API alone
	// (no SDK, exporter or gRPC enters your go.mod) and a worker traces
	// only where its program says so. A program that set a global
	// provider passes otel.GetTracerProvider(). Harvest's own worker
	// binary (cmd/worker, and harvest dev's example worker) builds one
	// from the standard OTEL_EXPORTER_OTLP_* environment and passes it
	// here.
	TracerProvider trace.TracerProvider
	// Logger takes the worker's logs; nil logs to standard error, at
	// info, as text.
	Logger *slog.Logger
	// ReplayCheck, when its Sample is set, makes Start replay a sample of
	// the running executions' histories of each workflow the worker
	// registers on this code before it takes the workflow's tasks; a
	// workflow any of whose histories does not replay is not taken by
	// this worker, so that its executions stay with the workers that run
	// them (docs/versioning.md). The zero value checks nothing.
	ReplayCheck ReplayCheck
}

// ReplayCheck configures the replay check a worker runs as it starts
// (WorkerConfig.ReplayCheck). For each workflow the worker registers, it
// asks the deployment (ingest, over NATS) for the newest running
// executions of the workflow on its task queue, up to Sample, and
// replays each one's history on the registered code, as the execution's
// next workflow task would. A workflow one of whose histories diverges
// (a change outside GetVersion), meets a version the code does not
// support, or makes the workflow code panic is refused: the worker does
// not register it nor take its tasks, logs why at level error, and shows
// it on the workers route (replay_refused). A history that cannot be
// fetched (no ingest answers, it is larger than a NATS message, the
// check ran out of time) is skipped: a workflow with nothing against it
// is taken.
type ReplayCheck struct {
	// Sample is how many running executions of each workflow are
	// replayed, at most MaxReplayCheckSample; 0 (the default) turns the
	// check off.
	Sample int
	// Timeout bounds the whole check, default 30 s, so that a start
	// cannot hang on it: what is not checked by then is skipped.
	Timeout time.Duration
}

// WithDefaults returns c with its zero values replaced by the defaults:
// the configuration a Worker runs with.
func (c WorkerConfig) WithDefaults() WorkerConfig {
	c.TaskQueue = cmp.Or(c.TaskQueue, DefaultTaskQueue)
	c.ActivityConcurrency = cmp.Or(c.ActivityConcurrency, DefaultActivityConcurrency)
	c.WorkflowTaskConcurrency = cmp.Or(c.WorkflowTaskConcurrency, DefaultWorkflowTaskConcurrency)
	c.TaskAckWait = cmp.Or(c.TaskAckWait, DefaultTaskAckWait)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	c.WorkflowCacheSize = cmp.Or(c.WorkflowCacheSize, DefaultWorkflowCacheSize)
	c.ReplayCheck.Timeout = cmp.Or(c.ReplayCheck.Timeout, DefaultReplayCheckTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return c
}

// Validate names the first bad field.
func (c WorkerConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.NATS == nil:
		return fmt.Errorf("worker config: NATS is required: give a connection, or set %s to the deployment's NATS URL", EnvNATSURL)
	case c.ActivityConcurrency < 1:
		return fmt.Errorf("worker config: ActivityConcurrency %d: want at least 1", c.ActivityConcurrency)
	case c.WorkflowTaskConcurrency < 1:
		return fmt.Errorf("worker config: WorkflowTaskConcurrency %d: want at least 1", c.WorkflowTaskConcurrency)
	case c.TaskAckWait < time.Second:
		return fmt.Errorf("worker config: TaskAckWait %s: want at least 1s", c.TaskAckWait)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("worker config: ShutdownGrace %s: want a positive duration", c.ShutdownGrace)
	case c.ReplayCheck.Sample < 0 || c.ReplayCheck.Sample > MaxReplayCheckSample:
		return fmt.Errorf("worker config: ReplayCheck.Sample %d: want 0 (off) to %d", c.ReplayCheck.Sample, MaxReplayCheckSample)
	case c.ReplayCheck.Timeout < 0:
		return fmt.Errorf("worker config: ReplayCheck.Timeout %s: want a positive duration", c.ReplayCheck.Timeout)
	}
	// The deployment's own rule for a task queue name, so that a worker
	// refuses exactly the names ingest and the scheduler refuse.
	if err := dedup.ValidateName(c.TaskQueue); err != nil {
		return fmt.Errorf("worker config: TaskQueue: %w", err)
	}
	if c.BuildID != "" {
		if err := dedup.ValidateBuildID(c.BuildID); err != nil {
			return fmt.Errorf("worker config: BuildID: %w", err)
		}
	}
	return nil
}
