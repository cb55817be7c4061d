package harvest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/pool"

	"github.com/harvest-engine/harvest/dedup"
	"github.com/harvest-engine/harvest/schema"
	"github.com/harvest-engine/harvest/streams"
	"github.com/harvest-engine/harvest/wire"
)

// Defaults for WorkerConfig's zero values.
const (
	DefaultActivityConcurrency     = 32
	DefaultWorkflowTaskConcurrency = 8
	DefaultTaskAckWait             = 30 * time.Second
	// unknownTaskDelay is how long a task for a workflow or activity this
	// worker does not know waits before it is offered again.
	unknownTaskDelay = 5 * time.Second
)

// WorkerConfig configures a Worker. Zero values mean the documented
// defaults.
type WorkerConfig struct {
	Topology *streams.Topology
	// TaskQueue to pull from, default "default".
	TaskQueue string
	// ActivityConcurrency caps activities run at once, default 32.
	ActivityConcurrency int
	// WorkflowTaskConcurrency caps workflow tasks replayed at once,
	// default 8.
	WorkflowTaskConcurrency int
	// TaskAckWait is how long a task taken by a worker that then vanishes
	// waits before another worker gets it, default 30 s. Running activities
	// keep their task alive meanwhile.
	TaskAckWait time.Duration
	// StopGrace bounds how long Stop waits for in-flight tasks when its
	// context has no deadline, default 30 s.
	StopGrace time.Duration
	// DisableEagerActivities turns eager dispatch off: every activity
	// attempt then goes through the task stream. By default a worker that
	// completes a workflow task scheduling only activities it has, none
	// with a heartbeat timeout, runs their first attempts at once when it
	// has free activity slots, then the next workflow task over their
	// results, and reports all of it in one command.
	DisableEagerActivities bool
	Logger                 *slog.Logger
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.TaskQueue == "" {
		c.TaskQueue = wire.DefaultTaskQueue
	}
	if c.ActivityConcurrency == 0 {
		c.ActivityConcurrency = DefaultActivityConcurrency
	}
	if c.WorkflowTaskConcurrency == 0 {
		c.WorkflowTaskConcurrency = DefaultWorkflowTaskConcurrency
	}
	if c.TaskAckWait == 0 {
		c.TaskAckWait = DefaultTaskAckWait
	}
	if c.StopGrace == 0 {
		c.StopGrace = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first bad field.
func (c WorkerConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Topology == nil:
		return errors.New("worker config: Topology is required")
	case c.ActivityConcurrency < 1:
		return fmt.Errorf("worker config: ActivityConcurrency %d: want at least 1", c.ActivityConcurrency)
	case c.WorkflowTaskConcurrency < 1:
		return fmt.Errorf("worker config: WorkflowTaskConcurrency %d: want at least 1", c.WorkflowTaskConcurrency)
	case c.TaskAckWait < time.Second:
		return fmt.Errorf("worker config: TaskAckWait %s: want at least 1s", c.TaskAckWait)
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
	// cancels cancels the activities of cancelled executions.
	cancels *cancellations
	// slots holds one token per activity attempt running, eager or not,
	// up to ActivityConcurrency.
	slots chan struct{}
}

// NewWorker checks cfg and returns a Worker.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Worker{
		cfg: cfg, log: cfg.Logger.With("task_queue", cfg.TaskQueue),
		workflows: map[string]workflowFunc{}, schemas: map[string]*schema.Schema{}, activities: map[string]activityFunc{},
		activityOptions: map[string]ActivityOptions{}, reconcilers: map[string]reconcileFunc{}, cancels: newCancellations(),
		slots: make(chan struct{}, cfg.ActivityConcurrency),
	}, nil
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

// Start binds the task queue's consumers and starts pulling tasks.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("worker already started")
	}
	if err := errors.Join(w.regErrs...); err != nil {
		return err
	}
	for name, sch := range w.schemas {
		if _, err := w.cfg.Topology.Schemas.Put(ctx, name, sch.Raw()); err != nil {
			return fmt.Errorf("publish input schema of %q: %w", name, err)
		}
	}
	if err := w.cancels.watch(ctx, w.cfg.Topology.Cancelled); err != nil {
		return err
	}
	w.started = true
	js := w.cfg.Topology.JS
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	type loop struct {
		kind string
		conc int
		// take, if set, runs in the consume callback before the task is
		// queued; false drops it.
		take func(context.Context, jetstream.Msg) bool
		fn   func(context.Context, jetstream.Msg)
	}
	loops := []loop{
		{wire.TaskWorkflow, w.cfg.WorkflowTaskConcurrency, nil, w.handleWorkflowTask},
		{wire.TaskActivity, w.cfg.ActivityConcurrency, w.takeActivityTask, w.handleActivityTask},
	}
	// pullCtx ends the pull loops; pulling waits for them.
	pullCtx, stopPulling := context.WithCancel(runCtx)
	var pulling conc.WaitGroup
	stopPull := func() {
		stopPulling()
		pulling.Wait()
	}
	var pools []*pool.Pool
	var (
		gate     sync.RWMutex
		stopping bool
	)
	for _, l := range loops {
		name := fmt.Sprintf("harvest_worker_%s_%s", w.cfg.TaskQueue, l.kind)
		ccfg := jetstream.ConsumerConfig{
			Durable:       name,
			FilterSubject: streams.TaskSubject(w.cfg.TaskQueue, l.kind),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       w.cfg.TaskAckWait,
			MaxDeliver:    -1,
			MaxAckPending: 10000,
		}
		cons, err := js.CreateOrUpdateConsumer(ctx, streams.TaskStream, ccfg)
		if err != nil {
			stopPull()
			cancel()
			w.cancels.stop()
			return fmt.Errorf("bind consumer %s: %w", name, err)
		}
		p := pool.New().WithMaxGoroutines(l.conc)
		fn, take := l.fn, l.take
		pulling.Go(func() {
			streams.Pull(pullCtx, js.Conn(), cons, l.conc, func(m jetstream.Msg) {
				// The pull loop may still be handing over a task when Stop
				// begins: the gate keeps it from handing the pool work once
				// Stop waits on the pool. A task it drops is redelivered
				// after its AckWait.
				gate.RLock()
				defer gate.RUnlock()
				if stopping {
					return
				}
				if take != nil && !take(runCtx, m) {
					return
				}
				p.Go(func() { fn(runCtx, m) })
			}, func(err error) {
				w.log.Warn("task consumer", "consumer", name, "err", err)
				// Deleted under the worker (or lost with a JetStream store):
				// create it again; Pull asks it by name.
				if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
					if _, err := js.CreateOrUpdateConsumer(pullCtx, streams.TaskStream, ccfg); err != nil && pullCtx.Err() == nil {
						w.log.Warn("task consumer: create again", "consumer", name, "err", err)
					}
				}
			})
		})
		pools = append(pools, p)
	}
	w.log.Info("worker started", "workflows", len(w.workflows), "activities", len(w.activities))
	var once sync.Once
	w.stop = func(ctx context.Context) error {
		var err error
		once.Do(func() {
			gate.Lock()
			stopping = true
			gate.Unlock()
			stopPull()
			done := make(chan struct{})
			go func() {
				for _, p := range pools {
					p.Wait()
				}
				close(done)
			}()
			if _, ok := ctx.Deadline(); !ok {
				var c context.CancelFunc
				ctx, c = context.WithTimeout(ctx, w.cfg.StopGrace)
				defer c()
			}
			select {
			case <-done:
			case <-ctx.Done():
				// Out of grace: cancel what still runs; its tasks are
				// not acknowledged, so another worker takes them.
				cancel()
				<-done
				err = fmt.Errorf("stop worker: in-flight tasks handed back: %w", ctx.Err())
			}
			cancel()
			if w.cancels.stop != nil {
				w.cancels.stop()
			}
		})
		return err
	}
	return nil
}

