package broker

import (
	"cmp"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest/internal/placement"
)

// Defaults for Config's zero values.
const (
	DefaultShards     = 16
	DefaultDuplicates = 2 * time.Minute
	DefaultOutcomeTTL = 24 * time.Hour
	// DefaultWorkerTTL is how long a worker's registration lasts unrenewed;
	// workers renew theirs every third of it.
	DefaultWorkerTTL = 30 * time.Second
	// DefaultRetention is the scheduler's default retention of a closed
	// execution (scheduler.DefaultRetention): 7 days.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultCommandMaxBytes and DefaultTaskMaxBytes bound the command and
	// task streams: 1 GiB each.
	DefaultCommandMaxBytes int64 = 1 << 30
	DefaultTaskMaxBytes    int64 = 1 << 30
	// MinStreamMaxBytes is the least max bytes a stream may be given: more
	// than the largest message NATS carries by default (1 MiB), so that a
	// large command is refused as too large, never as a full stream.
	MinStreamMaxBytes int64 = 4 << 20
)

// Config describes the topology. Zero values mean the documented defaults.
type Config struct {
	// Shards is the number of logical shards of the command stream,
	// default 16. It is fixed for a deployment's life.
	Shards int
	// Duplicates is the window in which JetStream drops a message whose
	// Nats-Msg-Id it has seen, default 2 minutes.
	Duplicates time.Duration
	// OutcomeTTL is how long command outcomes stay readable, default 24h;
	// at least Duplicates, since after the broker's window a redelivered
	// webhook is recognised by its outcome. Outcomes are PostgreSQL rows
	// (store.GetOutcome), deleted once expired; the accepted and cancelled
	// buckets keep their keys this long too.
	OutcomeTTL time.Duration
	// WorkerTTL is how long a worker's registration of the workflows and
	// activities it serves lasts unless renewed, default 30 s, at least
	// 1 s: the max age of the workers bucket. Workers read it from the
	// bucket and renew every third of it.
	WorkerTTL time.Duration
	// Replicas of each stream and bucket, default 1. A stream or bucket
	// declared with another count is changed in place; the consumers that
	// do not set their own follow their stream.
	Replicas int
	// Retention is the deployment's retention of closed executions,
	// default 7 days (DefaultRetention), at least 1 s: the max age of the
	// effect ledger's entries and of the task stream's messages. A
	// ledger entry is written again each time an activity attempt finds
	// it (harvest.Once), so it lives Retention after its last use:
	// attempts of one activity invocation come while its execution runs,
	// minutes apart under any usual retry policy, so an effect is
	// remembered for as long as anything can ask for it again, and no
	// longer than its closed execution is kept. A task older than
	// Retention is past any use (the scheduler has dispatched a lost
	// workflow task again at its deadline, and retried a lost activity
	// attempt at its start-to-close timeout) unless an activity's
	// start-to-close is longer; only a queue no worker serves, or
	// workers away that long, lets a task get so old.
	Retention time.Duration
	// CommandMaxBytes bounds the command stream, default 1 GiB, at least
	// MinStreamMaxBytes. The stream is a work queue that the schedulers
	// drain; it fills only while they do not apply commands (PostgreSQL
	// down, schedulers stopped). Full, it refuses new commands
	// (ErrStreamFull): ingest answers 503 and a worker keeps its result
	// and tries again, and nothing already accepted is dropped.
	CommandMaxBytes int64
	// TaskMaxBytes bounds the task stream, default 1 GiB, at least
	// MinStreamMaxBytes. It fills while workers do not take tasks (none
	// running, or a queue none serves). Full, it refuses new tasks: the
	// scheduler keeps them in its outbox and publishes them again.
	TaskMaxBytes int64
	// MemoryStorage keeps streams in memory (tests only); default file.
	MemoryStorage bool
	// Stores are the deployment's PostgreSQL stores, each with Shards
	// shards of the command stream (placement.Layout); nil is one store.
	Stores *placement.Set
}

func (c Config) withDefaults() Config {
	c.Shards = cmp.Or(c.Shards, DefaultShards)
	c.Duplicates = cmp.Or(c.Duplicates, DefaultDuplicates)
	c.OutcomeTTL = cmp.Or(c.OutcomeTTL, DefaultOutcomeTTL)
	c.WorkerTTL = cmp.Or(c.WorkerTTL, DefaultWorkerTTL)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.CommandMaxBytes = cmp.Or(c.CommandMaxBytes, DefaultCommandMaxBytes)
	c.TaskMaxBytes = cmp.Or(c.TaskMaxBytes, DefaultTaskMaxBytes)
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Shards < 1 || c.Shards > 4096:
		return fmt.Errorf("streams config: Shards %d: want 1..4096", c.Shards)
	case c.Duplicates < time.Second:
		return fmt.Errorf("streams config: Duplicates %s: want at least 1s", c.Duplicates)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("streams config: Replicas %d: want 1..5", c.Replicas)
	case c.WorkerTTL < time.Second:
		return fmt.Errorf("streams config: WorkerTTL %s: want at least 1s", c.WorkerTTL)
	case c.OutcomeTTL < c.Duplicates:
		return fmt.Errorf("streams config: OutcomeTTL %s: want at least the duplicate window (%s)", c.OutcomeTTL, c.Duplicates)
	case c.Retention < time.Second:
		return fmt.Errorf("streams config: Retention %s: want at least 1s", c.Retention)
	case c.Retention < c.Duplicates:
		// The task stream's duplicate window may not exceed its max age.
		return fmt.Errorf("streams config: Retention %s: want at least the duplicate window (%s)", c.Retention, c.Duplicates)
	case c.CommandMaxBytes < MinStreamMaxBytes:
		return fmt.Errorf("streams config: CommandMaxBytes %d: want at least %d", c.CommandMaxBytes, MinStreamMaxBytes)
	case c.TaskMaxBytes < MinStreamMaxBytes:
		return fmt.Errorf("streams config: TaskMaxBytes %d: want at least %d", c.TaskMaxBytes, MinStreamMaxBytes)
	}
	return nil
}
