// Package scheduler applies Harvest's commands to PostgreSQL. A scheduler
// process takes shard leases (fenced by an epoch), and for each shard it
// owns it consumes that shard's commands in stream order, applies them in
// batches — one transaction per batch, which also records the applied
// stream sequence, so a redelivered command is never applied twice — then
// acknowledges them and publishes the tasks and outcomes the batch put in
// the outbox. It holds no user code.
//
// Several schedulers share the shards; a dead one's shards move to the
// others once its leases expire.
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sourcegraph/conc"

	"github.com/harvest-engine/harvest/dedup"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/streams"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Defaults for Config's zero values.
const (
	DefaultLeaseTTL               = 5 * time.Second
	DefaultBatchSize              = 256
	DefaultStartIdempotencyWindow = 24 * time.Hour
	DefaultAckWait                = 30 * time.Second
)

// Config configures a Scheduler. Zero values mean the documented defaults.
type Config struct {
	DB       *pgxpool.Pool
	Topology *streams.Topology
	// Owner names this scheduler in shard leases; default host-pid-random.
	Owner string
	// LeaseTTL is how long a lease lasts unrenewed, default 5 s; leases
	// are renewed every LeaseTTL/4.
	LeaseTTL time.Duration
	// BatchSize caps the commands applied in one transaction, default 256.
	BatchSize int
	// StartIdempotencyWindow is how long a start's idempotency claim
	// lasts, default 24 h.
	StartIdempotencyWindow time.Duration
	// AckWait is the command consumer's redelivery timeout, default 30 s.
	AckWait time.Duration
	// WorkflowTaskTimeout is a dispatched workflow task's deadline,
	// default 10 s: a task not completed by then is looked for in the task
	// stream, and dispatched again if the stream no longer holds it (the
	// task or its result was lost); one still held is looked at again
	// later, the wait doubling up to 5 minutes.
	WorkflowTaskTimeout time.Duration
	// SweepInterval paces the deletion of expired start claims and
	// command outcomes, default 1 minute; each round deletes at most
	// SweepBatches batches of SweepBatchSize (default 10 of 1000) of each.
	// Correctness never depends on the sweep: expired claims are ignored
	// and taken over where read, expired outcomes ignored.
	SweepInterval  time.Duration
	SweepBatchSize int
	SweepBatches   int
	// CallbackPolicy re-checks completion callback targets when they are
	// dialled (ingest checked them at start).
	CallbackPolicy callback.Policy
	// CallbackPollInterval paces the delivery loop, default 1 s.
	CallbackPollInterval time.Duration
	// CallbackMaxAttempts bounds the attempts of one delivery, default
	// callback.DefaultMaxAttempts.
	CallbackMaxAttempts int
	// CallbackRetryDelay is the delay before attempt n, default
	// callback.RetryDelay.
	CallbackRetryDelay func(attempt int) time.Duration
	// Metrics is the registry the scheduler's counters go to; default a
	// fresh one.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), dedup.NewID()[24:])
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.StartIdempotencyWindow == 0 {
		c.StartIdempotencyWindow = DefaultStartIdempotencyWindow
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.WorkflowTaskTimeout == 0 {
		c.WorkflowTaskTimeout = DefaultWorkflowTaskTimeout
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Minute
	}
	if c.SweepBatchSize == 0 {
		c.SweepBatchSize = 1000
	}
	if c.SweepBatches == 0 {
		c.SweepBatches = 10
	}
	if c.CallbackPollInterval == 0 {
		c.CallbackPollInterval = time.Second
	}
	if c.CallbackMaxAttempts == 0 {
		c.CallbackMaxAttempts = callback.DefaultMaxAttempts
	}
	if c.CallbackRetryDelay == nil {
		c.CallbackRetryDelay = callback.RetryDelay
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("scheduler config: DB is required")
	case c.Topology == nil:
		return errors.New("scheduler config: Topology is required")
	case c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < 100*time.Millisecond):
		return fmt.Errorf("scheduler config: LeaseTTL %s: want at least 100ms", c.LeaseTTL)
	case c.BatchSize < 0:
		return fmt.Errorf("scheduler config: BatchSize %d: want a positive number", c.BatchSize)
	case c.WorkflowTaskTimeout < 0 || (c.WorkflowTaskTimeout > 0 && c.WorkflowTaskTimeout < 100*time.Millisecond):
		return fmt.Errorf("scheduler config: WorkflowTaskTimeout %s: want at least 100ms", c.WorkflowTaskTimeout)
	case c.StartIdempotencyWindow < 0:
		return fmt.Errorf("scheduler config: StartIdempotencyWindow %s: want a positive duration", c.StartIdempotencyWindow)
	}
	return nil
}

// Scheduler owns shard leases and applies their commands.
type Scheduler struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	runners map[int]*runner
}

// New checks cfg and returns a Scheduler; Start runs it.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("scheduler metrics: %w", err)
	}
	return &Scheduler{cfg: cfg, log: cfg.Logger.With("owner", cfg.Owner), metrics: m, runners: map[int]*runner{}}, nil
}

// Owner is the name this scheduler holds leases under.
func (s *Scheduler) Owner() string { return s.cfg.Owner }