// Stop stops pulling tasks and waits for the ones in flight to finish, up
// to ctx's deadline (or StopGrace); tasks still running then are cancelled
// and handed back unacknowledged. Safe to call twice.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	stop := w.stop
	w.mu.Unlock()
	if stop == nil {
		return nil
	}
	return stop(ctx)
}

func (w *Worker) handleWorkflowTask(ctx context.Context, m jetstream.Msg) {
	var task wire.WorkflowTask
	if err := json.Unmarshal(m.Data(), &task); err != nil {
		w.log.Error("dropping malformed workflow task", "err", err)
		_ = m.Term()
		return
	}
	log := w.log.With("execution_id", task.ExecutionID, "workflow", task.WorkflowName)
	w.mu.Lock()
	fn := w.workflows[task.WorkflowName]
	w.mu.Unlock()
	if fn == nil {
		log.Warn("workflow not registered on this worker")
		_ = m.NakWithDelay(unknownTaskDelay)
		return
	}
	w.mu.Lock()
	opts := w.activityOptions
	w.mu.Unlock()
	// A task delivered or dispatched again may have run its activities
	// eagerly on a worker that then vanished.
	first := task.Redispatch == 0
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
		first = false
	}
	result, err := w.completeWorkflowTask(ctx, m, fn, &task, opts, first)
	if err != nil {
		log.Error("workflow task failed; will retry", "err", err)
		_ = m.NakWithDelay(unknownTaskDelay)
		return
	}
	cmd := &wire.Command{
		CommandID:    dedup.WorkflowTaskCommandID(task.ExecutionID, task.TaskID),
		Kind:         wire.KindWorkflowTaskCompleted,
		WorkflowTask: result,
	}
	// A stopping worker still reports what it did: eager attempts it
	// handed back are retried at once, not after the task's AckWait.
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer pcancel()
	if _, err := w.cfg.Topology.PublishCommand(pctx, task.Shard, cmd); err != nil {
		log.Error("publish workflow task result", "err", err)
		return // not acknowledged: redelivered after TaskAckWait
	}
	if err := m.Ack(); err != nil {
		log.Warn("ack workflow task", "err", err)
	}
}

