package workerrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sourcegraph/conc"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/streams"
	"github.com/harvest-engine/harvest/internal/tracing"
	"github.com/harvest-engine/harvest/internal/wire"
)

// UnknownTaskDelay is how long a task for a workflow or activity this
// worker does not know waits before it is offered again.
const UnknownTaskDelay = 5 * time.Second

// registrationRemoveTimeout bounds the removal of a stopping worker's
// registrations; what is not removed lapses within the registration TTL.
const registrationRemoveTimeout = 5 * time.Second

// Config is a worker's configuration, with the SDK's defaults applied and
// checked.
type Config struct {
	// NATS is the connection to the deployment's NATS server.
	NATS                    *nats.Conn
	TaskQueue               string
	ActivityConcurrency     int
	WorkflowTaskConcurrency int
	TaskAckWait             time.Duration
	ShutdownGrace           time.Duration
	DisableEagerActivities  bool
	// Metrics is the registry the worker's metrics go to (metrics.go);
	// nil registers them nowhere.
	Metrics prometheus.Registerer
	// Log is the worker's logger, tagged with its task queue.
	Log *slog.Logger
	// Tracing traces tasks and attempts (tasks.go); nil is off.
	Tracing *tracing.Tracing
}

// WorkflowFunc runs one workflow task of a registered workflow and
// returns its decisions. An error means the task cannot complete (a
// non-determinism, a panic, a corrupt history) and is retried later.
type WorkflowFunc func(task *wire.WorkflowTask) (WorkflowRun, error)

// WorkflowRun is what running a workflow task took: its decisions,
// whether the execution was in the worker's cache (the task ran on from
// where the last one stopped), and how many history events it consumed
// (only those the last task did not see, on a cache hit).
type WorkflowRun struct {
	Decisions []wire.Decision
	Cached    bool
	Events    int
}

// Attempt is what the user's code for one activity attempt needs from the
// runtime.
type Attempt struct {
	Task *wire.ActivityTask
	// Heartbeat hands the runtime the attempt's newest heartbeat details;
	// it never blocks.
	Heartbeat func(details json.RawMessage)
	// Ledger is the effect ledger's bucket.
	Ledger jetstream.KeyValue
	// LedgerUsed counts a call of harvest.Once by its result (LedgerHit,
	// LedgerRun, LedgerTakeover) in the worker's metrics.
	LedgerUsed func(result string)
	// Log is tagged with the attempt's execution_id, workflow, activity,
	// activity_id and attempt, and the command_id its result goes under
	// (internal/logattr).
	Log *slog.Logger
}

// Handlers are what the SDK hands the runtime: its registrations, seen
// only through these functions. The registrations must not change once
// Start is called.
type Handlers struct {
	// Workflow returns the function that replays the named workflow's
	// tasks, and false when this worker does not have it.
	Workflow func(name string) (WorkflowFunc, bool)
	// HasActivity says whether this worker has the named activity.
	HasActivity func(name string) bool
	// Activity runs the user's code for one attempt of a registered
	// activity, reconciling first when the task asks for it, under ctx,
	// which ends at the attempt's deadline, at its heartbeat timeout, when
	// its execution is cancelled, or when the worker runs out of shutdown
	// grace. It returns the result to encode as JSON, or the error the
	// attempt failed with.
	Activity func(ctx context.Context, a *Attempt) (result any, err error)
	// Failure is the wire form of an error Activity returned.
	Failure func(err error) *wire.Failure
}

// Runtime pulls a task queue's tasks and runs them with the SDK's
// Handlers. Bind it, then Start it, once each.
type Runtime struct {
	cfg Config
	h   Handlers
	log *slog.Logger
	js  jetstream.JetStream
	// top is the deployment's topology, bound by Bind.
	top *streams.Topology
	// cancels cancels the activities of cancelled executions.
	cancels *cancellations
	// slots holds one token per activity attempt running, eager or not,
	// up to ActivityConcurrency.
	slots chan struct{}
	// keeper keeps the tasks the worker holds in progress; set by Start.
	keeper *keeper
	// stopping is closed when Stop begins: tasks waiting for a slot are
	// handed back, and workflow tasks run nothing eagerly.
	stopping chan struct{}
	metrics  *metrics
	// registrar keeps the worker's names in the workers bucket; set by
	// Bind, started by Start.
	registrar *registry.Registrar
	// unknown holds the workflows and activities ("kind/name") whose
	// tasks this worker has handed back for lack of them (logUnknown).
	unknown sync.Map
	// workflows and activities are the names registered (Bind): the
	// values the metrics' workflow and activity labels take.
	workflows, activities map[string]bool
}