// Start prepares the shard rows and starts taking leases in the
// background. It returns once the first lease round has run.
func (s *Scheduler) Start(ctx context.Context) error {
	if err := store.EnsureShards(ctx, s.cfg.DB, s.cfg.Topology.Shards()); err != nil {
		return err
	}
	s.mu.Lock()
	if s.cancel != nil {
		s.mu.Unlock()
		return errors.New("scheduler already started")
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	done := make(chan struct{})
	s.done = done
	s.mu.Unlock()
	first := make(chan struct{})
	go func() {
		defer close(done)
		s.leaseLoop(runCtx, first)
	}()
	select {
	case <-first:
	case <-ctx.Done():
	}
	return nil
}

// Stop stops applying: each shard finishes the batch in hand, then the
// leases are released so other schedulers take over at once. Safe to call
// twice.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stop scheduler: %w", ctx.Err())
	}
	if err := store.Leave(ctx, s.cfg.DB, s.cfg.Owner); err != nil {
		return fmt.Errorf("stop scheduler: %w", err)
	}
	return nil
}

// OwnedShards returns the shards this scheduler applies now.
func (s *Scheduler) OwnedShards() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.runners))
	for sh := range s.runners {
		out = append(out, sh)
	}
	return out
}

func (s *Scheduler) leaseLoop(ctx context.Context, first chan struct{}) {
	var wg conc.WaitGroup
	defer func() {
		s.mu.Lock()
		for _, r := range s.runners {
			r.cancel()
		}
		s.mu.Unlock()
		wg.Wait()
	}()
	wg.Go(func() { s.sweepLoop(ctx) })
	wg.Go(func() { s.callbackLoop(ctx) })
	ticker := time.NewTicker(s.cfg.LeaseTTL / 4)
	defer ticker.Stop()
	for {
		if err := s.leaseRound(ctx, &wg); err != nil && ctx.Err() == nil {
			s.log.Warn("lease round failed", "err", err)
		}
		if first != nil {
			close(first)
			first = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// sweepLoop deletes expired start claims and command outcomes in bounded
// batches.
func (s *Scheduler) sweepLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.SweepInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		s.sweep(ctx, "expired start claims", store.SweepExpiredClaims)
		s.sweep(ctx, "expired command outcomes", store.SweepExpiredOutcomes)
		if err := store.ForgetDeadSchedulers(ctx, s.cfg.DB); err != nil && ctx.Err() == nil {
			s.log.Warn("forget dead schedulers", "err", err)
		}
	}
}

// sweep runs del, which deletes up to a batch of rows, for at most
// SweepBatches batches, stopping at the first that finds fewer.
func (s *Scheduler) sweep(ctx context.Context, what string, del func(context.Context, store.DBTX, int) (int64, error)) {
	var total int64
	for range s.cfg.SweepBatches {
		n, err := del(ctx, s.cfg.DB, s.cfg.SweepBatchSize)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweep "+what, "err", err)
			}
			return
		}
		total += n
		if n < int64(s.cfg.SweepBatchSize) {
			break
		}
	}
	if total > 0 {
		s.log.Debug("swept "+what, "deleted", total)
	}
}

