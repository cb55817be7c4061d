package harvesttest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/inproc"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// Defaults of Config's zero values, the deployment's own.
const (
	DefaultStartIdempotencyWindow = scheduler.DefaultStartIdempotencyWindow
	DefaultRetention              = scheduler.DefaultRetention
	DefaultWorkflowTaskTimeout    = scheduler.DefaultWorkflowTaskTimeout
	DefaultTaskAckWait            = harvest.DefaultTaskAckWait
)

// handBackDelay is how long a task a worker handed back waits before it
// is delivered again: it has not the workflow or activity, or its
// workflow task failed for another reason than the code (a non-
// determinism, an unsupported version or a panic is reported to the
// scheduler instead, which retries the task after its backoff).
const handBackDelay = workerrt.UnknownTaskDelay

// Config configures an Env. Zero values mean the deployment's defaults.
type Config struct {
	// StartIdempotencyWindow is how long a start key resolves to its
	// execution, default 24 h.
	StartIdempotencyWindow time.Duration
	// Retention is how long closed executions stay, default 7 days;
	// RetentionByWorkflow overrides it per workflow. Neither may be
	// shorter than the start window.
	Retention           time.Duration
	RetentionByWorkflow map[string]time.Duration
	// CancelGraceByWorkflow bounds, by workflow, how long an execution
	// asked to cancel may run before it is terminated, as the
	// configuration's workflows.<name>.cancel_grace.
	CancelGraceByWorkflow map[string]time.Duration
	// TimeoutsByWorkflow are the workflows' run and execution timeouts, as
	// the configuration's workflows.<name>.run_timeout and
	// .execution_timeout.
	TimeoutsByWorkflow map[string]Timeouts
	// SearchAttributes declares, by workflow, its search attributes and
	// their types (keyword, int, double, bool, time), as the
	// configuration's workflows.<name>.search_attributes: a workflow task
	// whose code sets another (harvest.UpsertSearchAttributes), or a value
	// of another type, fails as it does in a deployment. The kit checks
	// them, and its describe shows them; it has no list to filter by
	// them.
	SearchAttributes map[string]map[string]string
	// WorkflowTaskTimeout is how long a workflow task may go unreported
	// before the scheduler looks for it, default 10 s.
	WorkflowTaskTimeout time.Duration
	// TaskAckWait is how long a task held by a worker that died waits
	// before it is delivered again, default 5 s.
	TaskAckWait time.Duration
	// WorkflowCacheSize is how many executions the worker keeps between
	// their workflow tasks, as harvest.WorkerConfig's (default 1000,
	// negative: none). A task of an execution the worker does not hold
	// replays its history, which the worker gets as a deployment's
	// fetches it; a test can run its executions with the cache off, or
	// of size 1, to check that the cache changes nothing.
	WorkflowCacheSize int
	// Now is the clock's time when the Env starts, default
	// 2026-01-01T00:00:00Z.
	Now time.Time
	// Logger takes the worker's and the scheduler's logs; nil discards
	// them.
	Logger *slog.Logger
	// ConcurrentActivities runs activity attempts on goroutines of their
	// own, as a deployment's worker does, instead of on the goroutine
	// that called the Env: Start, Signal and Advance then return once no
	// workflow task is due, while attempts may still run, and the test
	// can signal an execution while one of its activities runs. Settle
	// waits until nothing runs. Off, every attempt runs to its end before
	// the call returns.
	ConcurrentActivities bool
	// HistoryLimits are what the scheduler holds each execution's
	// history to, as a deployment's history_* keys set them; zero fields
	// mean the defaults. A test gives small ones to see its workflow
	// continue as new in time (harvest.WorkflowInfo's
	// ContinueAsNewSuggested), or fail with HistoryLimitExceeded.
	HistoryLimits HistoryLimits
}

