package harvest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/tracing"
	"github.com/harvest-engine/harvest/internal/wire"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// Defaults for WorkerConfig's zero values.
const (
	DefaultActivityConcurrency     = 32
	DefaultWorkflowTaskConcurrency = 8
	DefaultTaskAckWait             = 5 * time.Second
	DefaultShutdownGrace           = 30 * time.Second
)

// ErrNotDeclared is returned by Worker.Start when the NATS server holds no
// Harvest streams yet: the deployment's scheduler or ingest declares them
// as it starts. Retry, or start the worker after them.
var ErrNotDeclared = broker.ErrNotDeclared

// ErrRegistration is matched (errors.Is) by the error Worker.Start returns
// when a registration was refused (a bad or duplicate name, a schema that
// does not compile): starting again cannot help. Start's other errors are
// about reaching the deployment's NATS and its streams, and a later Start
// may succeed.
var ErrRegistration = errors.New("registration refused")

// WorkerConfig configures a Worker. Zero values mean the documented
// defaults.
type WorkerConfig struct {
	// NATS is the connection to the deployment's NATS server. Without
	// one, NewWorker connects to the URL in the HARVEST_NATS_URL
	// environment variable (which harvest dev prints, and writes to its
	// state dir's nats.url), and Stop closes that connection; with
	// neither, NewWorker fails. Start binds to the streams and buckets
	// the deployment's scheduler and ingest declared (it fails with an
	// error wrapping ErrNotDeclared when there are none yet), and never
	// changes them.
	NATS *nats.Conn
	// TaskQueue to pull from, default "default".
	TaskQueue string
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
	// global provider, so that this package links the OpenTelemetry API
	// alone (no SDK, exporter or gRPC enters your go.mod) and a worker
	// traces only where its program says so. A program that set a global
	// provider passes otel.GetTracerProvider(). Harvest's own worker
	// binary (cmd/worker, and harvest dev's example worker) builds one
	// from the standard OTEL_EXPORTER_OTLP_* environment and passes it
	// here.
	TracerProvider trace.TracerProvider
	// Logger takes the worker's logs; nil logs to standard error, at
	// info, as text.
	Logger *slog.Logger
}

// EnvNATSURL is the environment variable NewWorker connects to when
// WorkerConfig.NATS is nil.
const EnvNATSURL = "HARVEST_NATS_URL"

func (c WorkerConfig) withDefaults() WorkerConfig {
	c.TaskQueue = cmp.Or(c.TaskQueue, wire.DefaultTaskQueue)
	c.ActivityConcurrency = cmp.Or(c.ActivityConcurrency, DefaultActivityConcurrency)
	c.WorkflowTaskConcurrency = cmp.Or(c.WorkflowTaskConcurrency, DefaultWorkflowTaskConcurrency)
	c.TaskAckWait = cmp.Or(c.TaskAckWait, DefaultTaskAckWait)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	c.WorkflowCacheSize = cmp.Or(c.WorkflowCacheSize, DefaultWorkflowCacheSize)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return c
}

// Validate names the first bad field.
func (c WorkerConfig) Validate() error {
	c = c.withDefaults()
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
	}
	if err := dedup.ValidateName(c.TaskQueue); err != nil {
		return fmt.Errorf("worker config: TaskQueue: %w", err)
	}
	return nil
}

// Worker runs registered workflows and activities from one task queue.
// Register everything before Start; several Workers (in one process or
// many) on the same task queue share its tasks.
type Worker struct {
	cfg WorkerConfig
	log *slog.Logger

	mu         sync.Mutex
	workflows  map[string]workflowFunc
	schemas    map[string]*schema.Schema
	activities map[string]activityFunc
	// activityOptions are the registration options of each activity.
	activityOptions map[string]ActivityOptions
	reconcilers     map[string]reconcileFunc
	regErrs         []error
	started         bool
	stop            func(ctx context.Context) error
	// rt pulls and runs the tasks (internal/workerrt).
	rt *workerrt.Runtime
	// cache keeps executions' workflow code between their tasks.
	cache *workflowCache
	// ownedConn is the connection NewWorker made (HARVEST_NATS_URL),
	// closed by Stop.
	ownedConn *nats.Conn
}