// leaseRound renews held leases, stops runners whose lease is gone, and
// takes or gives up shards to hold a fair share.
func (s *Scheduler) leaseRound(ctx context.Context, wg *conc.WaitGroup) error {
	alive, err := store.Heartbeat(ctx, s.cfg.DB, s.cfg.Owner, s.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	held, err := store.RenewLeases(ctx, s.cfg.DB, s.cfg.Owner, s.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	heldBy := map[int]store.Lease{}
	for _, l := range held {
		heldBy[l.Shard] = l
	}
	s.mu.Lock()
	for sh, r := range s.runners {
		if l, ok := heldBy[sh]; !ok || l.Epoch != r.lease.Epoch || r.finished() {
			r.cancel()
			delete(s.runners, sh)
			delete(heldBy, sh)
			if ok {
				// Our runner stopped on its own (an error); release so a
				// fresh runner, ours or another's, starts cleanly.
				_ = store.ReleaseLease(ctx, s.cfg.DB, s.cfg.Owner, l)
			}
		}
	}
	s.mu.Unlock()
	target := int(math.Ceil(float64(s.cfg.Topology.Shards()) / float64(alive)))
	var start []store.Lease
	for _, l := range heldBy {
		s.mu.Lock()
		_, running := s.runners[l.Shard]
		s.mu.Unlock()
		if !running {
			start = append(start, l)
		}
	}
	if n := len(heldBy); n < target {
		got, err := store.AcquireLeases(ctx, s.cfg.DB, s.cfg.Owner, s.cfg.LeaseTTL, target-n)
		if err != nil {
			return err
		}
		start = append(start, got...)
	} else if n > target {
		// Give up the surplus so newcomers get their share.
		extra := n - target
		s.mu.Lock()
		var stop []*runner
		for sh, r := range s.runners {
			if extra == 0 {
				break
			}
			stop = append(stop, r)
			delete(s.runners, sh)
			extra--
		}
		s.mu.Unlock()
		for _, r := range stop {
			r.cancel()
			<-r.done
			if err := store.ReleaseLease(ctx, s.cfg.DB, s.cfg.Owner, r.lease); err != nil {
				return err
			}
			s.log.Info("released shard", "shard", r.lease.Shard)
		}
	}
	for _, l := range start {
		r := s.newRunner(ctx, l)
		s.mu.Lock()
		s.runners[l.Shard] = r
		s.mu.Unlock()
		wg.Go(func() { r.run() })
	}
	return nil
}

// runner applies the commands of one shard while its lease holds.
type runner struct {
	s      *Scheduler
	lease  store.Lease
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	log    *slog.Logger
	// published are outbox rows JetStream has acknowledged and that are
	// not deleted yet: the next batch's transaction deletes them, or
	// flushPublished does when the shard is idle. Only the shard loop
	// touches it.
	published []int64
	// inflight are outbox rows published and not yet acknowledged.
	inflight []pending
	// tasks are the stream sequences of the shard's outstanding workflow
	// tasks, by execution (see taskQueued); taskStr the task stream.
	tasks   map[string]taskSeq
	taskStr jetstream.Stream
	// failing says the shard's last session failed and it has not applied
	// since; recorded that PostgreSQL may hold a failure mark for it.
	failing, recorded bool
	// delivered is the consumer delivery sequence of the last command the
	// session's shard loop took (see inOrder).
	delivered uint64
	// applied is the shard's applied stream sequence as this session last
	// committed it, or -1 when the session has not read it yet.
	applied int64
	// known are the running executions this session committed, for
	// batches applied without reads; emptied whenever applied is unknown.
	known execCache
}

func (s *Scheduler) newRunner(parent context.Context, l store.Lease) *runner {
	ctx, cancel := context.WithCancel(parent)
	return &runner{s: s, lease: l, ctx: ctx, cancel: cancel, done: make(chan struct{}), recorded: true, tasks: map[string]taskSeq{},
		log: s.log.With("shard", l.Shard, "epoch", l.Epoch)}
}

func (r *runner) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *runner) env() applyEnv {
	return applyEnv{shard: r.lease.Shard, shards: r.s.cfg.Topology.Shards(), window: r.s.cfg.StartIdempotencyWindow,
		outcomeTTL: r.s.cfg.Topology.OutcomeTTL(), wftTimeout: r.s.cfg.WorkflowTaskTimeout, taskQueued: r.taskQueued,
		maxTask: maxTask(r.s.cfg.Topology.JS.Conn()), log: r.log}
}

// taskHeaderRoom is what a task message's headers (its Nats-Msg-Id)
// take of NATS's max payload.
const taskHeaderRoom = 512

// maxTask is the largest task payload nc's server carries.
func maxTask(nc *nats.Conn) int {
	if mp := nc.MaxPayload(); mp > taskHeaderRoom {
		return int(mp) - taskHeaderRoom
	}
	return 0
}

// taskSeq is where the task stream holds an execution's outstanding
// workflow task.
type taskSeq struct {
	taskID int
	seq    uint64
}

// trackTask records the stream sequence JetStream acknowledged for an
// outbox row, if the row is a workflow task.
func (r *runner) trackTask(row *store.OutboxMsg, ack *jetstream.PubAck) {
	if ack == nil {
		return
	}
	if id, taskID, ok := parseWorkflowTaskMsgID(row.MsgID); ok {
		r.tasks[id] = taskSeq{taskID: taskID, seq: ack.Sequence}
	}
}

// forgetTasks drops what trackTask recorded of workflow tasks that
// completed, and of executions that closed.
func (r *runner) forgetTasks(w *store.Writes) {
	for _, ref := range w.WorkflowTasksDone {
		if t, ok := r.tasks[ref.ExecutionID]; ok && t.taskID <= ref.TaskID {
			delete(r.tasks, ref.ExecutionID)
		}
	}
	for _, id := range w.ExecutionsClosed {
		delete(r.tasks, id)
	}
}

// taskQueued says whether the task stream still holds the workflow task
// taskID of an execution: its message is in the stream until a worker
// acknowledges it, after publishing the task's result. Unknown (the task
// was published by an earlier runner) counts as not held, so a lost task
// is dispatched again; a stream that cannot be asked counts as held, so
// nothing is dispatched again while NATS is away.
func (r *runner) taskQueued(ctx context.Context, executionID string, taskID int) bool {
	t, ok := r.tasks[executionID]
	if !ok || t.taskID != taskID {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := r.taskStream(ctx)
	if err == nil {
		_, err = st.GetMsg(ctx, t.seq)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false
	}
	if err != nil {
		r.log.Warn("look up a workflow task in the task stream", "execution_id", executionID, "task_id", taskID, "err", err)
	}
	return true
}

// taskStream is the task stream's handle, looked up once per runner.
func (r *runner) taskStream(ctx context.Context) (jetstream.Stream, error) {
	if r.taskStr != nil {
		return r.taskStr, nil
	}
	st, err := r.s.cfg.Topology.JS.Stream(ctx, streams.TaskStream)
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", streams.TaskStream, err)
	}
	r.taskStr = st
	return st, nil
}

func (r *runner) consumerName() string { return fmt.Sprintf("harvest_sched_%d", r.lease.Shard) }

func (r *runner) run() {
	defer close(r.done)
	defer func() {
		if r.failing {
			r.s.metrics.failing.Dec()
		}
	}()
	r.log.Info("applying shard")
	const firstBackoff = 100 * time.Millisecond
	backoff := firstBackoff
	for r.ctx.Err() == nil {
		began := time.Now()
		err := r.session()
		if err == nil || r.ctx.Err() != nil {
			return
		}
		if errors.Is(err, store.ErrLeaseLost) {
			r.log.Warn("lease lost, stopping shard", "err", err)
			return
		}
		if time.Since(began) > 30*time.Second {
			backoff = firstBackoff // a failure after a long healthy session
		}
		wait := backoff
		if errors.Is(err, errDeliveryGap) {
			// Logged by inOrder; not a failure: the new session applies
			// the lost command almost at once.
			r.s.metrics.gaps.Inc()
			wait = firstBackoff
		} else {
			r.log.Warn("shard session failed, restarting", "err", err, "retry_in", wait)
			r.markFailing(err)
			backoff = min(backoff*2, 5*time.Second)
		}
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// markFailing records that the shard's session failed: in the gauge, and
// in PostgreSQL for the readiness checks of other processes (best effort:
// PostgreSQL down is a common cause).
func (r *runner) markFailing(err error) {
	r.s.metrics.failures.Inc()
	if !r.failing {
		r.failing = true
		r.s.metrics.failing.Inc()
	}
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	if rerr := store.RecordShardFailure(ctx, r.s.cfg.DB, r.lease.Shard, err.Error()); rerr == nil {
		r.recorded = true
	}
}

// markHealthy records that the shard applies again. A new runner starts
// with recorded set, to clear a mark an earlier owner left.
func (r *runner) markHealthy(ctx context.Context) {
	if r.failing {
		r.failing = false
		r.s.metrics.failing.Dec()
	}
	if r.recorded && store.ClearShardFailure(ctx, r.s.cfg.DB, r.lease.Shard) == nil {
		r.recorded = false
	}
}

// reconnectCheck is how often a session looks for a reconnection of its
// NATS connection.
const reconnectCheck = 500 * time.Millisecond

// healthyAfter is how long a session must run without an error before a
// shard that failed counts as healthy although it had nothing to apply.
const healthyAfter = 10 * time.Second

// session (re)creates the shard's consumer, so delivery restarts in stream
// order from the oldest unacknowledged command, publishes what an earlier
// owner left in the outbox, then applies batches until ctx ends or an error.
func (r *runner) session() error {
	ctx := r.ctx
	js := r.s.cfg.Topology.JS
	reconnects := js.Conn().Stats().Reconnects
	name := r.consumerName()
	if err := js.DeleteConsumer(ctx, streams.CommandStream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("reset consumer %s: %w", name, err)
	}
	cons, err := js.CreateConsumer(ctx, streams.CommandStream, jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: streams.CommandFilter(r.lease.Shard),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       r.s.cfg.AckWait,
		MaxAckPending: r.s.cfg.BatchSize * 4,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", name, err)
	}
	bound, err := store.BindShardStream(ctx, r.s.cfg.DB, r.s.cfg.Owner, r.lease, func(ctx context.Context) (time.Time, uint64, error) {
		st, err := js.Stream(ctx, streams.CommandStream)
		if err != nil {
			return time.Time{}, 0, fmt.Errorf("look up stream %s: %w", streams.CommandStream, err)
		}
		info := st.CachedInfo()
		return info.Created, info.State.LastSeq, nil
	})
	if err != nil {
		return err
	}
	if bound.Reset {
		r.log.Error("the command stream was created anew since this shard last applied from it: applying the new stream from its start; commands of the old stream that were not applied are lost with it",
			"stream", streams.CommandStream, "previous_stream_created", bound.Previous)
	}
	// Publishes of an earlier session are not waited for: their rows are
	// still in the outbox, and go again under their message ids.
	r.inflight = nil
	r.applied, r.known = -1, execCache{}
	r.delivered = 0
	if err := r.flushStoredOutbox(ctx); err != nil {
		return err
	}
	var got counts
	msgs := make(chan jetstream.Msg, r.s.cfg.BatchSize)
	consumeErr := make(chan error, 1)
	pullCtx, stopPull := context.WithCancel(ctx)
	var pulling conc.WaitGroup
	defer func() {
		stopPull()
		pulling.Wait()
	}()
	pulling.Go(func() {
		streams.Pull(pullCtx, js.Conn(), cons, r.s.cfg.BatchSize, func(m jetstream.Msg) {
			got.received.Add(1)
			select {
			case msgs <- m:
			case <-pullCtx.Done():
			}
		}, func(err error) {
			// The consumer is gone (a pull to a missing consumer has no
			// responder): a new session creates it again.
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrNoResponders) {
				select {
				case consumeErr <- err:
				default:
				}
				return
			}
			r.log.Warn("pull commands", "consumer", name, "err", err)
		})
	})
	timers := newTimerAlarm()
	defer timers.stop()
	if err := r.rearm(ctx, timers); err != nil {
		return err
	}
	// Published rows are deleted by the next batch's transaction; when
	// none comes for idleFlush, on their own.
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	var healthy <-chan time.Time
	if r.failing || r.recorded {
		t := time.NewTimer(healthyAfter)
		defer t.Stop()
		healthy = t.C
	}
	// A connection that broke may have lost a delivery on its way; one
	// that a later delivery follows is caught by inOrder, but the last one
	// before a quiet spell would wait out AckWait. A reconnection since the
	// consumer was created ends the session, which delivers it again.
	reconnected := time.NewTicker(reconnectCheck)
	defer reconnected.Stop()
	for {
		if len(r.inflight) > 0 || len(r.published) > 0 {
			flush.Reset(idleFlush)
		}
		var first jetstream.Msg
		select {
		case <-ctx.Done():
			return nil
		case err := <-consumeErr:
			return fmt.Errorf("consumer %s: %w", name, err)
		case <-reconnected.C:
			if n := js.Conn().Stats().Reconnects; n != reconnects {
				r.log.Info("the NATS connection was re-established: applying the shard again from its oldest unacknowledged command", "reconnects", n)
				return fmt.Errorf("%w: the connection to NATS was re-established", errDeliveryGap)
			}
			continue
		case <-healthy:
			healthy = nil
			r.markHealthy(ctx)
			continue
		case <-flush.C:
			if err := r.flushPublished(ctx); err != nil {
				return err
			}
			continue
		case <-timers.c():
			// A timer decides against commands that arrived before it was
			// due (a heartbeat, a result): apply those first.
			if err := r.catchUp(ctx, cons, msgs, &got, timers, time.Now()); err != nil {
				return err
			}
			if err := r.fireDueTimers(ctx); err != nil {
				return err
			}
			if err := r.rearm(ctx, timers); err != nil {
				return err
			}
			continue
		case first = <-msgs:
		}
		if err := r.applyFrom(ctx, first, msgs, &got, timers); err != nil {
			return err
		}
	}
}

// applyFrom applies first and whatever else is waiting in msgs, up to a
// batch, and arms the alarm for the timers the batch set.
func (r *runner) applyFrom(ctx context.Context, first jetstream.Msg, msgs <-chan jetstream.Msg, got *counts, timers *timerAlarm) error {
	batch := []jetstream.Msg{first}
drain:
	for len(batch) < r.s.cfg.BatchSize {
		select {
		case m := <-msgs:
			batch = append(batch, m)
		default:
			break drain
		}
	}
	// What follows a lost delivery waits for the new session, which
	// delivers it again first.
	n, gap := r.inOrder(batch)
	if n == 0 {
		return gap
	}
	batch = batch[:n]
	writes, err := r.applyBatch(ctx, batch)
	if err != nil {
		return err
	}
	r.s.metrics.applied.Add(float64(len(batch)))
	if r.failing || r.recorded {
		r.markHealthy(ctx)
	}
	if gap != nil {
		return gap
	}
	got.applied += uint64(len(batch))
	if meta, err := batch[len(batch)-1].Metadata(); err == nil && meta.Timestamp.After(got.newest) {
		got.newest = meta.Timestamp
	}
	for _, tm := range writes.NewTimers {
		timers.arm(tm.FireAt)
	}
	return nil
}

// errDeliveryGap says a delivery of the session's consumer never reached
// the shard loop: the session ends, and the next one applies the shard's
// commands again from the oldest unacknowledged.
var errDeliveryGap = errors.New("a command delivery was lost in flight")

// inOrder returns how many of msgs, from the first, continue the
// session's deliveries without a gap, and errDeliveryGap if one follows.
//
// The shard applies its commands in stream order, and skips a command at
// or below its applied sequence as one applied before. That holds only
// if no delivery is lost: the consumer delivers new commands in stream
// order, but one it sent on a connection that broke before the message
// arrived (a NATS server restarting gracefully keeps its consumers'
// state) is sent again only after AckWait, after later commands. Applying
// those first would move the applied sequence past it, and it would be
// skipped when it came back, never applied. Each delivery carries the
// consumer's delivery sequence, which grows by one per delivery, first
// or repeated; the session's consumer is new, so its first delivery is 1.
// A delivery that does not follow the previous one (a gap, or a sequence
// going back because the server lost the consumer's latest state) ends
// the session before anything after it is applied.
func (r *runner) inOrder(msgs []jetstream.Msg) (int, error) {
	for i, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			return i, fmt.Errorf("command metadata: %w", err)
		}
		if got := meta.Sequence.Consumer; got != r.delivered+1 {
			r.log.Warn("a command delivery was lost in flight: applying the shard again from its oldest unacknowledged command",
				"expected_delivery", r.delivered+1, "delivery", got, "stream_seq", meta.Sequence.Stream)
			return i, fmt.Errorf("%w: expected delivery %d, got %d (stream sequence %d)", errDeliveryGap, r.delivered+1, got, meta.Sequence.Stream)
		}
		r.delivered++
	}
	return len(msgs), nil
}