// HistoryLimits are the limits of an execution's history, in events
// and in bytes (docs/reliability.md#history-limits): past a warning
// threshold the execution carries a warning (its Describe's
// HistoryWarning); past a hard limit it fails with HistoryLimitExceeded;
// past a suggestion threshold its code reads ContinueAsNewSuggested. A
// threshold left zero is its default, or the hard limit when that is
// lower.
type HistoryLimits struct {
	// WarnEvents and WarnBytes, default 10,000 events and 10 MiB.
	WarnEvents int
	WarnBytes  int64
	// MaxEvents and MaxBytes, default 50,000 events and 50 MiB.
	MaxEvents int
	MaxBytes  int64
	// SuggestEvents and SuggestBytes, default 4,096 events and 4 MiB.
	SuggestEvents int
	SuggestBytes  int64
}

// scheduler is l as the scheduler takes it.
func (l HistoryLimits) scheduler() scheduler.HistoryLimits {
	return scheduler.HistoryLimits{WarnEvents: l.WarnEvents, WarnBytes: l.WarnBytes, MaxEvents: l.MaxEvents, MaxBytes: l.MaxBytes,
		SuggestEvents: l.SuggestEvents, SuggestBytes: l.SuggestBytes}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"StartIdempotencyWindow", c.StartIdempotencyWindow}, {"Retention", c.Retention},
		{"WorkflowTaskTimeout", c.WorkflowTaskTimeout}, {"TaskAckWait", c.TaskAckWait},
	} {
		if f.d < 0 {
			return fmt.Errorf("harvesttest config: %s %s: want a positive duration", f.name, f.d)
		}
	}
	for name, d := range c.RetentionByWorkflow {
		if d < 0 {
			return fmt.Errorf("harvesttest config: RetentionByWorkflow[%q] %s: want a positive duration", name, d)
		}
	}
	for name, t := range c.TimeoutsByWorkflow {
		if err := (scheduler.WorkflowTimeouts{Run: t.Run, Execution: t.Execution}).Validate(); err != nil {
			return fmt.Errorf("harvesttest config: TimeoutsByWorkflow[%q]: %w", name, err)
		}
	}
	for name, d := range c.CancelGraceByWorkflow {
		if d <= 0 {
			return fmt.Errorf("harvesttest config: CancelGraceByWorkflow[%q] %s: want a positive duration", name, d)
		}
	}
	if err := c.HistoryLimits.scheduler().Validate(); err != nil {
		return fmt.Errorf("harvesttest config: %w", err)
	}
	return nil
}

// Env is a worker and a scheduler's shard in one process, on a clock the
// test moves. Each method that changes something (Start, Signal, Advance,
// RestartWorker) runs, on the calling goroutine, every task that is due
// before it returns. An Env may be used from several goroutines; its tasks
// run one at a time.
type Env struct {
	cfg      Config
	register func(*harvest.Worker)
	log      *slog.Logger

	// run is held while tasks run (user code included); mu guards the
	// state below, and is never held while user code runs, so that an
	// activity's heartbeat can reach the shard.
	run sync.Mutex
	mu  sync.Mutex
	mem *scheduler.Memory
	now time.Time
	// worker is the current worker's registrations; workers counts the
	// workers started, the first included.
	worker  inproc.Worker
	workers int
	queue   []*delivery
	nextSeq int
	faults  []Fault
	// tasks records each execution's completed workflow tasks, for
	// Replay; attempts every activity attempt delivered.
	tasks    map[string][]recordedTask
	attempts []Attempt
	// ledger is harvest.Once's effect ledger.
	ledger *ledger
	// fakes replace activities (OnActivity), on every worker.
	fakes map[string]any
	// running counts the attempts running on goroutines of their own
	// (ConcurrentActivities); settled is closed, and replaced, each time
	// one ends; asyncErrs are what their tasks returned, for Settle.
	running   int
	settled   chan struct{}
	asyncErrs []error
	// stop cancels the attempts still running when the Env closes.
	stop context.CancelFunc
	bg   context.Context
	// stopped are the executions closed at once (cancelled before their
	// code ran, terminated) and the activities their workflows gave up:
	// their queued attempts are dropped and their running ones' contexts
	// cancelled (attemptCancels), as a worker does.
	stoppedExecs   map[string]bool
	stoppedActs    map[store.ActivityRef]bool
	attemptCancels map[store.ActivityRef]context.CancelFunc
}

