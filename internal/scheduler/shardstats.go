package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
)

// The backlog of the shards a scheduler holds is read when Prometheus
// scrapes, not kept up to date as commands and timers come and go: the
// shard loop does no work for it, and a process nobody scrapes asks
// nothing. One scrape costs two JetStream requests (the command stream,
// then its consumers' infos in one listing) and one PostgreSQL query
// (the held shards' timers, by shard), bounded by shardStatsTimeout; the
// answer is kept for shardStatsTTL (or until the scheduler takes or gives
// up a shard), so several Prometheus servers scraping at once cost one
// lookup. A lookup that fails or times out
// reports nothing for what it could not read (the series are absent,
// rather than stale), and is logged.
const (
	shardStatsTimeout = 2 * time.Second
	shardStatsTTL     = 5 * time.Second
)

// shardStats is the collector of the held shards' backlog.
type shardStats struct {
	s       *Scheduler
	pending *prometheus.Desc
	timers  *prometheus.Desc
	due     *prometheus.Desc
	// now is time.Now, but for tests.
	now func() time.Time

	mu     sync.Mutex
	at     time.Time
	held   []int
	cached []prometheus.Metric
}

func newShardStats(s *Scheduler) *shardStats {
	shard := []string{"shard"}
	return &shardStats{
		s: s, now: time.Now,
		pending: prometheus.NewDesc("harvest_scheduler_pending_commands",
			"Commands of a shard this scheduler holds that are not applied yet: the shard consumer's undelivered and unacknowledged messages (JetStream consumer info, read at scrape time). The shard's lag.",
			shard, nil),
		timers: prometheus.NewDesc("harvest_scheduler_timers_pending",
			"Durable timers of a shard this scheduler holds, waiting to fire (read from PostgreSQL at scrape time).",
			shard, nil),
		due: prometheus.NewDesc("harvest_scheduler_timers_due",
			"Durable timers of a shard this scheduler holds whose time has come and that have not fired yet (read at scrape time); one that keeps growing means timers fire late.",
			shard, nil),
	}
}

func (c *shardStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.timers
	ch <- c.due
}

func (c *shardStats) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	held := c.s.OwnedShards()
	slices.Sort(held)
	// A shard taken or given up since is read at once.
	if now := c.now(); c.cached == nil || now.Sub(c.at) > shardStatsTTL || !slices.Equal(held, c.held) {
		c.cached, c.at, c.held = c.lookup(held), now, held
	}
	for _, m := range c.cached {
		ch <- m
	}
}

// lookup reads the backlog of the shards held.
func (c *shardStats) lookup(held []int) []prometheus.Metric {
	out := []prometheus.Metric{}
	if len(held) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), shardStatsTimeout)
	defer cancel()
	pending, err := c.pendingCommands(ctx, held)
	if err != nil {
		c.s.log.Warn("metrics: read the shards' pending commands", "err", err)
	}
	for _, sh := range held {
		if n, ok := pending[sh]; ok {
			out = append(out, prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(n), strconv.Itoa(sh)))
		}
	}
	timers, err := store.CountTimers(ctx, c.s.cfg.DB, held, time.Now())
	if err != nil {
		c.s.log.Warn("metrics: count the shards' timers", "err", err)
		return out
	}
	for _, sh := range held {
		t := timers[sh]
		out = append(out,
			prometheus.MustNewConstMetric(c.timers, prometheus.GaugeValue, float64(t.Pending), strconv.Itoa(sh)),
			prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(t.Due), strconv.Itoa(sh)))
	}
	return out
}

// pendingCommands is each held shard's consumer's undelivered and
// unacknowledged commands, by shard; a shard whose consumer is not in
// place (its session is starting) is left out.
func (c *shardStats) pendingCommands(ctx context.Context, held []int) (map[int]uint64, error) {
	st, err := c.s.cfg.Topology.JS.Stream(ctx, broker.CommandStream)
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", broker.CommandStream, err)
	}
	byName := make(map[string]int, len(held))
	for _, sh := range held {
		byName[consumerName(sh)] = sh
	}
	out := make(map[int]uint64, len(held))
	list := st.ListConsumers(ctx)
	for info := range list.Info() {
		if sh, ok := byName[info.Name]; ok {
			out[sh] = info.NumPending + uint64(info.NumAckPending)
		}
	}
	if err := list.Err(); err != nil {
		return out, fmt.Errorf("list the consumers of %s: %w", broker.CommandStream, err)
	}
	return out, nil
}