// counts are a session's deliveries: received by the consume callback,
// and applied by the shard loop (which alone touches applied).
type counts struct {
	received atomic.Uint64
	applied  uint64
	// newest is when JetStream stored the newest command applied.
	newest time.Time
}

// idleFlush is how long a shard with nothing to apply waits before it
// deletes its published outbox rows in a transaction of their own.
const idleFlush = 20 * time.Millisecond

// catchUpLimit bounds how long due timers wait for the commands ahead of
// them, so a shard under a steady stream of commands still fires them.
const catchUpLimit = 2 * time.Second

// catchUp applies the shard's commands that JetStream holds or has
// delivered but that are not applied yet, so that due timers see them:
// without it a heartbeat queued behind a busy shard could lose the race
// against its own heartbeat timeout.
//
// Commands are delivered in stream order, so once a command stored at or
// after due has been applied, every one stored before it has been too:
// that ends the catch-up on a shard that never runs dry.
func (r *runner) catchUp(ctx context.Context, cons jetstream.Consumer, msgs <-chan jetstream.Msg, got *counts, timers *timerAlarm, due time.Time) error {
	deadline := time.NewTimer(catchUpLimit)
	defer deadline.Stop()
	if !got.newest.Before(due) {
		return nil
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer info: %w", err)
		}
		// The session's consumer is new, so its delivery count is this
		// session's: everything it delivered has reached the callback
		// and been applied, and nothing is left to deliver.
		if info.NumPending == 0 && info.Delivered.Consumer <= got.received.Load() && got.applied == got.received.Load() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			r.log.Warn("firing timers before the shard caught up", "pending", info.NumPending, "delivered", info.Delivered.Consumer, "applied", got.applied)
			return nil
		case m := <-msgs:
			if err := r.applyFrom(ctx, m, msgs, got, timers); err != nil {
				return err
			}
			if !got.newest.Before(due) {
				return nil
			}
		}
	}
}