// Registration is what a worker tells the deployment as it starts: the
// input schemas of its workflows (raw JSON Schemas, by workflow name),
// and the names of the workflows and activities it serves, which it
// keeps registered in the workers bucket while it runs.
type Registration struct {
	Schemas    map[string][]byte
	Workflows  []string
	Activities []string
}

// New returns a Runtime for cfg that runs tasks with h. It fails only
// when cfg.Metrics refuses the worker's metrics.
func New(cfg Config, h Handlers) (*Runtime, error) {
	m, err := newMetrics(cfg.Metrics, cfg.TaskQueue)
	if err != nil {
		return nil, err
	}
	return &Runtime{
		cfg: cfg, h: h, log: cfg.Log, cancels: newCancellations(),
		slots: make(chan struct{}, cfg.ActivityConcurrency), stopping: make(chan struct{}), metrics: m,
	}, nil
}

// Bind binds the streams and buckets the deployment declared, publishes
// reg's schemas and starts following the cancelled executions. Start
// registers reg's workflows and activities.
func (rt *Runtime) Bind(ctx context.Context, reg Registration) error {
	js, err := jetstream.New(rt.cfg.NATS)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	top, err := streams.Bind(ctx, js)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	top.Tracing = rt.cfg.Tracing
	rt.js, rt.top = js, top
	rt.named(reg.Workflows, reg.Activities)
	rt.registrar = registry.NewRegistrar(registry.RegistrarConfig{
		JS: js, KV: top.Workers, Worker: dedup.NewID(), TaskQueue: rt.cfg.TaskQueue,
		Workflows: reg.Workflows, Activities: reg.Activities, Log: rt.log,
	})
	for name, raw := range reg.Schemas {
		if _, err := rt.top.Schemas.Put(ctx, name, raw); err != nil {
			return fmt.Errorf("publish input schema of %q: %w", name, err)
		}
	}
	return rt.cancels.watch(ctx, rt.top.Cancelled)
}

// named records the workflows and activities the worker has: the metrics
// label by these names only, and count any other a task names as
// "other".
func (rt *Runtime) named(workflows, activities []string) {
	rt.workflows, rt.activities = map[string]bool{}, map[string]bool{}
	for _, w := range workflows {
		rt.workflows[w] = true
	}
	for _, a := range activities {
		rt.activities[a] = true
	}
	rt.metrics.known(workflows, activities)
}