// delivery is a task on its way to a worker: due at at, and redelivered
// when a worker that held it died.
type delivery struct {
	seq int
	at  time.Time
	wft *wire.WorkflowTask
	act *wire.ActivityTask
	// cmd is a command a shard sent to a shard (a child's start, a
	// report, a workflow's signal), applied in its turn.
	cmd         *wire.Command
	redelivered bool
}

type recordedTask struct {
	task      *wire.WorkflowTask
	decisions []wire.Decision
}

// New returns an Env whose worker registers with register, as
// examples.Register or a worker's main would.
func New(register func(*harvest.Worker), cfg Config) (*Env, error) {
	if register == nil {
		return nil, errors.New("harvesttest: register is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.TaskAckWait = cmp.Or(cfg.TaskAckWait, DefaultTaskAckWait)
	if cfg.Now.IsZero() {
		cfg.Now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	e := &Env{cfg: cfg, register: register, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), now: cfg.Now.UTC(), tasks: map[string][]recordedTask{},
		settled: make(chan struct{})}
	e.bg, e.stop = context.WithCancel(context.Background())
	mem, err := scheduler.NewMemory(scheduler.MemoryConfig{
		StartIdempotencyWindow: cfg.StartIdempotencyWindow, WorkflowTaskTimeout: cfg.WorkflowTaskTimeout,
		Retention: cfg.Retention, RetentionByWorkflow: cfg.RetentionByWorkflow, CancelGraceByWorkflow: cfg.CancelGraceByWorkflow,
		TimeoutsByWorkflow: cfg.schedulerTimeouts(), TaskQueued: e.taskQueued, Logger: e.log,
		KnownWorkflow: func(name, _ string) bool { return slices.Contains(e.worker.Workflows(), name) },
		HistoryLimits: cfg.HistoryLimits.scheduler(), SearchAttributes: cfg.SearchAttributes,
	})
	if err != nil {
		return nil, fmt.Errorf("harvesttest: %w", err)
	}
	e.mem = mem
	e.ledger = newLedger(e.Now, cmp.Or(cfg.Retention, DefaultRetention))
	if err := e.startWorker(register); err != nil {
		return nil, err
	}
	return e, nil
}

// Now is the Env's clock.
func (e *Env) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// Workers is how many workers have run: 1, plus one for each that died
// (a fault, or RestartWorker).
func (e *Env) Workers() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.workers
}

// startWorker replaces the worker with one that registers with register.
// Call with mu held or before the Env is shared.
func (e *Env) startWorker(register func(*harvest.Worker)) error {
	b, err := bind(harvest.WorkerConfig{Logger: e.log, WorkflowCacheSize: e.cfg.WorkflowCacheSize}, register)
	if err != nil {
		return fmt.Errorf("harvesttest: start worker: %w", err)
	}
	for name, fake := range e.fakes {
		if err := b.ReplaceActivity(name, fake); err != nil {
			b.Close()
			return fmt.Errorf("harvesttest: start worker: %w", err)
		}
	}
	if e.worker != nil {
		// The worker it replaces dies: the workflow code it kept in
		// memory ends with it.
		e.worker.Close()
	}
	e.worker = b
	e.workers++
	return nil
}

// bind binds register's registrations in process (harvest.BindTestKit),
// as a new worker that starts.
func bind(cfg harvest.WorkerConfig, register func(*harvest.Worker)) (inproc.Worker, error) {
	b, err := harvest.BindTestKit(cfg, register)
	if err != nil {
		return nil, err
	}
	return inproc.Of(b)
}

// OnActivity replaces the activity name, for this Env, with fake: a
// function of an activity's form, func(*harvest.ActivityContext, In)
// (Out, error), which runs instead of the registered activity (or as an
// activity no registration names) from the next attempt on, on this
// worker and on those RestartWorker starts. A fake of another form is
// refused.
func (e *Env) OnActivity(name string, fake any) error {
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.worker.ReplaceActivity(name, fake); err != nil {
		return fmt.Errorf("harvesttest: %w", err)
	}
	if e.fakes == nil {
		e.fakes = map[string]any{}
	}
	e.fakes[name] = fake
	return nil
}

// Close ends the workflow code the Env's worker keeps in memory between
// workflow tasks (the goroutines of executions still running), as a
// stopping worker does. Call it when the test is done with the Env:
// defer env.Close(). Safe to call twice.
func (e *Env) Close() {
	// Attempts still running (ConcurrentActivities) are cancelled, and
	// waited for.
	e.stop()
	for {
		e.mu.Lock()
		running, settled := e.running, e.settled
		e.mu.Unlock()
		if running == 0 {
			break
		}
		<-settled
	}
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.worker != nil {
		e.worker.Close()
	}
}

// Settle waits until no activity attempt runs (ConcurrentActivities) and
// no task is due, running the tasks that fall due meanwhile, and returns
// the errors of the tasks that ran since the last Settle on the attempts'
// goroutines (see Start). Without ConcurrentActivities there is nothing
// to wait for.
func (e *Env) Settle(ctx context.Context) error {
	for {
		e.run.Lock()
		err := e.drain(ctx)
		e.run.Unlock()
		e.mu.Lock()
		if err != nil {
			e.asyncErrs = append(e.asyncErrs, err)
		}
		running, settled := e.running, e.settled
		if running == 0 {
			errs := e.asyncErrs
			e.asyncErrs = nil
			e.mu.Unlock()
			return joinDistinct(errs)
		}
		e.mu.Unlock()
		select {
		case <-settled:
		case <-ctx.Done():
			return fmt.Errorf("harvesttest: settle: %w", ctx.Err())
		}
	}
}

// runConcurrently runs an activity attempt on a goroutine of its own,
// then the tasks its result leads to.
func (e *Env) runConcurrently(worker inproc.Worker, d *delivery) {
	e.mu.Lock()
	e.running++
	e.mu.Unlock()
	go func() {
		ctx := e.bg
		errs := []error{e.runActivityTask(ctx, worker, d)}
		e.run.Lock()
		errs = append(errs, e.drain(ctx))
		e.run.Unlock()
		e.mu.Lock()
		defer e.mu.Unlock()
		if err := joinDistinct(errs); err != nil && ctx.Err() == nil {
			e.asyncErrs = append(e.asyncErrs, err)
		}
		e.running--
		close(e.settled)
		e.settled = make(chan struct{})
	}()
}

// RestartWorker stops the worker, as a crash or a deploy would, between
// two tasks, and starts a new one that registers with register (nil: the
// same registrations as before; other code tests a deploy). The new
// worker replays each execution's history at its next task (the workflow
// code the old one kept in memory ends with it), so nothing is lost. A workflow whose new
// code decides differently over its history fails its next task with
// harvest.ErrNonDeterministic, returned by the call that runs it.
func (e *Env) RestartWorker(ctx context.Context, register func(*harvest.Worker)) error {
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	if register == nil {
		register = e.register
	}
	err := e.startWorker(register)
	if err == nil {
		e.register = register
	}
	e.mu.Unlock()
	if err != nil {
		return err
	}
	return e.drain(ctx)
}

// Advance moves the clock on by d. Everything that falls due meanwhile
// happens at its time, in order: durable timers fire, retries start after
// their backoff, attempts time out, tasks of a worker that died are
// delivered again, and closed executions past their retention are pruned.
// It returns the errors of workflow tasks that failed (see Start).
func (e *Env) Advance(ctx context.Context, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("harvesttest: advance %s: the clock does not go back", d)
	}
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	target := e.now.Add(d)
	e.mu.Unlock()
	var errs []error
	for {
		errs = append(errs, e.drain(ctx))
		e.mu.Lock()
		next, ok := e.nextEvent()
		if !ok || next.After(target) {
			e.mu.Unlock()
			break
		}
		e.now = maxTime(e.now, next)
		err := e.fireDue(ctx)
		e.mu.Unlock()
		errs = append(errs, err)
	}
	e.mu.Lock()
	e.now = target
	err := e.fireDue(ctx)
	e.mu.Unlock()
	errs = append(errs, err, e.drain(ctx))
	return joinDistinct(errs)
}