// timerAlarm wakes the shard loop when its earliest durable timer is due.
type timerAlarm struct {
	t     *time.Timer
	armed time.Time
}

func newTimerAlarm() *timerAlarm {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &timerAlarm{t: t}
}

func (a *timerAlarm) c() <-chan time.Time { return a.t.C }

// arm sets the alarm for at, unless it is set for earlier already.
func (a *timerAlarm) arm(at time.Time) {
	if !a.armed.IsZero() && !at.Before(a.armed) {
		return
	}
	a.armed = at
	a.t.Reset(max(time.Until(at), 0))
}

func (a *timerAlarm) reset() {
	a.t.Stop()
	a.armed = time.Time{}
}

func (a *timerAlarm) stop() { a.t.Stop() }

// rearm sets the alarm for the shard's earliest timer.
func (r *runner) rearm(ctx context.Context, a *timerAlarm) error {
	a.reset()
	at, ok, err := store.NextTimer(ctx, r.s.cfg.DB, r.lease.Shard)
	if err != nil {
		return err
	}
	if ok {
		a.arm(at)
	}
	return nil
}

// fireDueTimers applies the shard's due timers, a bounded batch per
// transaction, then publishes what they produced. A batch that fails for
// a reason retrying will not fix is fired again timer by timer, and a
// timer that fails alone is dropped, logged and counted, so that it does
// not stop the shard (isolateTimers).
func (r *runner) fireDueTimers(ctx context.Context) error {
	const limit = 256
	for {
		if err := r.reap(ctx, false); err != nil {
			return err
		}
		fired, err := r.fireTimersTx(ctx, limit, nil)
		if err != nil && poisonous(err) {
			fired, err = r.isolateTimers(ctx, limit, err)
		}
		if err != nil {
			return fmt.Errorf("fire timers: %w", err)
		}
		if fired < limit {
			return nil
		}
	}
}