// takeActivityTask takes an activity task for this worker as it arrives:
// the scheduler owns attempts, so a task is acknowledged once, before it
// waits for a free slot, and an attempt whose worker vanishes is retried
// by the scheduler when its start-to-close timeout passes. A task for an
// activity this worker does not have is left to the others.
func (w *Worker) takeActivityTask(ctx context.Context, m jetstream.Msg) bool {
	var task struct {
		ActivityName string `json:"activity_name"`
	}
	if err := json.Unmarshal(m.Data(), &task); err != nil {
		w.log.Error("dropping malformed activity task", "err", err)
		_ = m.Term()
		return false
	}
	w.mu.Lock()
	_, ok := w.activities[task.ActivityName]
	w.mu.Unlock()
	if !ok {
		w.log.Warn("activity not registered on this worker", "activity", task.ActivityName)
		_ = m.NakWithDelay(unknownTaskDelay)
		return false
	}
	if err := m.DoubleAck(ctx); err != nil {
		w.log.Warn("could not take activity task; leaving it to redelivery", "err", err)
		return false
	}
	return true
}

func (w *Worker) handleActivityTask(ctx context.Context, m jetstream.Msg) {
	var task wire.ActivityTask
	if err := json.Unmarshal(m.Data(), &task); err != nil {
		w.log.Error("dropping malformed activity task", "err", err)
		return
	}
	// Eager attempts share the slots; they never wait for one, so this
	// wait ends when one of them does.
	w.slots <- struct{}{}
	result := w.runAttempt(ctx, &task)
	<-w.slots
	if result == nil {
		return
	}
	cmd := &wire.Command{
		CommandID: dedup.ActivityResultCommandID(task.ExecutionID, task.ActivityID, task.Attempt),
		Kind:      wire.KindActivityResult,
		Activity:  result,
	}
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer pcancel()
	if _, err := w.cfg.Topology.PublishCommand(pctx, task.Shard, cmd); err != nil {
		// The attempt's timeout will retry it.
		w.log.Error("publish activity result", "execution_id", task.ExecutionID, "activity", task.ActivityName, "attempt", task.Attempt, "err", err)
	}
}