// nextEvent is when the next timer fires or task falls due. Call with mu
// held.
func (e *Env) nextEvent() (time.Time, bool) {
	next, ok := e.mem.NextTimer()
	for _, d := range e.queue {
		if !ok || d.at.Before(next) {
			next, ok = d.at, true
		}
	}
	return next, ok
}

// fireDue fires the timers due at now and prunes what retention lets go.
// Call with mu held.
func (e *Env) fireDue(ctx context.Context) error {
	out, err := e.mem.FireDue(ctx, e.now)
	if err != nil {
		return fmt.Errorf("harvesttest: fire timers: %w", err)
	}
	e.enqueue(out)
	for _, id := range e.mem.Prune(e.now) {
		delete(e.tasks, id)
	}
	return nil
}

// enqueue queues the tasks an apply dispatched, due now. Call with mu held.
func (e *Env) enqueue(out scheduler.Dispatched) {
	for _, t := range out.WorkflowTasks {
		e.push(&delivery{at: e.now, wft: t})
	}
	for _, t := range out.ActivityTasks {
		e.push(&delivery{at: e.now, act: t})
	}
	for _, c := range out.Commands {
		e.push(&delivery{at: e.now, cmd: c})
	}
	if len(out.Cancelled) == 0 && len(out.CancelledActivities) == 0 {
		return
	}
	if e.stoppedExecs == nil {
		e.stoppedExecs, e.stoppedActs = map[string]bool{}, map[store.ActivityRef]bool{}
	}
	for _, id := range out.Cancelled {
		e.stoppedExecs[id] = true
		for ref, cancel := range e.attemptCancels {
			if ref.ExecutionID == id {
				cancel()
			}
		}
	}
	for _, ref := range out.CancelledActivities {
		e.stoppedActs[ref] = true
		if cancel := e.attemptCancels[ref]; cancel != nil {
			cancel()
		}
	}
}

