package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The chaos suite's load of failing workflow tasks (issue 33): each
// trial starts a few executions of chaos_flaky (e2e/testdata/fleetworker),
// whose code panics for its first 1.5 s, so that their first tasks fail
// on the worker and are reported (wft_failed) while the trial's faults
// land. After the trial every acknowledged start must have exactly one
// execution, Completed with its result and no longer marked
// task_failing: the failures were reported, retried after their backoff
// and cleared by the task that completed, whatever the faults did to the
// processes in between.

const workflowFlaky = "chaos_flaky"

// flakyBrokenFor is how long after its start a chaos_flaky execution's
// code panics (e2e/testdata/fleetworker).
const flakyBrokenFor = 1500 * time.Millisecond

var chaosFlaky = flag.Int("chaos.flaky", 2, "chaos: chaos_flaky starts per trial (workflow tasks that fail, are reported and retried, under faults)")

func planFlaky(rng *rand.Rand, prefix string, n int, window time.Duration) []sideStart {
	plans := make([]sideStart, n)
	for j := range plans {
		plans[j] = sideStart{key: fmt.Sprintf("flaky-%sk%02d", prefix, j), body: `{"input": {}}`,
			at: time.Duration(rng.Int64N(int64(window))), ingest: rng.IntN(2)}
	}
	return plans
}

// runFlaky sends the chaos_flaky starts at their times, retrying as the
// load does.
func (s *stack) runFlaky(ctx context.Context, plans []sideStart, giveUp time.Time) []*startOutcome {
	return s.runSideStarts(ctx, workflowFlaky, plans, giveUp)
}

// flakyExecution is a chaos_flaky execution as PostgreSQL holds it.
type flakyExecution struct {
	id, key, status, result string
	failing                 bool
	// firstTask is the task id of its first WorkflowTaskCompleted: a
	// failed task records nothing but uses its id, so a first completed
	// task after 1 means the failures were reported and retried.
	firstTask int
	// firstAfter is how long after the execution's start its first
	// workflow task completed. A task 1 that a fault kept from any worker
	// for the code's whole broken window (its consumer lost with a NATS
	// server, say) runs after it and does not panic; one that completed
	// within the window cannot have run the broken code.
	firstAfter time.Duration
}

// flakyInvariants checks the trial's chaos_flaky starts, once they have
// all completed or the bound passed.
func (c *trialCheck) flakyInvariants(ctx context.Context, plans []sideStart, outcomes []*startOutcome) {
	if len(outcomes) == 0 {
		return
	}
	acked := map[string]bool{}
	for j, o := range outcomes {
		acked[plans[j].key] = o.acked()
	}
	execs, err := settle(ctx, c, acked, func(ctx context.Context) ([]flakyExecution, error) {
		return c.flakyExecutions(ctx, "flaky-"+c.prefix)
	}, func(e flakyExecution) (string, string) { return e.key, e.status })
	if err != nil {
		c.res.fail("flaky: read the executions: %v", err)
		return
	}
	byKey := map[string][]flakyExecution{}
	for _, e := range execs {
		byKey[e.key] = append(byKey[e.key], e)
	}
	var bad []string
	for j, o := range outcomes {
		key := plans[j].key
		got := byKey[key]
		switch {
		case len(got) > 1:
			bad = append(bad, fmt.Sprintf("%s: %d executions", key, len(got)))
			continue
		case len(got) == 0 && o.acked():
			bad = append(bad, fmt.Sprintf("%s: acknowledged, no execution", key))
			continue
		case len(got) == 0:
			continue
		}
		e := got[0]
		switch {
		case e.status != "Completed":
			bad = append(bad, fmt.Sprintf("%s: %s, not Completed within %s", key, e.status, c.cfg.bound))
		case e.result != `"recovered"`:
			bad = append(bad, fmt.Sprintf("%s: result %s", key, e.result))
		case e.failing:
			bad = append(bad, fmt.Sprintf("%s: Completed and still marked task_failing", key))
		case e.firstTask < 2 && e.firstAfter < flakyBrokenFor:
			bad = append(bad, fmt.Sprintf("%s: its first completed workflow task is task %d, %s after its start: no failure was reported",
				key, e.firstTask, e.firstAfter))
		case e.firstTask < 2:
			// Task 1 reached a worker only after the broken window.
			c.res.FlakyRecovered++
		default:
			c.res.FlakyRecovered++
		}
	}
	if len(bad) > 0 {
		c.res.Other += len(bad)
		c.res.fail("flaky: %d wrong: %s", len(bad), strings.Join(bad, "; "))
	}
}

// flakyExecutions reads the chaos_flaky executions whose keys start with
// prefix.
func (c *trialCheck) flakyExecutions(ctx context.Context, prefix string) ([]flakyExecution, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []flakyExecution
	err := c.st.queryAll(qctx, `SELECT e.execution_id::text, e.idempotency_key, e.status, coalesce(e.result::text, 'null'), e.task_failing IS NOT NULL,
			coalesce((SELECT min((h.attrs->>'task_id')::int) FROM history_events h
				WHERE h.execution_id = e.execution_id AND h.type = 'WorkflowTaskCompleted'), 0),
			coalesce((SELECT extract(epoch FROM min(h.at) - e.created_at) * 1000 FROM history_events h
				WHERE h.execution_id = e.execution_id AND h.type = 'WorkflowTaskCompleted'), 0)::bigint
		FROM executions e WHERE e.workflow_name = $1 AND starts_with(e.idempotency_key, $2)`,
		[]any{workflowFlaky, prefix}, func(rows pgx.Rows) error {
			var e flakyExecution
			var afterMS int64
			if err := rows.Scan(&e.id, &e.key, &e.status, &e.result, &e.failing, &e.firstTask, &afterMS); err != nil {
				return err
			}
			e.firstAfter = time.Duration(afterMS) * time.Millisecond
			out = append(out, e)
			return nil
		})
	return out, err
}
