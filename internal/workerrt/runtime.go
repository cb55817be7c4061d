package workerrt

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/pool"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/harvesttype"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/tracing"
	"github.com/harvest-engine/harvest/internal/wire"
)

// UnknownTaskDelay is how long a task for a workflow or activity this
// worker does not know waits before it is offered again (only a task of
// the unrouted subject an older scheduler wrote can be one).
const UnknownTaskDelay = 5 * time.Second

// FailedTaskDelay is how long a workflow task whose replay failed waits
// before it is tried again.
const FailedTaskDelay = 5 * time.Second

// registrationRemoveTimeout bounds the removal of a stopping worker's
// registrations; what is not removed lapses within the registration TTL.
const registrationRemoveTimeout = 5 * time.Second

// WorkflowFunc runs one workflow task of a registered workflow and
// returns its decisions. An error means the task cannot complete (a
// non-determinism, a panic, a corrupt history) and is retried later.
type WorkflowFunc func(task *wire.WorkflowTask) (WorkflowRun, error)

// TaskFailureError is a workflow task's error that retrying the task on
// the same code cannot get past (WorkflowFunc returns it): its replay
// diverged, met a version the code does not support, or the workflow code
// panicked. The runtime reports it to the scheduler (a wft_failed
// command), which shows the execution as failing its task and dispatches
// the task again after a backoff, instead of handing it back for ever.
type TaskFailureError struct {
	Failure wire.WorkflowTaskFailure
	Err     error
}

func (e *TaskFailureError) Error() string { return e.Err.Error() }
func (e *TaskFailureError) Unwrap() error { return e.Err }

// WorkflowRun is what running a workflow task took: its decisions,
// the query states it changed (wire.WorkflowTaskResult.States), whether
// the execution was in the worker's cache (the task ran on from where
// the last one stopped), and how many history events it consumed (only
// those the last task did not see, on a cache hit).
type WorkflowRun struct {
	Decisions []wire.Decision
	// Rejections are the updates the task carried that the code refused;
	// Idle says the task showed the code nothing new and it decided
	// nothing (wire.WorkflowTaskResult).
	Rejections []wire.UpdateRejection
	Idle       bool
	// States are the query states the task changed.
	States []wire.StateValue
	// Waiting is what the code waits for, when it changed (nil when not).
	Waiting *api.Waiting
	// Kept says the execution stays in the worker's cache after the task;
	// Evicted counts the executions the cache ended to keep it.
	Kept    bool
	Evicted int
	Cached  bool
	Events  int
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
	// cfg is the worker's configuration, with its defaults applied.
	cfg harvesttype.WorkerConfig
	h   Handlers
	// log is cfg.Logger, tagged with the task queue.
	log *slog.Logger
	// tracing traces tasks and attempts (tasks.go); nil when
	// cfg.TracerProvider is.
	tracing *tracing.Tracing
	js      jetstream.JetStream
	// top is the deployment's topology, bound by Bind.
	top *broker.Topology
	// cancels cancels the activities of cancelled executions.
	cancels *cancellations
	// slots holds one token per activity attempt running, eager or not,
	// up to ActivityConcurrency; wfSlots one per workflow task running, up
	// to WorkflowTaskConcurrency.
	slots, wfSlots *slotSet
	// consumers are the lanes Start pulls, for Ready; set once Start has
	// bound them.
	consumers atomic.Pointer[[]*lane]
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
	// buildID is what the workflow tasks this worker completes record
	// (cfg.BuildID, or registry.DefaultBuildID); set by Bind.
	buildID string
	// refused are the workflows the replay check refused (Bind): their
	// tasks are not run here, even from the unrouted subject.
	refused map[string]bool
	// workerID is the worker's id, in the workers bucket and in its
	// sticky subject (set by Bind); gates are its shared workflow
	// consumers' build gates, by workflow (set by Start): a workflow task
	// asks for its execution's next task (sticky) only while its gate is
	// open.
	workerID string
	gates    map[string]*buildGate
}