// stopped says whether task's attempt is not to run: its execution was
// stopped, or its workflow gave it up. Call with mu held.
func (e *Env) stopped(task *wire.ActivityTask) bool {
	return e.stoppedExecs[task.ExecutionID] || e.stoppedActs[store.ActivityRef{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID}]
}

func (e *Env) push(d *delivery) {
	e.nextSeq++
	d.seq = e.nextSeq
	e.queue = append(e.queue, d)
}

// taskQueued says whether a workflow task is still held for a worker (a
// worker died with it, and it waits to be delivered again), as the task
// stream would. Called by the shard, with mu held.
func (e *Env) taskQueued(executionID string, taskID int) bool {
	for _, d := range e.queue {
		if d.wft != nil && d.wft.ExecutionID == executionID && d.wft.TaskID == taskID {
			return true
		}
	}
	return false
}

// apply applies cmd now and queues what it dispatched. Call with mu held.
func (e *Env) apply(ctx context.Context, cmd *wire.Command) (wire.Outcome, error) {
	out, err := e.mem.Apply(ctx, e.now, cmd)
	if err != nil {
		return wire.Outcome{}, fmt.Errorf("harvesttest: apply %s: %w", cmd.Kind, err)
	}
	e.enqueue(out)
	for _, o := range out.Outcomes {
		if o.CommandID == cmd.CommandID {
			return o, nil
		}
	}
	return wire.Outcome{}, nil
}

