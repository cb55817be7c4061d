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

	"github.com/harvest-engine/harvest/dedup"
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/streams"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Defaults for WorkerConfig's zero values.
const (
	DefaultActivityConcurrency     = 32
	DefaultWorkflowTaskConcurrency = 8
	DefaultTaskAckWait             = 5 * time.Second
	DefaultShutdownGrace           = 30 * time.Second
	// unknownTaskDelay is how long a task for a workflow or activity this
	// worker does not know waits before it is offered again.
	unknownTaskDelay = 5 * time.Second
)

// ErrNotDeclared is returned by Worker.Start when the NATS server holds no
// Harvest streams yet: the deployment's scheduler or ingest declares them
// as it starts. Retry, or start the worker after them.
var ErrNotDeclared = streams.ErrNotDeclared

// WorkerConfig configures a Worker. Zero values mean the documented
// defaults.
type WorkerConfig struct {
	// NATS is the connection to the deployment's NATS server, required.
	// Start binds to the streams and buckets the deployment's scheduler
	// and ingest declared (it fails with an error wrapping ErrNotDeclared
	// when there are none yet), and never changes them.
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
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
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
	case c.NATS == nil:
		return errors.New("worker config: NATS is required")
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
	// top is the deployment's topology, bound by Start.
	top *streams.Topology
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
	// keeper keeps the tasks the worker holds in progress; set by Start.
	keeper *keeper
	// stopping is closed when Stop begins: tasks waiting for a slot are
	// handed back, and workflow tasks run nothing eagerly.
	stopping chan struct{}
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
		slots: make(chan struct{}, cfg.ActivityConcurrency), stopping: make(chan struct{}),
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
	js, err := jetstream.New(w.cfg.NATS)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	top, err := streams.Bind(ctx, js)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.top = top
	for name, sch := range w.schemas {
		if _, err := w.top.Schemas.Put(ctx, name, sch.Raw()); err != nil {
			return fmt.Errorf("publish input schema of %q: %w", name, err)
		}
	}
	if err := w.cancels.watch(ctx, w.top.Cancelled); err != nil {
		return err
	}
	w.started = true
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.keeper = newKeeper(max(w.cfg.TaskAckWait/3, 100*time.Millisecond), w.log)
	loops := []struct {
		kind string
		conc int
		fn   func(context.Context, *heldTask)
	}{
		{wire.TaskWorkflow, w.cfg.WorkflowTaskConcurrency, w.handleWorkflowTask},
		{wire.TaskActivity, w.cfg.ActivityConcurrency, w.handleActivityTask},
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
			w.keeper.close()
			w.cancels.stop()
			return fmt.Errorf("bind consumer %s: %w", name, err)
		}
		// The window asks the server for no more tasks than there are
		// handlers for: every task this worker receives is kept in
		// progress from the moment it arrives.
		win := streams.NewWindow(l.conc)
		fn := l.fn
		pulling.Go(func() {
			streams.PullWindow(pullCtx, js.Conn(), cons, win, func(m jetstream.Msg) {
				t := w.keeper.hold(m)
				gate.RLock()
				defer gate.RUnlock()
				if stopped {
					// On its way when Stop began.
					w.handBack(t, 0)
					win.Release()
					return
				}
				handlers.Go(func() {
					defer win.Release()
					defer w.keeper.drop(t)
					fn(runCtx, t)
				})
			}, func(m jetstream.Msg) {
				// Sent for the open request before the server saw the
				// worker stop pulling.
				w.handBack(newHeldTask(m), 0)
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
	}
	w.log.Info("worker started", "workflows", len(w.workflows), "activities", len(w.activities))
	var once sync.Once
	w.stop = func(ctx context.Context) error {
		var err error
		once.Do(func() {
			gate.Lock()
			stopped = true
			gate.Unlock()
			// Tasks waiting for an activity slot are handed back now.
			close(w.stopping)
			stopPull()
			done := make(chan struct{})
			go func() {
				handlers.Wait()
				close(done)
			}()
			grace := time.NewTimer(w.cfg.ShutdownGrace)
			defer grace.Stop()
			select {
			case <-done:
			case <-grace.C:
				err = fmt.Errorf("stop worker: shutdown grace of %s ran out; running tasks handed back", w.cfg.ShutdownGrace)
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
			w.keeper.close()
			if w.cancels.stop != nil {
				w.cancels.stop()
			}
		})
		return err
	}
	return nil
}

// Stop stops pulling tasks and hands back at once, unacknowledged, those
// not started yet (waiting for an activity slot, or on their way), for
// other workers to run. It lets the tasks running finish within
// ShutdownGrace, or until ctx ends if that is sooner; then it cancels
// them and reports their attempts as WorkerShutdown failures, which the
// scheduler retries after the policy's wait. Safe to call twice.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	stop := w.stop
	w.mu.Unlock()
	if stop == nil {
		return nil
	}
	return stop(ctx)
}

// isStopping says whether Stop has begun.
func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

func (w *Worker) handleWorkflowTask(ctx context.Context, t *heldTask) {
	var task wire.WorkflowTask
	if err := json.Unmarshal(t.m.Data(), &task); err != nil {
		w.log.Error("dropping malformed workflow task", "err", err)
		_ = t.m.Term()
		return
	}
	log := w.log.With("execution_id", task.ExecutionID, "workflow", task.WorkflowName)
	w.mu.Lock()
	fn := w.workflows[task.WorkflowName]
	opts := w.activityOptions
	w.mu.Unlock()
	if fn == nil {
		log.Warn("workflow not registered on this worker")
		w.handBack(t, unknownTaskDelay)
		return
	}
	result, err := w.completeWorkflowTask(ctx, t, fn, &task, opts)
	if err != nil {
		// Nothing ran: the task failed before any eager attempt.
		log.Error("workflow task failed; will retry", "err", err)
		w.handBack(t, unknownTaskDelay)
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
	_, err = w.top.PublishCommand(pctx, task.Shard, cmd)
	var big *streams.TooLargeError
	if errors.As(err, &big) {
		// Every run of this task decides the same: the workflow cannot go
		// on. It fails, rather than have its task handed back for ever.
		log.Error("workflow task result too large for the command stream; failing the workflow", "bytes", big.Size, "limit", big.Limit)
		cmd.WorkflowTask = tooLargeResult(result, big)
		_, err = w.top.PublishCommand(pctx, task.Shard, cmd)
	}
	if err != nil {
		// The result may have been stored all the same (its
		// acknowledgement lost): the next delivery must not count as a
		// first, so it runs nothing eagerly and marks eager activities
		// possibly started.
		log.Error("publish workflow task result; handing the task back", "err", err)
		w.keeper.drop(t)
		_ = t.m.Nak()
		return
	}
	if err := t.m.Ack(); err != nil {
		log.Warn("ack workflow task", "err", err)
	}
}

// handleActivityTask runs the attempt an activity task carries and
// reports how it ended, then acknowledges the task. The scheduler owns
// attempts: the task stays unacknowledged (and in progress) until its
// result is published, and a task delivered again after an earlier
// delivery may have started the attempt (its worker vanished, or its
// in-progress acknowledgements stopped reaching the server) never runs
// it again: the attempt is reported lost (WorkerLost), and the scheduler
// retries it after the policy's wait, reconciling first; the worker
// reporting it needs no slot, nor the activity. A task for an activity
// this worker does not have is handed back for the others.
func (w *Worker) handleActivityTask(ctx context.Context, t *heldTask) {
	var task wire.ActivityTask
	if err := json.Unmarshal(t.m.Data(), &task); err != nil {
		w.log.Error("dropping malformed activity task", "err", err)
		_ = t.m.Term()
		return
	}
	log := w.log.With("execution_id", task.ExecutionID, "activity", task.ActivityName, "attempt", task.Attempt)
	if !w.earlierUnstarted(ctx, t) {
		// Past its deadline the scheduler's timer has failed the attempt
		// already: there is nothing to report.
		var lost *wire.ActivityResult
		if task.Deadline.IsZero() || time.Now().Before(task.Deadline) {
			log.Warn("activity task delivered again: its earlier worker may have run it; reporting the attempt lost", "delivery", t.delivery())
			lost = &wire.ActivityResult{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt, Failure: &wire.Failure{
				Type:    "WorkerLost",
				Message: fmt.Sprintf("attempt %d's task was delivered again: the worker that had it vanished or stopped acknowledging it, and may have run it", task.Attempt),
			}}
		}
		w.settleActivity(ctx, t, &task, lost)
		return
	}
	w.mu.Lock()
	_, ok := w.activities[task.ActivityName]
	w.mu.Unlock()
	if !ok {
		log.Warn("activity not registered on this worker")
		w.handBack(t, unknownTaskDelay)
		return
	}
	// Eager attempts share the slots; they never wait for one, so this
	// wait ends when one of them does, or when Stop hands the task back.
	if w.isStopping() {
		w.handBack(t, 0)
		return
	}
	select {
	case w.slots <- struct{}{}:
	case <-w.stopping:
		w.handBack(t, 0)
		return
	}
	result := w.runAttempt(ctx, &task)
	<-w.slots
	w.settleActivity(ctx, t, &task, result)
}

// tooLargeResult is what a workflow task reports instead of res when res
// is too large for the command stream: the workflow fails. Eager attempts
// it ran are left out; the scheduler counts them lost, which is moot once
// the workflow has closed.
func tooLargeResult(res *wire.WorkflowTaskResult, big *streams.TooLargeError) *wire.WorkflowTaskResult {
	return &wire.WorkflowTaskResult{ExecutionID: res.ExecutionID, TaskID: res.TaskID, BaseSeq: res.BaseSeq, Decisions: []wire.Decision{{
		Type: wire.DecisionFailWorkflow,
		Failure: &wire.Failure{Type: "WorkflowTaskTooLarge", NonRetryable: true,
			Message: fmt.Sprintf("the workflow task's decisions, as a command, are %d bytes: more than the %d the command stream carries", big.Size, big.Limit)},
	}}}
}

// settleActivity publishes an attempt's result, if any, then acknowledges
// its task. If the result cannot be published the task is handed back
// unacknowledged: its next delivery reports the attempt lost, and the
// next attempt reconciles first.
func (w *Worker) settleActivity(ctx context.Context, t *heldTask, task *wire.ActivityTask, result *wire.ActivityResult) {
	if result != nil {
		cmd := &wire.Command{
			CommandID: dedup.ActivityResultCommandID(task.ExecutionID, task.ActivityID, task.Attempt),
			Kind:      wire.KindActivityResult,
			Activity:  result,
		}
		pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer pcancel()
		_, err := w.top.PublishCommand(pctx, task.Shard, cmd)
		var big *streams.TooLargeError
		if errors.As(err, &big) {
			// Every attempt would return as much: the activity fails.
			w.log.Error("activity result too large for the command stream; failing the activity", "execution_id", task.ExecutionID,
				"activity", task.ActivityName, "attempt", task.Attempt, "bytes", big.Size, "limit", big.Limit)
			cmd.Activity = &wire.ActivityResult{ExecutionID: result.ExecutionID, ActivityID: result.ActivityID, Attempt: result.Attempt,
				Failure: &wire.Failure{Type: "ResultTooLarge", NonRetryable: true,
					Message: fmt.Sprintf("the attempt's result, as a command, is %d bytes: more than the %d the command stream carries", big.Size, big.Limit)}}
			_, err = w.top.PublishCommand(pctx, task.Shard, cmd)
		}
		if err != nil {
			w.log.Error("publish activity result; handing the task back", "execution_id", task.ExecutionID, "activity", task.ActivityName, "attempt", task.Attempt, "err", err)
			w.keeper.drop(t)
			_ = t.m.Nak()
			return
		}
	}
	if err := t.m.Ack(); err != nil {
		w.log.Warn("ack activity task", "execution_id", task.ExecutionID, "activity", task.ActivityName, "attempt", task.Attempt, "err", err)
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
	ac := &ActivityContext{Context: actx, details: task.HeartbeatDetails, heartbeat: beat, ledger: w.top.Ledger, info: ActivityInfo{
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
			if _, err := w.top.PublishCommand(ctx, task.Shard, cmd); err != nil && ctx.Err() == nil {
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