// Registration is what a worker tells the deployment as it starts: the
// input schemas of its workflows (raw JSON Schemas, by workflow name),
// and the names of the workflows and activities it serves, which it
// keeps registered in the workers bucket while it runs.
type Registration struct {
	Schemas    map[string][]byte
	Workflows  []string
	Activities []string
	// Replay holds, by workflow, the function that replays one history of
	// the workflow on a fresh execution that nothing keeps, for the
	// replay check (WorkerConfig.ReplayCheck, replaycheck.go); a workflow
	// without one is not checked.
	Replay map[string]WorkflowFunc
}

// New returns a Runtime for cfg, the configuration the SDK's NewWorker
// checked (Validate), that runs tasks with h. It fails only when
// cfg.Metrics refuses the worker's metrics.
func New(cfg harvesttype.WorkerConfig, h Handlers) (*Runtime, error) {
	cfg = cfg.WithDefaults()
	m, err := newMetrics(cfg.Metrics, cfg.TaskQueue)
	if err != nil {
		return nil, err
	}
	var tr *tracing.Tracing
	if cfg.TracerProvider != nil {
		tr = tracing.New(cfg.TracerProvider)
	}
	return &Runtime{
		cfg: cfg, h: h, log: cfg.Logger.With("task_queue", cfg.TaskQueue), tracing: tr, cancels: newCancellations(),
		slots: newSlotSet(cfg.ActivityConcurrency), wfSlots: newSlotSet(cfg.WorkflowTaskConcurrency), stopping: make(chan struct{}), metrics: m,
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
	top, err := broker.Bind(ctx, js)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	top.Tracing = rt.tracing
	rt.js, rt.top = js, top
	rt.buildID = rt.cfg.BuildID
	if rt.buildID == "" {
		info, _ := debug.ReadBuildInfo()
		rt.buildID = registry.DefaultBuildID(registry.BuildOf(info), reg.Workflows)
	}
	// Before anything is registered: a workflow whose running histories
	// do not replay on this code is left out of reg (replaycheck.go).
	reg, refused := rt.checkReplays(ctx, reg)
	rt.named(reg.Workflows, reg.Activities)
	rt.workerID = dedup.NewID()
	rt.registrar = registry.NewRegistrar(registry.RegistrarConfig{
		JS: js, KV: top.Workers, Worker: rt.workerID, TaskQueue: rt.cfg.TaskQueue, BuildID: rt.buildID,
		Workflows: reg.Workflows, Activities: reg.Activities, ReplayRefused: refused, Log: rt.log, Load: rt.load,
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

// Start binds the consumers of the names the worker registered and
// starts pulling tasks. It returns the function that stops the runtime
// (see harvest.Worker.Stop); it is safe to call twice.
//
// Tasks are routed by name (broker.NameTaskSubject): each workflow and
// activity the worker registers has its durable consumer on the task
// queue, shared by every worker that registers the name, so a task goes
// only to a worker that has its code. Each consumer's window has one
// place of its own and borrows from a broker.Pool of its kind's
// concurrency less one: every name keeps a pull request open (a task of a
// quiet name is taken as soon as it comes), and a busy name takes up to
// the concurrency. The tasks held at once are at most the concurrency
// plus one for each other name; what runs at once is bounded by the slots
// (wfSlots, slots): a task that arrives while they are all taken waits
// for one, held in progress.
func (rt *Runtime) Start(ctx context.Context) (stop func(context.Context) error, err error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rt.keeper = newKeeper(max(rt.cfg.TaskAckWait/3, 100*time.Millisecond), rt.log)
	fail := func(err error) (func(context.Context) error, error) {
		cancel()
		rt.keeper.close()
		rt.cancels.stop()
		return nil, err
	}
	lanes, err := rt.bindConsumers(ctx)
	if err != nil {
		return fail(err)
	}
	handlerOf := map[string]func(context.Context, *heldTask) outcome{
		wire.TaskWorkflow: rt.handleWorkflowTask,
		wire.TaskActivity: rt.handleActivityTask,
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
	for _, l := range lanes {
		fn, kind, win, tc := handlerOf[l.kind], l.kind, l.win, l.consumer
		pulling.Go(func() {
			for {
				// A workflow's shared consumer is pulled only while this
				// build is the newest that registers it (builds.go).
				lctx, stopLane := tc.gated(pullCtx)
				if lctx == nil {
					return
				}
				rt.pullLane(lctx, pullCtx, tc, win, kind, func(m jetstream.Msg) {
					arrived := time.Now()
					rt.metrics.arrived(kind)
					t := rt.keeper.hold(m)
					gate.RLock()
					defer gate.RUnlock()
					if stopped {
						// On its way when Stop began.
						rt.handBack(t, 0, handBackStopping, kind)
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
				}, func(err error) {
					rt.log.Warn("task consumer", "consumer", tc.name, "err", err)
					// Deleted under the worker (or lost with a JetStream store):
					// create it again; Pull asks it by name.
					if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
						tc.missing.Store(true)
						if tc.legacy {
							return // an older scheduler's, never created here
						}
						if _, err := rt.js.CreateOrUpdateConsumer(pullCtx, broker.TaskStream, tc.config); err != nil && pullCtx.Err() == nil {
							rt.log.Warn("task consumer: create again", "consumer", tc.name, "err", err)
							return
						}
						tc.missing.Store(false)
					}
				})
				stopLane()
				if lctx.Err() == nil || pullCtx.Err() != nil {
					return // the worker stops, or the lane failed for good
				}
			}
		})
	}
	gates := gatesOf(lanes)
	rt.gates = gates
	pulling.Go(func() { rt.followBuilds(pullCtx, gates) })
	rt.consumers.Store(&lanes)
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
			// Tasks waiting for a slot are handed back now.
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

// taskConsumer is one durable consumer of the task stream a worker
// pulls.
type taskConsumer struct {
	kind, name string
	config     jetstream.ConsumerConfig
	cons       jetstream.Consumer
	// legacy marks the consumer of the subject tasks had before they were
	// routed by name (broker.TaskSubject), drained when it exists.
	legacy bool
	// missing is set while the consumer is gone from the server (its
	// pull answered that it was deleted) and not created again: the
	// worker is not ready.
	missing atomic.Bool
	// order is the consumer's lane in the order of its kind's priorities
	// (broker.Order); nil for a sticky, pinned or legacy consumer, which
	// is pulled whatever the others hold.
	order *broker.OrderLane
	// workflow names the workflow of a shared workflow consumer, whose
	// gate says whether this build pulls it (builds.go); "" and nil for
	// any other consumer.
	workflow string
	gate     *buildGate
}

// gated returns a context under ctx that ends when tc's gate closes, once
// the gate is open (at once for a consumer without one); nil when ctx
// ends first. stop releases it.
func (tc *taskConsumer) gated(ctx context.Context) (lctx context.Context, stop func()) {
	if tc.gate == nil {
		return ctx, func() {}
	}
	for {
		open, changed := tc.gate.state()
		if !open {
			tc.order.Park() // holds back no lower priority meanwhile
		}
		if open {
			lctx, cancel := context.WithCancel(ctx)
			go func() {
				select {
				case <-changed:
					cancel()
				case <-lctx.Done():
				}
			}()
			return lctx, cancel
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// gatesOf are the gates of lanes' shared workflow consumers, by workflow.
func gatesOf(lanes []*lane) map[string]*buildGate {
	out := map[string]*buildGate{}
	for _, l := range lanes {
		if g := l.consumer.gate; g != nil {
			out[l.consumer.workflow] = g
		}
	}
	return out
}

// pullLane pulls tc's tasks into win until ctx ends, handing each to
// handle; what the server had sent for the open request by then is
// handed back for immediate redelivery: because the worker stops (pullCtx
// ended), or because a newer build takes the workflow's shared tasks.
func (rt *Runtime) pullLane(ctx, pullCtx context.Context, tc *taskConsumer, win *broker.Window, kind string, handle func(jetstream.Msg), onErr func(error)) {
	broker.PullOrdered(ctx, rt.js.Conn(), tc.cons, win, tc.order, handle, func(m jetstream.Msg) {
		reason := handBackStopping
		if pullCtx.Err() == nil {
			reason = handBackNewerBuild
		}
		rt.handBack(newHeldTask(m), 0, reason, kind)
	}, onErr)
}

// lane is one consumer's pull loop and its window, whose pool it shares
// with the other consumers of its kind.
type lane struct {
	kind     string
	consumer *taskConsumer
	win      *broker.Window
}

// consumerInactivity is how long the server keeps a task consumer no
// worker pulls: a name no worker registers any more does not keep its
// consumer for ever. Its tasks stay in the stream (a work queue keeps
// what no consumer acknowledged) and go to the consumer the next worker
// that registers the name creates.
const consumerInactivity = 24 * time.Hour

// stickyInactivity is how long the server keeps a worker's sticky
// consumer once the worker stops pulling it: about when the scheduler
// moves the worker's sticky tasks to every worker, if it has not
// already (scheduler's sticky.go).
const stickyInactivity = 10 * time.Second

// keepsExecutions says whether the worker keeps executions in a cache
// between their workflow tasks, and so takes sticky tasks.
func (rt *Runtime) keepsExecutions() bool { return rt.cfg.WorkflowCacheSize > 0 }

// stickyFor says whether a workflow task of workflow, whose run kept
// its execution in the worker's cache, asks for the execution's next
// task to come here: while this worker's build is the newest of the
// workflow's (its gate open), so that a newer build takes the next task
// of an execution that upgrades.
func (rt *Runtime) stickyFor(workflow string, kept bool) string {
	if !kept || !rt.keepsExecutions() {
		return ""
	}
	if g := rt.gates[workflow]; g != nil {
		if open, _ := g.state(); !open {
			return ""
		}
	}
	return rt.workerID
}

// consumerBinds bounds how many consumers a starting worker creates at
// once.
const consumerBinds = 8

// bindConsumers creates (or updates) the consumer of every name the
// worker registered, finds the task queue's legacy consumers, and returns
// one lane each.
func (rt *Runtime) bindConsumers(ctx context.Context) ([]*lane, error) {
	queue := rt.cfg.TaskQueue
	var want []*taskConsumer
	consumer := func(kind, cname, subject string) *taskConsumer {
		tc := &taskConsumer{kind: kind, name: cname, config: jetstream.ConsumerConfig{
			Durable:           cname,
			FilterSubject:     subject,
			AckPolicy:         jetstream.AckExplicitPolicy,
			AckWait:           rt.cfg.TaskAckWait,
			MaxDeliver:        -1,
			MaxAckPending:     10000,
			InactiveThreshold: consumerInactivity,
		}}
		want = append(want, tc)
		return tc
	}
	// The tasks of each name come on one subject, and so one consumer, a
	// priority (broker.PriorityTaskSubject); a kind's lanes pull them in
	// the order of their priorities (broker.Order).
	orders := map[string]*broker.Order{wire.TaskWorkflow: broker.NewOrder(), wire.TaskActivity: broker.NewOrder()}
	levels := func(kind, name string, gate *buildGate) {
		for p := wire.MaxPriority; p >= wire.MinPriority; p-- {
			tc := consumer(kind, PriorityConsumerName(queue, kind, name, p), broker.PriorityTaskSubject(queue, kind, name, p))
			tc.order = orders[kind].Lane(p)
			if gate != nil {
				tc.workflow, tc.gate = name, gate
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rt.workflows)) {
		gate := newBuildGate()
		levels(wire.TaskWorkflow, name, gate)
		if rt.keepsExecutions() {
			// The tasks of the executions of name this worker keeps in its
			// cache come here first (broker.StickyTaskSubject), pulled
			// under the shared consumer's gate: while this build is the
			// newest of the workflow's, so that an execution that
			// upgrades moves on to a newer build. The server drops the
			// consumer soon after the worker is gone; the scheduler moves
			// a sticky task its worker did not take to every worker.
			sc := consumer(wire.TaskWorkflow, broker.StickyConsumerName(queue, name, rt.workerID), broker.StickyTaskSubject(queue, name, rt.workerID))
			sc.config.InactiveThreshold = stickyInactivity
			sc.workflow, sc.gate = name, gate
		}
		consumer(wire.TaskWorkflow, PinnedConsumerName(queue, name, rt.buildID), broker.PinnedTaskSubject(queue, name, rt.buildID))
	}
	for _, name := range slices.Sorted(maps.Keys(rt.activities)) {
		levels(wire.TaskActivity, name, nil)
	}
	p := pool.New().WithErrors().WithContext(ctx).WithMaxGoroutines(consumerBinds)
	for _, tc := range want {
		p.Go(func(ctx context.Context) error {
			cons, err := rt.js.CreateOrUpdateConsumer(ctx, broker.TaskStream, tc.config)
			if err != nil {
				return fmt.Errorf("bind consumer %s: %w", tc.name, err)
			}
			tc.cons = cons
			return nil
		})
	}
	if err := p.Wait(); err != nil {
		return nil, err
	}
	for _, kind := range []string{wire.TaskWorkflow, wire.TaskActivity} {
		name := ConsumerName(queue, kind)
		cons, err := rt.js.Consumer(ctx, broker.TaskStream, name)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
		case err != nil:
			rt.log.Warn("look up the task queue's consumer of unrouted tasks; not draining it", "consumer", name, "err", err)
		default:
			want = append(want, &taskConsumer{kind: kind, name: name, config: cons.CachedInfo().Config, cons: cons, legacy: true})
		}
	}
	sizes := map[string]int{wire.TaskWorkflow: rt.cfg.WorkflowTaskConcurrency, wire.TaskActivity: rt.cfg.ActivityConcurrency}
	pools := map[string]*broker.Pool{}
	for kind, size := range sizes {
		pools[kind] = broker.NewPool(size - 1)
	}
	lanes := make([]*lane, len(want))
	for i, tc := range want {
		lanes[i] = &lane{kind: tc.kind, consumer: tc, win: pools[tc.kind].Window(sizes[tc.kind])}
	}
	return lanes, nil
}

// ConsumerName is the durable consumer the workers of taskQueue shared
// for its tasks of kind (wire.TaskWorkflow, wire.TaskActivity) before
// tasks were routed by name; workers drain it where it exists.
func ConsumerName(taskQueue, kind string) string {
	return fmt.Sprintf("harvest_worker_%s_%s", taskQueue, kind)
}

// NameConsumerName is the durable consumer the workers that register the
// workflow or activity name on taskQueue share for its tasks:
// harvest_<kind>_<length of the queue>_<queue>_<name>, the length making
// it unambiguous. One longer than JetStream allows (255 bytes) is named by
// a hash of the three instead.
func NameConsumerName(taskQueue, kind, name string) string {
	n := fmt.Sprintf("harvest_%s_%d_%s_%s", kind, len(taskQueue), taskQueue, name)
	if len(n) <= maxConsumerName {
		return n
	}
	sum := sha256.Sum256([]byte(taskQueue + "\x00" + kind + "\x00" + name))
	return fmt.Sprintf("harvest_%s_%x", kind, sum[:16])
}

// PriorityConsumerName is the durable consumer of the tasks of name at
// priority (broker.PriorityTaskSubject): NameConsumerName's at the
// default priority, and _p<priority> after it at any other, hashed as
// NameConsumerName hashes when that is too long.
func PriorityConsumerName(taskQueue, kind, name string, priority int) string {
	if priority == wire.DefaultPriority {
		return NameConsumerName(taskQueue, kind, name)
	}
	n := fmt.Sprintf("harvest_%s_%d_%s_%s_p%d", kind, len(taskQueue), taskQueue, name, priority)
	if len(n) <= maxConsumerName {
		return n
	}
	sum := sha256.Sum256([]byte(taskQueue + "\x00" + kind + "\x00" + name))
	return fmt.Sprintf("harvest_%s_%x_p%d", kind, sum[:16], priority)
}

// maxConsumerName is the longest consumer name JetStream accepts.
const maxConsumerName = 255

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

// load is what the worker's slots hold now, for its registration.
func (rt *Runtime) load() registry.Load {
	wfUsed, wfSize := rt.wfSlots.load()
	used, size := rt.slots.load()
	return registry.Load{
		WorkflowSlots: wfSize, WorkflowSlotsUsed: wfUsed,
		ActivitySlots: size, ActivitySlotsUsed: used,
	}
}

// lanes are the lanes Start pulls; nil before it has bound them.
func (rt *Runtime) lanes() []*lane {
	if p := rt.consumers.Load(); p != nil {
		return *p
	}
	return nil
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