// drain runs every task due now, and those they lead to, until none is
// due. Call with run held and mu not.
func (e *Env) drain(ctx context.Context) error {
	var errs []error
	for {
		e.mu.Lock()
		d := e.take()
		worker := e.worker
		e.mu.Unlock()
		if d == nil {
			return joinDistinct(errs)
		}
		var err error
		switch {
		case d.cmd != nil:
			e.mu.Lock()
			_, err = e.apply(ctx, d.cmd)
			e.mu.Unlock()
		case d.wft != nil:
			err = e.runWorkflowTask(ctx, worker, d)
		case e.cfg.ConcurrentActivities:
			e.runConcurrently(worker, d)
		default:
			err = e.runActivityTask(ctx, worker, d)
		}
		errs = append(errs, err)
	}
}

// take removes and returns the earliest task due now. Call with mu held.
func (e *Env) take() *delivery {
	best := -1
	for i, d := range e.queue {
		if d.at.After(e.now) {
			continue
		}
		if best < 0 || d.at.Before(e.queue[best].at) || (d.at.Equal(e.queue[best].at) && d.seq < e.queue[best].seq) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	d := e.queue[best]
	e.queue = slices.Delete(e.queue, best, best+1)
	return d
}

// takeFault removes and returns the first pending fault that matches.
// Call with mu held.
func (e *Env) takeFault(match func(Fault) bool) (Fault, bool) {
	for i, f := range e.faults {
		if !match(f) {
			continue
		}
		if f.skip > 0 {
			e.faults[i].skip--
			return Fault{}, false
		}
		e.faults = slices.Delete(e.faults, i, i+1)
		return f, true
	}
	return Fault{}, false
}

// crash stands for the death of the worker that held d: a new worker
// starts, and d is delivered to it again after the task ack wait. Call
// with mu held.
func (e *Env) crash(d *delivery) error {
	d.redelivered = true
	d.at = e.now.Add(e.cfg.TaskAckWait)
	e.push(d)
	return e.startWorker(e.register)
}

// runWorkflowTask replays a workflow task on worker and reports its
// decisions, as a worker's runtime does (internal/workerrt).
// wholeTask is task carrying the execution's whole history: the events
// before those it carries are the shard's. Called with e.mu held.
func (e *Env) wholeTask(task *wire.WorkflowTask) *wire.WorkflowTask {
	if task.Whole() {
		return task
	}
	_, events, ok := e.mem.Execution(task.ExecutionID)
	if !ok || len(events) < task.FirstSeq()-1 {
		return task
	}
	whole := *task
	whole.History = append(slices.Clone(events[:task.FirstSeq()-1]), task.History...)
	whole.HistoryFrom = 0
	return &whole
}

func (e *Env) runWorkflowTask(ctx context.Context, worker inproc.Worker, d *delivery) error {
	task := d.wft
	run, ok := worker.Handlers().Workflow(task.WorkflowName)
	if !ok {
		e.mu.Lock()
		d.at = e.now.Add(handBackDelay)
		e.push(d)
		e.mu.Unlock()
		return fmt.Errorf("harvesttest: workflow %q is not registered on the worker", task.WorkflowName)
	}
	ran, err := run(task)
	if errors.Is(err, workerrt.ErrHistoryNeeded) && !task.Whole() {
		// The task carries the execution's latest events, and the worker
		// does not hold it (the cache is off, or evicted it): it gets the
		// history before them, as a worker fetches it from a deployment.
		e.mu.Lock()
		task = e.wholeTask(task)
		e.mu.Unlock()
		ran, err = run(task)
	}
	decisions := ran.Decisions
	e.mu.Lock()
	defer e.mu.Unlock()
	var failed *workerrt.TaskFailureError
	if errors.As(err, &failed) {
		// A non-determinism, an unsupported version or a panic: reported
		// as a worker's runtime reports it (a wft_failed command), so that
		// the execution shows TaskFailing and the scheduler dispatches the
		// task again after its backoff, as in a deployment.
		f := failed.Failure
		f.ExecutionID, f.TaskID = task.ExecutionID, task.TaskID
		if _, aerr := e.apply(ctx, &wire.Command{CommandID: dedup.WorkflowTaskFailedCommandID(task.ExecutionID, task.TaskID),
			Kind: wire.KindWorkflowTaskFailed, TaskFailure: &f}); aerr != nil {
			return errors.Join(fmt.Errorf("execution %s: workflow task %d: %w", task.ExecutionID, task.TaskID, err), aerr)
		}
		return fmt.Errorf("execution %s: workflow task %d: %w", task.ExecutionID, task.TaskID, err)
	}
	if err != nil {
		// Any other failure (a history the replayer cannot read, say):
		// handed back, unstarted, as a worker's runtime hands it back; it
		// comes again after the delay.
		d.at = e.now.Add(handBackDelay)
		e.push(d)
		return fmt.Errorf("execution %s: workflow task %d: %w", task.ExecutionID, task.TaskID, err)
	}
	res := workerrt.NewWorkflowTaskResult(task, decisions, "")
	res.Rejections, res.Idle = ran.Rejections, ran.Idle
	res.States, res.Waiting = ran.States, ran.Waiting
	if d.redelivered || task.Redispatch > 0 {
		// An earlier delivery may have run the activities eagerly.
		workerrt.MarkPossiblyStarted(res.Decisions)
	}
	if _, lost := e.takeFault(func(f Fault) bool { return f.loses(task.WorkflowName, "") }); lost {
		return e.crash(d)
	}
	e.tasks[task.ExecutionID] = append(e.tasks[task.ExecutionID], recordedTask{task: e.wholeTask(task), decisions: slices.Clone(decisions)})
	_, err = e.apply(ctx, &wire.Command{
		CommandID: dedup.WorkflowTaskCommandID(task.ExecutionID, task.TaskID), Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: res,
	})
	return err
}

// Attempt is one delivery of an activity attempt to a worker.
type Attempt struct {
	ExecutionID    string
	Activity       string
	ActivityID     int
	Attempt        int
	IdempotencyKey harvest.ActivityKey
	At             time.Time
	// PreviousOutcomeUnknown says the previous attempt ended without a
	// result: the activity's reconcile function, if it has one, ran
	// before it.
	PreviousOutcomeUnknown bool
	// Redelivered says the task came again after its worker died: the
	// new worker reported the attempt lost without running it.
	Redelivered bool
	// ResultLost says the attempt ran and its worker died before its
	// result was recorded (LoseActivityResult).
	ResultLost bool
	// Failure is the failure's type when the attempt failed.
	Failure string
}

// Attempts are the activity attempts delivered so far, in order.
func (e *Env) Attempts() []Attempt {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.attempts)
}

