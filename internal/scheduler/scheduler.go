package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/historypage"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/store"
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
	// DB is the store the scheduler applies the shards of: store Store
	// of Topology.Layout() (0, the first, by default).
	DB       *pgxpool.Pool
	Store    int
	Topology *broker.Topology
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
	// KeepInterval paces the keepers that hold the work-queue streams'
	// last blocks on file storage (broker.Topology.Keep), default
	// broker.KeepInterval; below 0, none. Only the scheduler of the first
	// store keeps them, one per process.
	KeepInterval time.Duration
	// WorkflowTaskTimeout is a dispatched workflow task's deadline,
	// default 10 s: a task not completed by then is looked for in the task
	// stream, and dispatched again if the stream no longer holds it (the
	// task or its result was lost); one still held is looked at again
	// later, the wait doubling up to 5 minutes.
	WorkflowTaskTimeout time.Duration
	// SweepInterval paces the deletion of expired start claims and
	// command outcomes, default 1 minute; each round deletes all that have
	// expired, in batches of SweepBatchSize (default 1000) with PrunePause
	// between two, so that the tables stay bounded whatever the rate.
	// Correctness never depends on the sweep: expired claims are ignored
	// and taken over where read, expired outcomes ignored.
	SweepInterval  time.Duration
	SweepBatchSize int
	// Retention is how long a closed execution stays, counted from its
	// close, default 7 days (DefaultRetention); RetentionByWorkflow
	// overrides it by workflow. It is fixed when an execution closes
	// (its prune_after). Neither may be shorter than
	// StartIdempotencyWindow.
	Retention           time.Duration
	RetentionByWorkflow map[string]time.Duration
	// PinnedWorkflows are the workflows configured with versioning:
	// pinned (workflows.<name>.versioning): a start of one that names no
	// versioning is pinned to the build that runs its first workflow task
	// (docs/versioning.md#pinned-workflows).
	PinnedWorkflows map[string]bool
	// CancelGraceByWorkflow bounds, by workflow, how long an execution
	// asked to cancel may run before it is terminated
	// (workflows.<name>.cancel_grace); a cancel's own grace overrides
	// it. A workflow without one has no bound: its code closes it.
	CancelGraceByWorkflow map[string]time.Duration
	// SearchAttributes are the search attributes each workflow declares
	// (workflows.<name>.search_attributes): a workflow task that sets
	// another, or a value of another type, fails
	// (docs/search-attributes.md).
	SearchAttributes searchattr.Schema
	// TimeoutsByWorkflow are the workflows' run and execution timeouts
	// (workflows.<name>.run_timeout, .execution_timeout); a start's own
	// override them.
	TimeoutsByWorkflow map[string]WorkflowTimeouts
	// DeclaredWorkflows are the workflows the configuration declares, each
	// with its task queue ("" for default): a child workflow's start of one
	// on that queue goes on while no worker serves it.
	DeclaredWorkflows map[string]string
	// HistoryLimits are what each execution's history is held to: past
	// a warning threshold it carries a warning, past a hard limit it
	// fails with HistoryLimitExceeded, past a suggestion threshold its
	// code is told to continue as new. Zero fields mean the defaults
	// (10,000 events or 10 MiB; 50,000 or 50 MiB; 4,096 or 4 MiB).
	HistoryLimits HistoryLimits
	// PruneBatchSize, PrunePause, PruneRest and PruneInterval pace the
	// pruner (retention.go); zero means the defaults.
	PruneBatchSize int
	PrunePause     time.Duration
	PruneRest      float64
	PruneInterval  time.Duration
	// Now is the pruner's clock, default time.Now: an execution is pruned
	// once Now passes its prune_after.
	Now func() time.Time
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
	// Metrics is the registry the scheduler's metrics go to; default a
	// fresh one. Its shards' backlog (pending commands and timers) is read
	// when the registry is gathered (shardstats.go).
	Metrics prometheus.Registerer
	Logger  *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), dedup.NewID()[24:])
	}
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.StartIdempotencyWindow = cmp.Or(c.StartIdempotencyWindow, DefaultStartIdempotencyWindow)
	c.AckWait = cmp.Or(c.AckWait, DefaultAckWait)
	c.WorkflowTaskTimeout = cmp.Or(c.WorkflowTaskTimeout, DefaultWorkflowTaskTimeout)
	c.SweepInterval = cmp.Or(c.SweepInterval, time.Minute)
	c.SweepBatchSize = cmp.Or(c.SweepBatchSize, 1000)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.PruneBatchSize = cmp.Or(c.PruneBatchSize, DefaultPruneBatchSize)
	c.PrunePause = cmp.Or(c.PrunePause, DefaultPrunePause)
	c.PruneRest = cmp.Or(c.PruneRest, DefaultPruneRest)
	c.PruneInterval = cmp.Or(c.PruneInterval, DefaultPruneInterval)
	if c.Now == nil {
		c.Now = time.Now
	}
	c.CallbackPollInterval = cmp.Or(c.CallbackPollInterval, time.Second)
	c.CallbackMaxAttempts = cmp.Or(c.CallbackMaxAttempts, callback.DefaultMaxAttempts)
	if c.CallbackRetryDelay == nil {
		c.CallbackRetryDelay = callback.RetryDelay
	}
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.Metrics = cmp.Or[prometheus.Registerer](c.Metrics, prometheus.NewRegistry())
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("scheduler config: DB is required")
	case c.Topology == nil:
		return errors.New("scheduler config: Topology is required")
	case c.Store < 0 || c.Store >= c.Topology.Layout().Set.Len():
		return fmt.Errorf("scheduler config: Store %d: the deployment has stores 0 to %d", c.Store, c.Topology.Layout().Set.Len()-1)
	case c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < 100*time.Millisecond):
		return fmt.Errorf("scheduler config: LeaseTTL %s: want at least 100ms", c.LeaseTTL)
	case c.BatchSize < 0:
		return fmt.Errorf("scheduler config: BatchSize %d: want a positive number", c.BatchSize)
	case c.WorkflowTaskTimeout < 0 || (c.WorkflowTaskTimeout > 0 && c.WorkflowTaskTimeout < 100*time.Millisecond):
		return fmt.Errorf("scheduler config: WorkflowTaskTimeout %s: want at least 100ms", c.WorkflowTaskTimeout)
	case c.StartIdempotencyWindow < 0:
		return fmt.Errorf("scheduler config: StartIdempotencyWindow %s: want a positive duration", c.StartIdempotencyWindow)
	case c.Retention < 0:
		return fmt.Errorf("scheduler config: retention %s: want a positive duration", c.Retention)
	case c.PruneBatchSize < 0:
		return fmt.Errorf("scheduler config: PruneBatchSize %d: want a positive number", c.PruneBatchSize)
	case c.PruneRest < 0:
		return fmt.Errorf("scheduler config: PruneRest %g: want a positive number", c.PruneRest)
	}
	if err := checkRetention(cmp.Or(c.Retention, DefaultRetention), c.RetentionByWorkflow,
		cmp.Or(c.StartIdempotencyWindow, DefaultStartIdempotencyWindow)); err != nil {
		return fmt.Errorf("scheduler config: %w", err)
	}
	if err := c.HistoryLimits.Validate(); err != nil {
		return fmt.Errorf("scheduler config: %w", err)
	}
	return nil
}