// fireTimersTx fires up to limit due timers (only those of ids, when
// given) in one transaction and publishes what they produced; it returns
// how many it fired.
func (r *runner) fireTimersTx(ctx context.Context, limit int, ids []int64) (int, error) {
	var writes *store.Writes
	var fired int
	err := inPipeTx(ctx, r.s.cfg.DB, func(tx *pipeTx) error {
		applied, err := store.LockShard(ctx, tx, r.s.cfg.Owner, r.lease)
		if err != nil {
			return err
		}
		due, err := store.DueTimers(ctx, tx, r.lease.Shard, time.Now(), limit, ids...)
		if err != nil || len(due) == 0 {
			return err
		}
		fired = len(due)
		if writes, err = fireTimers(ctx, tx, r.env(), applied, due); err != nil {
			return err
		}
		writes.PublishedOutbox = r.published
		tx.commitWithNext()
		return store.Write(ctx, tx, writes)
	})
	if err != nil {
		return 0, err
	}
	if writes != nil {
		r.published = nil
		r.known.remember(writes)
		r.forgetTasks(writes)
		r.announce(writes.Outcomes)
		if err := r.publish(ctx, writes.Outbox); err != nil {
			return 0, err
		}
	}
	return fired, nil
}

// isolateTimers fires the due timers one per transaction after their
// batch failed for a reason retrying will not fix (cause); a timer that
// fails alone for such a reason is deleted. It returns how many timers it
// handled.
func (r *runner) isolateTimers(ctx context.Context, limit int, cause error) (int, error) {
	r.log.Warn("firing timers failed for a reason retrying will not fix: firing them one by one", "err", cause)
	due, err := store.DueTimers(ctx, r.s.cfg.DB, r.lease.Shard, time.Now(), limit)
	if err != nil {
		return 0, err
	}
	for _, tm := range due {
		_, err := r.fireTimersTx(ctx, 1, []int64{tm.ID})
		if err != nil && poisonous(err) {
			r.log.Error("dropping a timer that cannot fire", "execution_id", tm.ExecutionID, "kind", tm.Kind, "timer_id", tm.ID, "err", err)
			r.s.metrics.deadTimers.Inc()
			err = pgx.BeginFunc(ctx, r.s.cfg.DB, func(tx pgx.Tx) error {
				if _, err := store.LockShard(ctx, tx, r.s.cfg.Owner, r.lease); err != nil {
					return err
				}
				return store.DeleteTimer(ctx, tx, tm.ID)
			})
		}
		if err != nil {
			return 0, err
		}
	}
	return len(due), nil
}

// applyBatch applies msgs in one transaction, acknowledges them, then
// publishes the outbox rows the transaction wrote. A batch that fails for
// a reason retrying will not fix is applied again command by command, and
// the command that fails alone is set aside as dead (isolate).
func (r *runner) applyBatch(ctx context.Context, msgs []jetstream.Msg) (*store.Writes, error) {
	cmds := make([]seqCommand, 0, len(msgs))
	for _, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("command metadata: %w", err)
		}
		c := seqCommand{seq: meta.Sequence.Stream, subject: m.Subject(), raw: m.Data()}
		if err := json.Unmarshal(m.Data(), &c.cmd); err != nil {
			// A malformed command can never apply: it is set aside (its
			// sequence still advances) rather than block the shard.
			c.cmd = wire.Command{CommandID: msgCommandID(m)}
			c.dead = &deadReason{code: deadMalformed, reason: fmt.Sprintf("the message is not a command: %v", err)}
		} else if !validCommand(&c.cmd) {
			c.dead = &deadReason{code: deadMalformed, reason: fmt.Sprintf("the message is not a valid %q command", c.cmd.Kind)}
		}
		cmds = append(cmds, c)
	}
	// Rows of earlier batches JetStream has acknowledged since are
	// deleted by this batch's transaction.
	if err := r.reap(ctx, false); err != nil {
		return nil, err
	}
	writes, err := r.applyCommands(ctx, cmds, true)
	if err != nil && poisonous(err) {
		writes, err = r.isolate(ctx, cmds, err)
	}
	if err != nil {
		return nil, err
	}
	r.s.metrics.dead(writes.DeadCommands)
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			r.log.Warn("ack command", "err", err)
		}
	}
	r.announce(writes.Outcomes)
	return writes, r.publish(ctx, writes.Outbox)
}