// runActivityTask runs an activity attempt on worker and reports how it
// ended, as a worker's runtime does.
func (e *Env) runActivityTask(ctx context.Context, worker inproc.Worker, d *delivery) error {
	task := d.act
	e.mu.Lock()
	now := e.now
	e.mu.Unlock()
	rec := Attempt{
		ExecutionID: task.ExecutionID, Activity: task.ActivityName, ActivityID: task.ActivityID, Attempt: task.Attempt,
		IdempotencyKey: harvest.ActivityKey(task.IdempotencyKey), At: now, PreviousOutcomeUnknown: task.PreviousOutcomeUnknown,
	}
	resultCmd := func(r *wire.ActivityResult) *wire.Command {
		return &wire.Command{CommandID: dedup.ActivityResultCommandID(task.ExecutionID, task.ActivityID, task.Attempt), Kind: wire.KindActivityResult, Activity: r}
	}
	if !task.Deadline.IsZero() && now.After(task.Deadline) {
		// The scheduler has moved on to the next attempt.
		return nil
	}
	if d.redelivered {
		// An earlier worker may have run it: it is reported lost, never
		// run again; the next attempt reconciles first.
		rec.Redelivered, rec.Failure = true, "WorkerLost"
		e.mu.Lock()
		defer e.mu.Unlock()
		e.attempts = append(e.attempts, rec)
		_, err := e.apply(ctx, resultCmd(workerrt.LostAttempt(task)))
		return err
	}
	if !worker.Handlers().HasActivity(task.ActivityName) {
		e.mu.Lock()
		d.at = now.Add(handBackDelay)
		e.push(d)
		e.mu.Unlock()
		return fmt.Errorf("harvesttest: activity %q is not registered on the worker", task.ActivityName)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	ref := store.ActivityRef{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID}
	e.mu.Lock()
	if e.stopped(task) {
		defer e.mu.Unlock()
		if e.stoppedExecs[task.ExecutionID] {
			return nil // the execution closed: nothing to tell
		}
		// A worker does not run the attempt of an activity given up, and
		// says so, so that the shard closes it at once.
		_, err := e.apply(ctx, resultCmd(&wire.ActivityResult{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt,
			Failure: &wire.Failure{Type: "Cancelled", Message: "the workflow gave the activity up before this attempt ran"}}))
		return err
	}
	if e.attemptCancels == nil {
		e.attemptCancels = map[store.ActivityRef]context.CancelFunc{}
	}
	e.attemptCancels[ref] = cancel
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.attemptCancels, ref)
		e.mu.Unlock()
	}()
	log := e.log.With("execution_id", task.ExecutionID, "workflow", task.WorkflowName, "activity", task.ActivityName, "attempt", task.Attempt)
	res, err := worker.Handlers().Activity(actx, &workerrt.Attempt{Task: task, Log: log, Ledger: e.ledger, Heartbeat: func(details json.RawMessage) {
		e.heartbeat(ctx, task, details)
	}})
	result := workerrt.AttemptResult(task, res, err, worker.Handlers().Failure)
	if result.Failure != nil {
		rec.Failure = result.Failure.Type
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, lost := e.takeFault(func(f Fault) bool { return f.loses("", task.ActivityName) }); lost {
		rec.ResultLost = true
		e.attempts = append(e.attempts, rec)
		return e.crash(d)
	}
	e.attempts = append(e.attempts, rec)
	_, err = e.apply(ctx, resultCmd(result))
	return err
}