// Scheduler owns shard leases and applies their commands.
type Scheduler struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	// shardStats reports the held shards' backlog when the metrics are
	// gathered.
	shardStats *shardStats
	retention  *retentionMetrics
	pruneWake  chan struct{}
	// pruneSub takes the requests to prune now (broker.PruneSubject).
	pruneSub *nats.Subscription
	// pages answers workers' requests for the history pages of the
	// store's executions (internal/historypage).
	pages *historypage.Server
	// workers mirrors the live workers' registrations, for the starts of
	// child workflows (knownWorkflow); nil until Start.
	workers *registry.Index

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
	s := &Scheduler{cfg: cfg, log: cfg.Logger.With("owner", cfg.Owner), runners: map[int]*runner{}, pruneWake: make(chan struct{}, 1)}
	s.shardStats = newShardStats(s)
	m, err := newMetrics(cfg.Metrics, cfg.Owner, func() int { return len(s.OwnedShards()) }, s.shardStats)
	if err != nil {
		return nil, fmt.Errorf("scheduler metrics: %w", err)
	}
	s.metrics = m
	s.retention = newRetentionMetrics(s)
	if err := s.retention.register(cfg.Metrics); err != nil {
		return nil, fmt.Errorf("scheduler metrics: %w", err)
	}
	return s, nil
}

// Owner is the name this scheduler holds leases under.
func (s *Scheduler) Owner() string { return s.cfg.Owner }

// Start prepares the shard rows and starts taking leases in the
// background. It returns once the first lease round has run.
func (s *Scheduler) Start(ctx context.Context) error {
	if err := store.EnsureShardRange(ctx, s.cfg.DB, s.cfg.Topology.Layout().Base(s.cfg.Store), s.cfg.Topology.Shards()); err != nil {
		return err
	}
	s.mu.Lock()
	if s.cancel != nil {
		s.mu.Unlock()
		return errors.New("scheduler already started")
	}
	sub, err := s.cfg.Topology.JS.Conn().Subscribe(broker.PruneSubject, s.handlePruneRequest)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("subscribe to %s: %w", broker.PruneSubject, err)
	}
	s.pruneSub = sub
	// Workers fetch the histories of this store's executions from here
	// (and from ingest): a scheduler runs wherever tasks are dispatched.
	pages, err := historypage.Serve(s.cfg.Topology.JS.Conn(), map[int]*pgxpool.Pool{s.cfg.Store: s.cfg.DB}, s.log)
	if err != nil {
		_ = sub.Unsubscribe()
		s.pruneSub = nil
		s.mu.Unlock()
		return err
	}
	s.pages = pages
	if s.cfg.Topology != nil && s.cfg.Topology.Workers != nil && s.workers == nil {
		workers := registry.NewIndex(s.cfg.Topology.Workers, s.log)
		if err := workers.Start(ctx); err != nil {
			s.log.Warn("follow the workers' registrations; every child workflow's start counts as served", "err", err)
		} else {
			s.workers = workers
		}
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
	cancel, done, sub, pages, workers := s.cancel, s.done, s.pruneSub, s.pages, s.workers
	s.pruneSub, s.pages, s.workers = nil, nil, nil
	s.mu.Unlock()
	if workers != nil {
		workers.Close()
	}
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	pages.Stop()
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