// Start binds the task queue's consumers and starts pulling tasks. It
// returns the function that stops the runtime (see harvest.Worker.Stop);
// it is safe to call twice.
func (rt *Runtime) Start(ctx context.Context) (stop func(context.Context) error, err error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rt.keeper = newKeeper(max(rt.cfg.TaskAckWait/3, 100*time.Millisecond), rt.log)
	loops := []struct {
		kind string
		conc int
		fn   func(context.Context, *heldTask) outcome
	}{
		{wire.TaskWorkflow, rt.cfg.WorkflowTaskConcurrency, rt.handleWorkflowTask},
		{wire.TaskActivity, rt.cfg.ActivityConcurrency, rt.handleActivityTask},
	}
	// pullCtx ends the pull loops; pulling waits for them.
	pullCtx, stopPulling := context.WithCancel(runCtx)
	var pulling conc.WaitGroup
	stopPull := func() {
		stopPulling()
		pulling.Wait()
	}
	// handlers run the tasks; gate keeps a pull loop from starting one
	// once Stop waits for them.
	var (
		handlers conc.WaitGroup
		gate     sync.RWMutex
		stopped  bool
	)
	for _, l := range loops {
		name := ConsumerName(rt.cfg.TaskQueue, l.kind)
		ccfg := jetstream.ConsumerConfig{
			Durable:       name,
			FilterSubject: streams.TaskSubject(rt.cfg.TaskQueue, l.kind),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       rt.cfg.TaskAckWait,
			MaxDeliver:    -1,
			MaxAckPending: 10000,
		}
		cons, err := rt.js.CreateOrUpdateConsumer(ctx, streams.TaskStream, ccfg)
		if err != nil {
			stopPull()
			cancel()
			rt.keeper.close()
			rt.cancels.stop()
			return nil, fmt.Errorf("bind consumer %s: %w", name, err)
		}
		// The window asks the server for no more tasks than there are
		// handlers for: every task this worker receives is kept in
		// progress from the moment it arrives.
		win := streams.NewWindow(l.conc)
		fn, kind := l.fn, l.kind
		pulling.Go(func() {
			streams.PullWindow(pullCtx, rt.js.Conn(), cons, win, func(m jetstream.Msg) {
				arrived := time.Now()
				rt.metrics.arrived(kind)
				t := rt.keeper.hold(m)
				gate.RLock()
				defer gate.RUnlock()
				if stopped {
					// On its way when Stop began.
					rt.handBack(t, 0)
					win.Release()
					rt.metrics.settled(kind, outcomeHandedBack, time.Since(arrived))
					return
				}
				handlers.Go(func() {
					defer win.Release()
					defer rt.keeper.drop(t)
					o := fn(runCtx, t)
					rt.metrics.settled(kind, o, time.Since(arrived))
				})
			}, func(m jetstream.Msg) {
				// Sent for the open request before the server saw the
				// worker stop pulling.
				rt.handBack(newHeldTask(m), 0)
			}, func(err error) {
				rt.log.Warn("task consumer", "consumer", name, "err", err)
				// Deleted under the worker (or lost with a JetStream store):
				// create it again; Pull asks it by name.
				if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
					if _, err := rt.js.CreateOrUpdateConsumer(pullCtx, streams.TaskStream, ccfg); err != nil && pullCtx.Err() == nil {
						rt.log.Warn("task consumer: create again", "consumer", name, "err", err)
					}
				}
			})
		})
	}
	// Registered once its consumers are in place; a registration that
	// fails is logged and retried, and never fails the worker.
	rt.registrar.Start(runCtx)
	var once sync.Once
	return func(ctx context.Context) error {
		var err error
		once.Do(func() {
			// Starts of what only this worker serves are refused from now
			// on (or wait for another worker, when declared).
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), registrationRemoveTimeout)
			rerr := rt.registrar.Stop(rctx)
			rcancel()
			if rerr != nil {
				rt.log.Warn("remove worker registration; it lapses within its TTL", "err", rerr)
			}
			gate.Lock()
			stopped = true
			gate.Unlock()
			// Tasks waiting for an activity slot are handed back now.
			close(rt.stopping)
			stopPull()
			done := make(chan struct{})
			go func() {
				handlers.Wait()
				close(done)
			}()
			grace := time.NewTimer(rt.cfg.ShutdownGrace)
			defer grace.Stop()
			select {
			case <-done:
			case <-grace.C:
				err = fmt.Errorf("stop worker: shutdown grace of %s ran out; running tasks handed back", rt.cfg.ShutdownGrace)
			case <-ctx.Done():
				err = fmt.Errorf("stop worker: running tasks handed back: %w", ctx.Err())
			}
			if err != nil {
				// Out of grace: cancel what still runs; its attempts are
				// reported as WorkerShutdown, so the next ones start at
				// once.
				cancel()
				<-done
			}
			cancel()
			rt.keeper.close()
			if rt.cancels.stop != nil {
				rt.cancels.stop()
			}
		})
		return err
	}, nil
}

// ConsumerName is the durable consumer the workers of taskQueue share
// for its tasks of kind (wire.TaskWorkflow, wire.TaskActivity).
func ConsumerName(taskQueue, kind string) string {
	return fmt.Sprintf("harvest_worker_%s_%s", taskQueue, kind)
}

// workflowLabel is the workflow label of name: name if it is registered
// here, else "other".
func (rt *Runtime) workflowLabel(name string) string {
	if rt.workflows[name] {
		return name
	}
	return otherName
}

// activityLabel is the activity label of name: name if it is registered
// here, else "other".
func (rt *Runtime) activityLabel(name string) string {
	if rt.activities[name] {
		return name
	}
	return otherName
}

// isStopping says whether Stop has begun.
func (rt *Runtime) isStopping() bool {
	select {
	case <-rt.stopping:
		return true
	default:
		return false
	}
}