// heartbeat reports an attempt alive with details, at once (a worker
// sends the newest details at most every third of the heartbeat timeout).
func (e *Env) heartbeat(ctx context.Context, task *wire.ActivityTask, details json.RawMessage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.apply(ctx, &wire.Command{
		CommandID: dedup.NewID(), Kind: wire.KindActivityHeartbeat,
		Heartbeat: &wire.ActivityHeartbeat{ExecutionID: task.ExecutionID, ActivityID: task.ActivityID, Attempt: task.Attempt, Details: details},
	})
}

// refused is the API error of a refused command's outcome.
func refused(o wire.Outcome) error {
	return &client.APIError{StatusCode: o.HTTPStatus, Code: o.Error, Message: o.Message}
}

// notFound is the API's answer for an execution it does not hold.
func notFound(id string) error {
	return &client.APIError{StatusCode: http.StatusNotFound, Code: client.CodeExecutionNotFound, Message: "no execution " + id}
}

// joinDistinct joins errs, nils and repeats left out.
func joinDistinct(errs []error) error {
	var out []error
	seen := map[string]bool{}
	for _, err := range errs {
		if err == nil || seen[err.Error()] {
			continue
		}
		seen[err.Error()] = true
		out = append(out, err)
	}
	return errors.Join(out...)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Timeouts are a workflow's run and execution timeouts (Config's
// TimeoutsByWorkflow); zero means none.
type Timeouts struct {
	Run       time.Duration
	Execution time.Duration
}

// schedulerTimeouts are c's TimeoutsByWorkflow as the shard takes them.
func (c Config) schedulerTimeouts() map[string]scheduler.WorkflowTimeouts {
	if len(c.TimeoutsByWorkflow) == 0 {
		return nil
	}
	out := make(map[string]scheduler.WorkflowTimeouts, len(c.TimeoutsByWorkflow))
	for name, t := range c.TimeoutsByWorkflow {
		out[name] = scheduler.WorkflowTimeouts{Run: t.Run, Execution: t.Execution}
	}
	return out
}