// applyCommands applies cmds in one transaction and records what the
// runner keeps of it; the caller acknowledges, announces and publishes.
func (r *runner) applyCommands(ctx context.Context, cmds []seqCommand, readFree bool) (*store.Writes, error) {
	writes, err := r.applyTx(ctx, cmds, readFree)
	if readFree && (errors.Is(err, store.ErrClaimHeld) || errors.Is(err, store.ErrWorkflowIDTaken) || errors.Is(err, store.ErrFenced)) {
		// What the read-free apply assumed did not hold (a key or a
		// workflow id used before, or the fence): nothing was written.
		// Applied with reads, the batch finds what is there, and a fence
		// that fails again tells a lost lease (the runner stops) from a
		// moved sequence (a new session).
		writes, err = r.applyTx(ctx, cmds, false)
	}
	if err != nil {
		r.applied, r.known = -1, execCache{}
		return nil, fmt.Errorf("apply batch of %d commands: %w", len(cmds), err)
	}
	r.applied = writes.AppliedSeq
	r.known.remember(writes)
	r.forgetTasks(writes)
	if writes.PublishedOutbox != nil {
		r.published = nil
	}
	return writes, nil
}

// isolate applies cmds, whose batch failed for a reason retrying will not
// fix (cause), one per transaction, so that the others apply: a command
// that fails alone for such a reason is set aside as dead, with the
// error, in a transaction of its own; any other failure ends the session
// as before. It returns the writes of them all.
func (r *runner) isolate(ctx context.Context, cmds []seqCommand, cause error) (*store.Writes, error) {
	r.log.Warn("a batch failed for a reason retrying will not fix: applying its commands one by one", "commands", len(cmds), "err", cause)
	all := &store.Writes{Shard: r.lease.Shard}
	for _, c := range cmds {
		w, err := r.applyCommands(ctx, []seqCommand{c}, false)
		if err != nil && poisonous(err) && c.dead == nil {
			c.dead = &deadReason{code: deadUnappliable, reason: unappliableReason(err)}
			w, err = r.applyCommands(ctx, []seqCommand{c}, false)
		}
		if err != nil {
			return nil, err
		}
		all.AppliedSeq = w.AppliedSeq
		all.DeadCommands = append(all.DeadCommands, w.DeadCommands...)
		all.NewTimers = append(all.NewTimers, w.NewTimers...)
		all.Outcomes = append(all.Outcomes, w.Outcomes...)
		all.Outbox = append(all.Outbox, w.Outbox...)
	}
	return all, nil
}

// poisonous says whether err, failing an apply transaction, comes from
// what the commands carry, so that applying them again would fail again:
// PostgreSQL refusing a value (class 22, data exception: a NUL byte, an
// unsupported escape, a number out of range), a constraint (23), or a
// limit (54, a value too large or nested too deep), or pgx unable to
// encode a value for its column. Everything else —
// connections, timeouts, a lost lease, PostgreSQL shutting down, a
// statement the schema does not know (a deploy gone wrong) — is retried
// and never dead-letters a command.
func poisonous(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		// pgx could not encode a value for PostgreSQL (an integer out of
		// its column's range): the batch never left, and never will. Its
		// "build" step is client-side encoding only (the "prepare" step
		// talks to the server, and can fail for a broken connection); the
		// step is unexported, so it is read from the message.
		var pre pgx.ErrPreprocessingBatch
		return errors.As(err, &pre) && strings.HasPrefix(pre.Error(), "error preprocessing batch (build)")
	}
	if len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

