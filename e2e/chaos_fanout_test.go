//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/examples"
)

// Fanout starts ride along with each trial's load, so that the decisions
// workflow code takes with the determinism helpers (a side effect's
// marker, a timer cancelled, goroutines and a channel, the workflow's
// time) are applied exactly once and replay as they ran under the
// trial's faults: a worker killed mid-fanout leaves its executions to
// another, which replays their histories.
//
// Each is a keyed start of the fanout example over a few items, with a
// deadline far beyond the trial. After the trial, every acknowledged one
// must have exactly one execution, Completed with every item squared, its
// batch id the value of its one MarkerRecorded, version 1 from its one
// VersionMarker, one TimerStarted and one TimerCancelled (the deadline,
// cancelled once every square was in).

var chaosFanout = flag.Int("chaos.fanout", 4, "chaos: fanout starts per trial (the determinism helpers' decisions under faults)")

// fanoutPlan is one fanout start.
type fanoutPlan struct {
	key    string
	items  []int
	at     time.Duration
	ingest int
}

func planFanout(rng *rand.Rand, prefix string, n int, window time.Duration) []fanoutPlan {
	plans := make([]fanoutPlan, n)
	for j := range plans {
		items := make([]int, 2+rng.IntN(4))
		for i := range items {
			items[i] = rng.IntN(1000)
		}
		plans[j] = fanoutPlan{key: fmt.Sprintf("fanout-%sf%02d", prefix, j), items: items,
			at: time.Duration(rng.Int64N(int64(window))), ingest: rng.IntN(2)}
	}
	return plans
}

func (p fanoutPlan) body() string {
	raw, _ := json.Marshal(map[string]any{"input": examples.FanoutInput{Items: p.items, Deadline: "1h"}})
	return string(raw)
}

// fanoutOutcome is what the client of one fanout start heard.
type fanoutOutcome struct {
	plan fanoutPlan
	*startOutcome
}

// runFanout sends the fanout starts at their times, retrying as the load
// does.
func (s *stack) runFanout(ctx context.Context, plans []fanoutPlan, giveUp time.Time) []*fanoutOutcome {
	starts := make([]sideStart, len(plans))
	for j, p := range plans {
		starts[j] = sideStart{key: p.key, body: p.body(), at: p.at, ingest: p.ingest}
	}
	heard := s.runSideStarts(ctx, examples.WorkflowFanout, starts, giveUp)
	out := make([]*fanoutOutcome, len(plans))
	for j, p := range plans {
		out[j] = &fanoutOutcome{plan: p, startOutcome: heard[j]}
	}
	return out
}

// fanoutExecution is a fanout execution and what its history holds.
type fanoutExecution struct {
	id, key, status string
	result          examples.FanoutResult
	events          map[string]int // by type
	markers         []string       // the MarkerRecorded values
}

// fanoutInvariants checks the trial's fanout starts, once they have all
// completed or the bound passed.
func (c *trialCheck) fanoutInvariants(ctx context.Context, outcomes []*fanoutOutcome) {
	if len(outcomes) == 0 {
		return
	}
	acked := map[string]bool{}
	for _, o := range outcomes {
		acked[o.plan.key] = o.acked()
	}
	execs, err := settle(ctx, c, acked, func(ctx context.Context) ([]fanoutExecution, error) {
		return c.fanoutExecutions(ctx, "fanout-"+c.prefix)
	}, func(e fanoutExecution) (string, string) { return e.key, e.status })
	if err != nil {
		c.res.fail("fanout: read the executions: %v", err)
		return
	}
	byKey := map[string][]fanoutExecution{}
	for _, e := range execs {
		byKey[e.key] = append(byKey[e.key], e)
	}
	var bad []string
	for _, o := range outcomes {
		p := o.plan
		got := byKey[p.key]
		switch {
		case len(got) > 1:
			bad = append(bad, fmt.Sprintf("%s: %d executions", p.key, len(got)))
			continue
		case len(got) == 0 && o.acked():
			bad = append(bad, p.key+": acknowledged, no execution")
			continue
		case len(got) == 0:
			continue
		}
		e := got[0]
		want := make([]int, len(p.items))
		sum := 0
		for i, v := range p.items {
			want[i] = v * v
			sum += v * v
		}
		switch {
		case e.status != "Completed":
			bad = append(bad, fmt.Sprintf("%s: %s, not Completed within %s", p.key, e.status, c.cfg.bound))
		case !slices.Equal(e.result.Squares, want) || e.result.Sum != sum || e.result.Done != len(p.items) || e.result.TimedOut:
			bad = append(bad, fmt.Sprintf("%s: result %+v for items %v", p.key, e.result, p.items))
		case e.result.Version != 1 || e.events["VersionMarker"] != 1:
			bad = append(bad, fmt.Sprintf("%s: version %d, %d version markers", p.key, e.result.Version, e.events["VersionMarker"]))
		case len(e.markers) != 1 || e.markers[0] != e.result.BatchID:
			bad = append(bad, fmt.Sprintf("%s: batch id %q, recorded %q", p.key, e.result.BatchID, e.markers))
		case e.events["TimerStarted"] != 1 || e.events["TimerCancelled"] != 1 || e.events["WorkflowCompleted"] != 1:
			bad = append(bad, fmt.Sprintf("%s: history holds %v", p.key, e.events))
		default:
			c.res.FanoutCompleted++
		}
	}
	if len(bad) > 0 {
		c.res.Other += len(bad)
		c.res.fail("fanout: %d wrong: %s", len(bad), strings.Join(bad, "; "))
	}
}