// runAttempt runs one activity attempt and says how it ended, or returns
// nil when the attempt is not run: past its deadline, or of a cancelled
// execution.
func (w *Worker) runAttempt(ctx context.Context, task *wire.ActivityTask) *wire.ActivityResult {
	log := w.log.With("execution_id", task.ExecutionID, "activity", task.ActivityName, "attempt", task.Attempt)
	w.mu.Lock()
	fn := w.activities[task.ActivityName]
	w.mu.Unlock()
	if !task.Deadline.IsZero() && time.Now().After(task.Deadline) {
		log.Info("dropping activity task past its deadline: the scheduler has moved on")
		return nil
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	release, live := w.cancels.track(task.ExecutionID, cancel)
	defer release()
	if !live {
		log.Info("dropping activity task of a cancelled execution")
		return nil
	}
	if !task.Deadline.IsZero() {
		var c context.CancelFunc
		actx, c = context.WithDeadline(actx, task.Deadline)
		defer c()
	}
	beat, stopBeats := w.heartbeater(actx, task)
	defer stopBeats()
	var silent atomic.Bool
	if hb := time.Duration(task.HeartbeatTimeoutMS) * time.Millisecond; hb > 0 {
		// The scheduler fails an attempt that stops heartbeating; this
		// watchdog cancels its context at the same point, so the work
		// stops too.
		var wcancel context.CancelFunc
		actx, wcancel = context.WithCancel(actx)
		defer wcancel()
		watchdog := time.AfterFunc(hb, func() { silent.Store(true); wcancel() })
		defer watchdog.Stop()
		send := beat
		beat = func(details json.RawMessage) {
			watchdog.Reset(hb)
			send(details)
		}
	}
	ac := &ActivityContext{Context: actx, details: task.HeartbeatDetails, heartbeat: beat, ledger: w.cfg.Topology.Ledger, info: ActivityInfo{
		ExecutionID: task.ExecutionID, WorkflowName: task.WorkflowName, ActivityName: task.ActivityName,
		ActivityID: task.ActivityID, Attempt: task.Attempt, IdempotencyKey: dedup.ActivityKey(task.IdempotencyKey),
		ScheduledAt: task.ScheduledAt, Deadline: task.Deadline, PreviousOutcomeUnknown: task.PreviousOutcomeUnknown,
	}}
	w.mu.Lock()
	reconcile := w.reconcilers[task.ActivityName]
	w.mu.Unlock()
	var res any
	var err error
	found := false
	if task.PreviousOutcomeUnknown && reconcile != nil {
		// The previous attempt may have had its effect: look before
		// repeating it.
		res, found, err = runReconcile(reconcile, ac, task.Input)
		if found {
			log.Info("reconciled: the effect had happened; not repeating it")
		}
		if err != nil {
			// The effect's fate is still unknown: the next attempt must
			// reconcile too.
			err = &ApplicationError{Type: "ReconcileFailed", Message: err.Error()}
		}
	}
	if !found && err == nil {
		res, err = runActivity(fn, ac, task.Input)
	}
	stopBeats() // no heartbeat after the result
	result := &wire.ActivityResult{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt}
	switch {
	case ctx.Err() != nil:
		// The worker is stopping and out of grace: hand the attempt back
		// as a retryable failure, so the next one starts at once rather
		// than after the timeout.
		log.Info("worker stopping; activity handed back")
		result.Failure = &wire.Failure{Type: "WorkerShutdown", Message: "the worker stopped before the attempt finished"}
	case err != nil && !task.Deadline.IsZero() && !time.Now().Before(task.Deadline):
		// Out of time: the same as the scheduler's start-to-close timeout,
		// whichever reports first.
		result.Failure = &wire.Failure{Type: "StartToCloseTimeout", Message: fmt.Sprintf("attempt %d ran past its deadline: %v", task.Attempt, err)}
	case err != nil && silent.Load():
		result.Failure = &wire.Failure{Type: "HeartbeatTimeout", Message: fmt.Sprintf("no heartbeat within %s: %v", time.Duration(task.HeartbeatTimeoutMS)*time.Millisecond, err)}
	case err != nil:
		result.Failure = failureOf(err)
		var pe *panicError
		if errors.As(err, &pe) {
			result.Failure.Type, result.Failure.Stack = "panic", pe.stack
		}
		log.Warn("activity failed", "err", err)
	default:
		if result.Result, err = json.Marshal(res); err != nil {
			result.Result = nil
			result.Failure = &wire.Failure{Message: fmt.Sprintf("encode activity result: %v", err), Type: "encoding", NonRetryable: true}
		}
	}
	return result
}

// heartbeater returns the function an attempt's Heartbeat calls, and the
// stop that ends its sender. Heartbeat never blocks the activity: it
// leaves the newest details for a sender goroutine, which publishes a
// heartbeat command at most once per third of the heartbeat timeout (or
// per second when none is set), the newest details each time, so the last
// call before a quiet spell still reaches the scheduler.
func (w *Worker) heartbeater(ctx context.Context, task *wire.ActivityTask) (beat func(json.RawMessage), stop func()) {
	interval := time.Second
	if hb := time.Duration(task.HeartbeatTimeoutMS) * time.Millisecond; hb > 0 {
		interval = max(hb/3, 50*time.Millisecond)
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		details json.RawMessage
		fresh   bool
	)
	kick := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var last time.Time
		for seq := 1; ; seq++ {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			}
			if wait := time.Until(last.Add(interval)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			mu.Lock()
			d, ok := details, fresh
			fresh = false
			mu.Unlock()
			if !ok {
				continue
			}
			last = time.Now()
			cmd := &wire.Command{
				CommandID: dedup.HeartbeatCommandID(task.ExecutionID, task.ActivityID, task.Attempt, seq),
				Kind:      wire.KindActivityHeartbeat,
				Heartbeat: &wire.ActivityHeartbeat{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt, Details: d},
			}
			if _, err := w.cfg.Topology.PublishCommand(ctx, task.Shard, cmd); err != nil && ctx.Err() == nil {
				w.log.Warn("publish heartbeat", "execution_id", task.ExecutionID, "activity", task.ActivityName, "err", err)
			}
		}
	}()
	beat = func(d json.RawMessage) {
		mu.Lock()
		details, fresh = d, true
		mu.Unlock()
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	return beat, func() { cancel(); <-done }
}

func runReconcile(fn reconcileFunc, ctx *ActivityContext, input json.RawMessage) (res any, found bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: string(debug.Stack())}
		}
	}()
	return fn(ctx, input)
}

type panicError struct {
	value any
	stack string
}

func (e *panicError) Error() string { return fmt.Sprintf("activity panicked: %v", e.value) }

func runActivity(fn activityFunc, ctx *ActivityContext, input json.RawMessage) (res any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: string(debug.Stack())}
		}
	}()
	return fn(ctx, input)
}