// unappliableReason is err as a dead letter's reason: PostgreSQL's
// message, with its SQLSTATE.
func unappliableReason(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Sprintf("PostgreSQL refused it: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	return err.Error()
}

// msgCommandID is the command id a message's Nats-Msg-Id carries, for a
// command that does not decode: ids are "<command id>" or
// "<command id>/<suffix>".
func msgCommandID(m jetstream.Msg) string {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	if i := strings.IndexByte(id, '/'); i >= 0 {
		id = id[:i]
	}
	if _, err := uuid.Parse(id); err != nil {
		return ""
	}
	return id
}

// announce tells the ingest requests waiting on the outcomes a batch just
// committed, on core NATS: nothing is stored, since the outcomes are in
// PostgreSQL already, where a reader that misses the message finds them.
func (r *runner) announce(outcomes []store.OutcomeRow) {
	nc := r.s.cfg.Topology.JS.Conn()
	for _, o := range outcomes {
		if err := nc.Publish(streams.OutcomeSubject(o.CommandID), o.Payload); err != nil {
			r.log.Debug("announce outcome", "command_id", o.CommandID, "err", err)
		}
	}
}

// applyTx applies cmds in one transaction. With readFree, and the shard's
// applied sequence known, it first tries without reading PostgreSQL
// (applyEnv.known): the batch's reads are then assumed and checked by its
// writes, and the transaction is one round trip. A batch that cannot go
// without reads is applied with them in the same transaction, which has
// sent nothing yet.
func (r *runner) applyTx(ctx context.Context, cmds []seqCommand, readFree bool) (*store.Writes, error) {
	var (
		writes *store.Writes
		// held is what the read-free attempt logged: logged once its
		// writes commit, dropped if it is given up.
		held     *[]heldRecord
		freeUsed bool
	)
	// BEGIN goes with the reads and COMMIT with the writes (pipeTx).
	err := inPipeTx(ctx, r.s.cfg.DB, func(tx *pipeTx) error {
		env, applied := r.env(), r.applied
		var err error
		if applied >= 0 {
			// The shard's applied sequence is the one this session last
			// committed: apply locks the shard and checks it in the round
			// trip of its first reads, or in its writes when it reads
			// nothing.
			env.lock = &shardLock{owner: r.s.cfg.Owner, lease: r.lease}
			if readFree {
				free := env
				free.known = r.known
				free.log, held = newHeldLog(r.log.Handler())
				writes, err = apply(ctx, noReads{}, free, applied, cmds)
				if err != nil && !errors.Is(err, errNeedsReads) {
					return err
				}
				freeUsed = err == nil
			}
		} else if applied, err = store.LockShard(ctx, tx, r.s.cfg.Owner, r.lease); err != nil {
			return err
		}
		if writes == nil {
			if writes, err = apply(ctx, tx, env, applied, cmds); err != nil {
				return err
			}
		}
		if writes.AppliedSeq == applied {
			return nil // all redelivered
		}
		writes.PublishedOutbox = r.published
		tx.commitWithNext()
		return store.Write(ctx, tx, writes)
	})
	if err != nil {
		return nil, err
	}
	if freeUsed {
		release(ctx, *held)
	}
	return writes, nil
}

func validCommand(c *wire.Command) bool {
	switch c.Kind {
	case wire.KindStart:
		return c.Start != nil && c.Start.WorkflowName != "" && c.Start.WorkflowID != "" && c.Start.TaskQueue != ""
	case wire.KindWorkflowTaskCompleted:
		return c.WorkflowTask != nil && validUUID(c.WorkflowTask.ExecutionID)
	case wire.KindActivityResult:
		return c.Activity != nil && validUUID(c.Activity.ExecutionID)
	case wire.KindSignal:
		return c.Signal != nil && validUUID(c.Signal.ExecutionID) && c.Signal.SignalName != ""
	case wire.KindActivityHeartbeat:
		return c.Heartbeat != nil && validUUID(c.Heartbeat.ExecutionID)
	case wire.KindCancel:
		return c.Cancel != nil && validUUID(c.Cancel.ExecutionID)
	case wire.KindSignalWithStart:
		return c.Start != nil && c.Signal != nil && c.Start.WorkflowName != "" && c.Start.WorkflowID != "" && c.Signal.SignalName != ""
	}
	return false
}

func validUUID(s string) bool {
	return len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-'
}

// flushStoredOutbox publishes the rows an earlier owner (or an earlier
// session of this one) committed but did not get to publish.
func (r *runner) flushStoredOutbox(ctx context.Context) error {
	for {
		msgs, err := store.PendingOutbox(ctx, r.s.cfg.DB, r.lease.Shard, 1000)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return nil
		}
		if err := r.publish(ctx, msgs); err != nil {
			return err
		}
		if err := r.flushPublished(ctx); err != nil {
			return err
		}
	}
}

// flushPublished deletes the acknowledged outbox rows no batch has
// deleted yet.
func (r *runner) flushPublished(ctx context.Context) error {
	if err := r.reap(ctx, true); err != nil {
		return err
	}
	if len(r.published) == 0 {
		return nil
	}
	if err := store.DeleteOutbox(ctx, r.s.cfg.DB, r.published); err != nil {
		return err
	}
	r.published = nil
	return nil
}

// publish sends outbox rows asynchronously with their message ids and
// returns without waiting: the shard goes on to its next batch while
// JetStream acknowledges them, in order, on the one connection. reap
// collects the acknowledgements; rows are deleted once acknowledged (see
// published), and a failed publish restarts the session, which publishes
// every row still in the outbox again under its message id.
func (r *runner) publish(ctx context.Context, msgs []*store.OutboxMsg) error {
	if len(r.inflight)+len(msgs) > maxInflight {
		if err := r.reap(ctx, true); err != nil {
			return err
		}
	}
	js := r.s.cfg.Topology.JS
	for _, m := range msgs {
		nm := nats.NewMsg(m.Subject)
		nm.Data = m.Payload
		f, err := js.PublishMsgAsync(nm, jetstream.WithMsgID(m.MsgID))
		if err != nil {
			return fmt.Errorf("publish outbox row %d to %s: %w", m.ID, m.Subject, err)
		}
		r.inflight = append(r.inflight, pending{f: f, row: m})
	}
	return nil
}

// maxInflight bounds a shard's outbox rows published and not yet
// acknowledged.
const maxInflight = 4096

// pending is an outbox row published and not yet acknowledged.
type pending struct {
	f   jetstream.PubAckFuture
	row *store.OutboxMsg
}

// reap collects the acknowledgements that have come in (all of them, if
// wait), moving their rows to published.
func (r *runner) reap(ctx context.Context, wait bool) error {
	left := r.inflight[:0]
	for i, p := range r.inflight {
		if !wait {
			select {
			case ack := <-p.f.Ok():
				r.trackTask(p.row, ack)
				r.published = append(r.published, p.row.ID)
			case err := <-p.f.Err():
				r.inflight = append(left, r.inflight[i+1:]...)
				return fmt.Errorf("publish outbox row %d to %s: %w", p.row.ID, p.row.Subject, err)
			default:
				left = append(left, p)
			}
			continue
		}
		select {
		case ack := <-p.f.Ok():
			r.trackTask(p.row, ack)
			r.published = append(r.published, p.row.ID)
		case err := <-p.f.Err():
			r.inflight = append(left, r.inflight[i+1:]...)
			return fmt.Errorf("publish outbox row %d to %s: %w", p.row.ID, p.row.Subject, err)
		case <-ctx.Done():
			r.inflight = append(left, r.inflight[i:]...)
			return ctx.Err()
		}
	}
	clear(r.inflight[len(left):])
	r.inflight = left
	return nil
}
