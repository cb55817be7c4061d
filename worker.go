package harvest

import (
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

	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/harvesttype"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// Defaults for WorkerConfig's zero values (harvesttype holds them).
const (
	DefaultActivityConcurrency     = harvesttype.DefaultActivityConcurrency
	DefaultWorkflowTaskConcurrency = harvesttype.DefaultWorkflowTaskConcurrency
	DefaultTaskAckWait             = harvesttype.DefaultTaskAckWait
	DefaultShutdownGrace           = harvesttype.DefaultShutdownGrace
	DefaultReplayCheckTimeout      = harvesttype.DefaultReplayCheckTimeout
	MaxReplayCheckSample           = harvesttype.MaxReplayCheckSample
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
// defaults; Validate names the first bad field. The type, its fields and
// its methods are package harvesttype's, the SDK's leaf of plain types,
// which the worker runtime (internal/workerrt) takes as it is.
type WorkerConfig = harvesttype.WorkerConfig

// ReplayCheck configures the replay check a worker runs as it starts
// (WorkerConfig.ReplayCheck): a sample of each workflow's running
// histories replayed on its code before it takes the workflow's tasks
// (docs/versioning.md). The type is package harvesttype's.
type ReplayCheck = harvesttype.ReplayCheck

// EnvNATSURL is the environment variable NewWorker connects to when
// WorkerConfig.NATS is nil.
const EnvNATSURL = harvesttype.EnvNATSURL

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
	cfg = cfg.WithDefaults()
	w := newWorker(cfg)
	w.ownedConn = owned
	rt, err := workerrt.New(cfg, w.handlers())
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
	w := &Worker{
		cfg: cfg, log: cfg.Logger.With("task_queue", cfg.TaskQueue),
		workflows: map[string]workflowFunc{}, schemas: map[string]*schema.Schema{}, activities: map[string]activityFunc{},
		activityOptions: map[string]ActivityOptions{}, reconcilers: map[string]reconcileFunc{},
		cache: newWorkflowCache(cfg.WorkflowCacheSize, cfg.Logger),
	}
	w.cache.serves = w.servesWorkflow
	return w
}

// servesWorkflow says whether this worker registers the workflow name and
// pulls taskQueue: a child workflow its code starts there can run here,
// whatever the registrations the scheduler sees say at that moment (a
// worker restarting, its registrations gone for a moment).
func (w *Worker) servesWorkflow(name, taskQueue string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.workflows[name] != nil && taskQueue == w.cfg.TaskQueue
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

// WorkflowOptions tune a workflow's registration. The zero value is the
// defaults.
type WorkflowOptions struct {
	// InputSchema, when set, is the JSON Schema the workflow's input must
	// match. The worker publishes it when it starts; ingest then refuses a
	// fresh start whose input does not match (422 input_invalid, with
	// each violation's field path). A keyed replay of a committed start
	// is never refused.
	InputSchema []byte
}

// merge returns o with the non-zero fields of over applied.
func (o WorkflowOptions) merge(over WorkflowOptions) WorkflowOptions {
	if over.InputSchema != nil {
		o.InputSchema = over.InputSchema
	}
	return o
}

// WorkflowOption is the old name of WorkflowOptions.
//
// Deprecated: use WorkflowOptions.
type WorkflowOption = WorkflowOptions

// WithInputSchema declares the JSON Schema the workflow's input must
// match.
//
// Deprecated: use WorkflowOptions{InputSchema: jsonSchema}.
func WithInputSchema(jsonSchema []byte) WorkflowOptions {
	return WorkflowOptions{InputSchema: jsonSchema}
}

// RegisterWorkflow registers fn as the workflow name, with at most one
// WorkflowOptions (several are merged in order, each one's non-zero
// fields winning). Input and output travel as JSON. Errors (a bad or
// duplicate name, a schema that does not compile) are reported by Start.
func RegisterWorkflow[In, Out any](w *Worker, name string, fn func(ctx *WorkflowContext, input In) (Out, error), opts ...WorkflowOptions) {
	var o WorkflowOptions
	for _, over := range opts {
		o = o.merge(over)
	}
	w.register("workflow", name, func() {
		if _, dup := w.workflows[name]; dup {
			w.regErrs = append(w.regErrs, fmt.Errorf("register workflow %q: already registered", name))
			return
		}
		if o.InputSchema != nil {
			sch, err := schema.Compile(name, o.InputSchema)
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
// invocations get unless a call overrides them: at most one
// ActivityOptions (several are merged in order, each one's non-zero
// fields winning). Input and output travel as JSON. Errors (a bad or
// duplicate name) are reported by Start.
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

// Start binds the task queue's consumers and starts pulling tasks. With
// WorkerConfig.ReplayCheck, it first replays a sample of each workflow's
// running histories on the registered code, and does not take a
// workflow whose histories do not replay (docs/versioning.md). An
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
	reg := workerrt.Registration{Schemas: make(map[string][]byte, len(w.schemas)), Replay: make(map[string]workerrt.WorkflowFunc, len(w.workflows))}
	for name, sch := range w.schemas {
		reg.Schemas[name] = sch.Raw()
	}
	for name, fn := range w.workflows {
		reg.Workflows = append(reg.Workflows, name)
		reg.Replay[name] = checkReplay(fn, w.activityOptions)
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