// fanoutExecutions reads the fanout executions whose keys start with
// prefix, with their histories' event counts and markers.
func (c *trialCheck) fanoutExecutions(ctx context.Context, prefix string) ([]fanoutExecution, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []fanoutExecution
	err := c.st.queryAll(qctx, `
		SELECT e.execution_id::text, e.idempotency_key, e.status, coalesce(e.result::text, 'null'),
			(SELECT coalesce(json_object_agg(t, n), '{}')::text FROM (SELECT type AS t, count(*) AS n FROM history_events h
				WHERE h.execution_id = e.execution_id GROUP BY type) c),
			(SELECT coalesce(json_agg(h.attrs->'value' ORDER BY h.seq), '[]')::text FROM history_events h
				WHERE h.execution_id = e.execution_id AND h.type = 'MarkerRecorded')
		FROM executions e WHERE e.workflow_name = $1 AND starts_with(e.idempotency_key, $2)`,
		[]any{examples.WorkflowFanout, prefix}, func(rows pgx.Rows) error {
			var e fanoutExecution
			var result, events, markers string
			if err := rows.Scan(&e.id, &e.key, &e.status, &result, &events, &markers); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(result), &e.result); err != nil {
				return fmt.Errorf("execution %s: result %s: %w", e.id, result, err)
			}
			if err := json.Unmarshal([]byte(events), &e.events); err != nil {
				return fmt.Errorf("execution %s: events %s: %w", e.id, events, err)
			}
			if err := json.Unmarshal([]byte(markers), &e.markers); err != nil {
				return fmt.Errorf("execution %s: markers %s: %w", e.id, markers, err)
			}
			out = append(out, e)
			return nil
		})
	return out, err
}

// sideStart is one start of a trial's side load (fanout, chaos_flaky):
// its key, body, when it is sent and through which ingest.
type sideStart struct {
	key, body string
	at        time.Duration
	ingest    int
}

// startOutcome is what the client of one side start heard.
type startOutcome struct {
	mu      sync.Mutex
	answers []answer
}

func (o *startOutcome) acked() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.ContainsFunc(o.answers, answer.ok)
}

// runSideStarts sends starts of workflow at their times, retrying as the
// load does, and returns what each heard, in starts' order.
func (s *stack) runSideStarts(ctx context.Context, workflow string, starts []sideStart, giveUp time.Time) []*startOutcome {
	begin := time.Now()
	out := make([]*startOutcome, len(starts))
	var wg sync.WaitGroup
	for j, st := range starts {
		o := &startOutcome{}
		out[j] = o
		wg.Go(func() {
			if !sendAt(ctx, begin.Add(st.at)) {
				return
			}
			s.startRetrying(ctx, workflow, st.ingest, st.key, st.body, giveUp, func(a answer) {
				o.mu.Lock()
				o.answers = append(o.answers, a)
				o.mu.Unlock()
			})
		})
	}
	wg.Wait()
	return out
}

// settle reads a side load's executions until every acknowledged start
// (acked, by key) has one and all of them completed, or the trial's bound
// passed, and returns the last read. keyOf gives an execution's key and
// status.
func settle[E any](ctx context.Context, c *trialCheck, acked map[string]bool, read func(context.Context) ([]E, error),
	keyOf func(E) (string, string)) ([]E, error) {
	deadline := time.Now().Add(c.cfg.bound)
	for {
		execs, err := read(ctx)
		// Settled: every acknowledged start has its execution (one
		// answered 202 accepted may still be in the stream while its
		// shard is leased again), and every execution completed.
		done := err == nil
		have := map[string]bool{}
		for _, e := range execs {
			key, status := keyOf(e)
			have[key] = true
			done = done && status == "Completed"
		}
		for key, ok := range acked {
			done = done && (have[key] || !ok)
		}
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			return execs, err
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
}