// NewWorker checks cfg and returns a Worker. With no NATS connection in
// cfg it connects to HARVEST_NATS_URL.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	var owned *nats.Conn
	if cfg.NATS == nil {
		if u := os.Getenv(EnvNATSURL); u != "" {
			nc, err := nats.Connect(u, nats.Name("harvest worker"), nats.MaxReconnects(-1))
			if err != nil {
				return nil, fmt.Errorf("worker: connect to %s (%s): %w", EnvNATSURL, redactURL(u), err)
			}
			cfg.NATS, owned = nc, nc
		}
	}
	if err := cfg.Validate(); err != nil {
		if owned != nil {
			owned.Close()
		}
		return nil, err
	}
	cfg = cfg.withDefaults()
	w := newWorker(cfg)
	w.ownedConn = owned
	rt, err := workerrt.New(workerrt.Config{
		NATS: cfg.NATS, TaskQueue: cfg.TaskQueue, ActivityConcurrency: cfg.ActivityConcurrency,
		WorkflowTaskConcurrency: cfg.WorkflowTaskConcurrency, TaskAckWait: cfg.TaskAckWait, ShutdownGrace: cfg.ShutdownGrace,
		DisableEagerActivities: cfg.DisableEagerActivities, Metrics: cfg.Metrics, Log: w.log, Tracing: tracingOf(cfg.TracerProvider),
	}, w.handlers())
	if err != nil {
		if owned != nil {
			owned.Close()
		}
		return nil, err
	}
	w.rt = rt
	return w, nil
}

// newWorker returns a Worker of cfg (with its defaults) without a
// runtime.
func newWorker(cfg WorkerConfig) *Worker {
	return &Worker{
		cfg: cfg, log: cfg.Logger.With("task_queue", cfg.TaskQueue),
		workflows: map[string]workflowFunc{}, schemas: map[string]*schema.Schema{}, activities: map[string]activityFunc{},
		activityOptions: map[string]ActivityOptions{}, reconcilers: map[string]reconcileFunc{},
		cache: newWorkflowCache(cfg.WorkflowCacheSize, cfg.Logger),
	}
}

// handlers are what the worker's runtime runs its tasks with.
func (w *Worker) handlers() workerrt.Handlers {
	return workerrt.Handlers{Workflow: w.workflowTask, HasActivity: w.hasActivity, Activity: w.runAttempt, Failure: attemptFailure}
}

func (w *Worker) register(kind, name string, add func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := dedup.ValidateName(name); err != nil {
		w.regErrs = append(w.regErrs, fmt.Errorf("register %s: %w", kind, err))
		return
	}
	if w.started {
		w.regErrs = append(w.regErrs, fmt.Errorf("register %s %q: worker already started", kind, name))
		return
	}
	add()
}

// WorkflowOption tunes a workflow's registration.
type WorkflowOption func(*workflowOptions)

type workflowOptions struct {
	inputSchema []byte
}

// WithInputSchema declares the JSON Schema the workflow's input must
// match. The worker publishes it when it starts; ingest then refuses a
// fresh start whose input does not match (422 input_invalid, with each
// violation's field path). A keyed replay of a committed start is never
// refused.
func WithInputSchema(jsonSchema []byte) WorkflowOption {
	return func(o *workflowOptions) { o.inputSchema = jsonSchema }
}

// RegisterWorkflow registers fn as the workflow name. Input and output
// travel as JSON. Errors (a bad or duplicate name, a schema that does not
// compile) are reported by Start.
func RegisterWorkflow[In, Out any](w *Worker, name string, fn func(ctx *WorkflowContext, input In) (Out, error), opts ...WorkflowOption) {
	var o workflowOptions
	for _, opt := range opts {
		opt(&o)
	}
	w.register("workflow", name, func() {
		if _, dup := w.workflows[name]; dup {
			w.regErrs = append(w.regErrs, fmt.Errorf("register workflow %q: already registered", name))
			return
		}
		if o.inputSchema != nil {
			sch, err := schema.Compile(name, o.inputSchema)
			if err != nil {
				w.regErrs = append(w.regErrs, fmt.Errorf("register workflow %q: %w", name, err))
				return
			}
			w.schemas[name] = sch
		}
		w.workflows[name] = func(ctx *WorkflowContext, raw json.RawMessage) (any, error) {
			in, err := decodeInput[In](raw)
			if err != nil {
				return nil, err
			}
			return fn(ctx, in)
		}
	})
}

// RegisterActivity registers fn as the activity name, with the options its
// invocations get unless a call overrides them. Input and output travel as
// JSON. Errors (a bad or duplicate name) are reported by Start.
func RegisterActivity[In, Out any](w *Worker, name string, fn func(ctx *ActivityContext, input In) (Out, error), opts ...ActivityOptions) {
	w.register("activity", name, func() {
		if _, dup := w.activities[name]; dup {
			w.regErrs = append(w.regErrs, fmt.Errorf("register activity %q: already registered", name))
			return
		}
		var o ActivityOptions
		for _, over := range opts {
			o = o.merge(over)
		}
		w.activityOptions[name] = o
		w.activities[name] = func(ctx *ActivityContext, raw json.RawMessage) (any, error) {
			in, err := decodeInput[In](raw)
			if err != nil {
				return nil, NonRetryable(err)
			}
			return fn(ctx, in)
		}
	})
}

// RegisterReconcile declares how to find out whether the activity name's
// effect already happened. When an attempt's outcome is unknown (it timed
// out, or its worker vanished), the next attempt calls fn with the same
// idempotency key first; if fn finds the effect, its result is the
// activity's, and the activity function does not run.
func RegisterReconcile[In, Out any](w *Worker, name string, fn func(ctx *ActivityContext, input In) (result Out, found bool, err error)) {
	w.register("reconcile", name, func() {
		w.reconcilers[name] = func(ctx *ActivityContext, raw json.RawMessage) (any, bool, error) {
			in, err := decodeInput[In](raw)
			if err != nil {
				return nil, false, NonRetryable(err)
			}
			return fn(ctx, in)
		}
	})
}

// Start binds the task queue's consumers and starts pulling tasks. An
// error that does not match ErrRegistration leaves the worker as it was:
// Start may be called again.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("worker already started")
	}
	if err := errors.Join(w.regErrs...); err != nil {
		return fmt.Errorf("%w: %w", ErrRegistration, err)
	}
	reg := workerrt.Registration{Schemas: make(map[string][]byte, len(w.schemas))}
	for name, sch := range w.schemas {
		reg.Schemas[name] = sch.Raw()
	}
	for name := range w.workflows {
		reg.Workflows = append(reg.Workflows, name)
	}
	for name := range w.activities {
		reg.Activities = append(reg.Activities, name)
	}
	if err := w.rt.Bind(ctx, reg); err != nil {
		return err
	}
	// A runtime that fails to start undoes what it started (the
	// cancellations' watch included), so the next Start binds again.
	stop, err := w.rt.Start(ctx)
	if err != nil {
		return err
	}
	w.started = true
	w.log.Info("worker started", "workflows", slices.Sorted(maps.Keys(w.workflows)), "activities", slices.Sorted(maps.Keys(w.activities)))
	w.stop = stop
	return nil
}

// Ready says why the worker cannot take tasks now, one reason each, or
// nothing when it can: it is started, its NATS connection is up, and the
// consumers of the names it registered are in place. It asks the server
// nothing, so a readiness probe may call it as often as it likes.
func (w *Worker) Ready(ctx context.Context) []string {
	return w.rt.Ready(ctx)
}

// Stop stops pulling tasks and hands back at once, unacknowledged, those
// not started yet (waiting for an activity slot, or on their way), for
// other workers to run. It lets the tasks running finish within
// ShutdownGrace, or until ctx ends if that is sooner; then it cancels
// them and reports their attempts as WorkerShutdown failures, which the
// scheduler retries after the policy's wait. A worker that made its own
// connection (HARVEST_NATS_URL) closes it, started or not. Safe to call
// twice.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	stop := w.stop
	w.mu.Unlock()
	var err error
	if stop != nil {
		err = stop(ctx)
	}
	// Nothing runs any more: the executions kept in memory end, and the
	// connection the worker made closes.
	w.cache.close()
	if w.ownedConn != nil {
		w.ownedConn.Close()
	}
	return err
}

// redactURL hides a URL's password, for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the URL"
	}
	return u.Redacted()
}

// tracingOf is the runtime's tracing with tp; nil (off) without one.
func tracingOf(tp trace.TracerProvider) *tracing.Tracing {
	if tp == nil {
		return nil
	}
	return tracing.New(tp)
}
