//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/api"
)

// The chaos suite's load of resets (docs/reset.md): each trial starts a
// few executions of chaos_reset (e2e/testdata/fleetworker/reset.go),
// which charges steps a, b and c at the payment provider the test
// serves, each keyed by its activity's idempotency key. Step b's charge
// goes through and the step then fails for good, since the provider has
// no permit for the order: the execution fails, as one does whose
// confirmation a provider outage lost. While the trial's faults land,
// the load waits for each execution to fail, makes its permit at the
// provider, and resets it to its last failed b, retrying the reset
// through either ingest until it is answered 201; some are sent twice
// at once, through both ingests. After the trial, every acknowledged
// start whose reset was answered must have exactly two runs under its
// key: the first Failed with reset_to naming the second, the second
// Completed with reset_from naming the first, its b scheduled with the
// first run's b key, and every 201 naming that second run. At the
// provider each step of it made its effect exactly once: a reset that
// ran a again, or gave b another key, or a step that ran twice, shows.
// Search attributes ride along: the start sets order, the code upserts
// stage and steps after each step, so the failed run must hold order, a,
// 1 and the reset run order (from the kept start), c, 3.
//
// Every other start is under a concurrency policy of limit 1 keyed by
// its order: its failed run gave its slot back when it closed, so its
// reset takes the key's slot again, in the transaction that makes the
// reset run. Both runs must name the key, the reset run with the time it
// began, and afterwards the key must run nothing and queue nothing: a
// reset that took the slot twice, or not at all, leaves a count behind.

const workflowReset = "chaos_reset"

var chaosResets = flag.Int("chaos.resets", 3, "chaos: chaos_reset starts per trial (executions failed by an outage and reset to the failed step under faults)")

// chaosResetSearch declares chaos_reset's search attributes: its start
// sets order, its code sets stage and steps after each step.
const chaosResetSearch = "{search_attributes: {order: keyword, stage: keyword, steps: int}}"

// chaosDeclared are the chaos stack's workflows' settings: the start
// policies', and chaos_reset's search attributes.
func chaosDeclared() map[string]string {
	out := maps.Clone(chaosStartPolicies)
	out[workflowReset] = chaosResetSearch
	return out
}

// resetSteps are chaos_reset's steps, as the fleet worker has them.
var resetSteps = []string{"a", "b", "c"}

// resetPlan is one chaos_reset start, and whether its reset is sent
// twice at once.
type resetPlan struct {
	sideStart
	twice bool
	// policy says the start is under a concurrency policy of limit 1,
	// keyed by its order (its key).
	policy bool
}

// planResets plans n chaos_reset starts, each in the first half of
// window. It draws from its own generator, so that adding this load
// left the other loads' and the faults' draws of a seed as they were.
func planResets(seed uint64, kind, prefix string, n int, window time.Duration) []resetPlan {
	rng := rand.New(rand.NewPCG(seed, fnv64(kind+"/reset")))
	plans := make([]resetPlan, n)
	for j := range plans {
		key := fmt.Sprintf("reset-%sr%02d", prefix, j)
		body := map[string]any{"input": map[string]string{"order": key}, "search_attributes": map[string]string{"order": key}}
		policy := j%2 == 1
		if policy {
			body["start_policy"] = map[string]any{"concurrency": map[string]any{"limit": 1, "key": "/order"}}
		}
		raw, _ := json.Marshal(body)
		plans[j] = resetPlan{sideStart: sideStart{key: key, body: string(raw), at: time.Duration(rng.Int64N(int64(window/2) + 1)),
			ingest: rng.IntN(2)}, twice: rng.IntN(2) == 0, policy: policy}
	}
	return plans
}

// resetOutcome is what the client of one chaos_reset heard.
type resetOutcome struct {
	plan  resetPlan
	start *startOutcome
	// id is the execution the start answered; failed says the client saw
	// it Failed, and so sent its reset.
	id     string
	failed bool
	mu     sync.Mutex
	// resets are the answers of every reset request.
	resets []answer
}

func (o *resetOutcome) record(a answer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.resets = append(o.resets, a)
}

// answered are the runs the resets' 201s named.
func (o *resetOutcome) answered() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, a := range o.resets {
		if a.status == http.StatusCreated && !slices.Contains(out, a.executionID) {
			out = append(out, a.executionID)
		}
	}
	return out
}

// runResets starts the executions at their times, waits for each
// acknowledged one to fail, permits its order at the provider and resets
// it. The starts give up at giveUp, the waits and resets at
// resetsGiveUp.
func (s *stack) runResets(ctx context.Context, plans []resetPlan, giveUp, resetsGiveUp time.Time) []*resetOutcome {
	begin := time.Now()
	out := make([]*resetOutcome, len(plans))
	var wg sync.WaitGroup
	for j, p := range plans {
		o := &resetOutcome{plan: p, start: &startOutcome{}}
		out[j] = o
		wg.Go(func() {
			if !sendAt(ctx, begin.Add(p.at)) {
				return
			}
			var accepted string
			s.startRetrying(ctx, workflowReset, p.ingest, p.key, p.body, giveUp, func(a answer) {
				o.start.mu.Lock()
				o.start.answers = append(o.start.answers, a)
				o.start.mu.Unlock()
				if a.ok() && o.id == "" {
					o.id = a.executionID
				}
				if a.ok() && a.executionID == "" && a.commandID != "" {
					accepted = a.commandID
				}
			})
			if o.id == "" && accepted != "" {
				o.id = s.appliedExecution(ctx, accepted, resetsGiveUp)
			}
			if o.id == "" || !s.waitStatus(ctx, p.ingest, o.id, "Failed", resetsGiveUp) {
				return
			}
			o.failed = true
			if _, err := s.provider.CreateCharge(ctx, "reset-permit:"+p.key, 1, "permit_"+p.key); err != nil {
				return
			}
			send := func(ingest int) {
				retrying(ctx, ingest, len(s.baseURLs), resetsGiveUp, func(ingest, attempt int) answer {
					a := s.resetRequest(ctx, ingest, o.id)
					a.attempt = attempt
					o.record(a)
					return a
				}, func(a answer) bool {
					// A 202 is sent again: the same reset again is
					// answered with the run the first one made.
					return a.status == http.StatusCreated || !(a.retryable() || a.status == http.StatusAccepted)
				})
			}
			if p.twice {
				var both sync.WaitGroup
				both.Go(func() { send(p.ingest) })
				both.Go(func() { send(1 - p.ingest) })
				both.Wait()
				return
			}
			send(p.ingest)
		})
	}
	wg.Wait()
	return out
}

// waitStatus reads the execution through the ingests in turn until it
// has status, or giveUp passes.
func (s *stack) waitStatus(ctx context.Context, first int, id, status string, giveUp time.Time) bool {
	a := retrying(ctx, first, len(s.baseURLs), giveUp, func(ingest, _ int) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.baseURLs[ingest]+"/api/harvest/executions/"+id, nil)
		if err != nil {
			return ""
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var e struct {
			Status string `json:"status"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return e.Status
	}, func(got string) bool { return got == status })
	return a == status
}

// resetRequest makes one reset request of the execution to ingest i.
func (s *stack) resetRequest(ctx context.Context, i int, executionID string) answer {
	a, _ := s.post(ctx, i, "/api/harvest/executions/"+executionID+"/reset", "",
		`{"to": {"activity": "chaos_reset_b", "occurrence": "last_failed"}, "reason": "chaos"}`)
	return a
}

// resetRun is a chaos_reset run as PostgreSQL holds it.
type resetRun struct {
	id, key, status string
	resetFrom       string
	resetTo         string
	// bKeys are the idempotency keys of its ActivityScheduled events of
	// step b, in order.
	bKeys []string
	// attrs are its search attributes, as text.
	attrs map[string]string
	// policyKey is its concurrency policy's key, "" for none; began
	// says it records when it took its slot.
	policyKey string
	began     bool
}

// resetRuns reads the chaos_reset runs whose keys start with prefix.
func (c *trialCheck) resetRuns(ctx context.Context, prefix string) ([]resetRun, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []resetRun
	err := c.st.queryAll(qctx, `
		SELECT e.execution_id::text, e.idempotency_key, e.status, coalesce(e.reset->>'from', ''), coalesce(e.reset->>'to', ''),
			(SELECT coalesce(json_agg(h.attrs->>'idempotency_key' ORDER BY h.seq), '[]')::text FROM history_events h
				WHERE h.execution_id = e.execution_id AND h.type = 'ActivityScheduled' AND h.attrs->>'activity_name' = 'chaos_reset_b'),
			(SELECT coalesce(json_object_agg(s.name, coalesce(s.keyword, s.num::text)), '{}')::text FROM search_attributes s
				WHERE s.execution_id = e.execution_id),
			coalesce(e.concurrency->>'key', ''), e.concurrency->>'began_at' IS NOT NULL
		FROM executions e WHERE e.workflow_name = $1 AND starts_with(e.idempotency_key, $2)`,
		[]any{workflowReset, prefix}, func(rows pgx.Rows) error {
			var r resetRun
			var bKeys, attrs string
			if err := rows.Scan(&r.id, &r.key, &r.status, &r.resetFrom, &r.resetTo, &bKeys, &attrs, &r.policyKey, &r.began); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(attrs), &r.attrs); err != nil {
				return fmt.Errorf("execution %s: search attributes %s: %w", r.id, attrs, err)
			}
			if err := json.Unmarshal([]byte(bKeys), &r.bKeys); err != nil {
				return fmt.Errorf("execution %s: b keys %s: %w", r.id, bKeys, err)
			}
			out = append(out, r)
			return nil
		})
	return out, err
}

// resetWrong checks one chaos_reset: what its client heard (o), runs,
// the runs of its key, and charges, the provider's effects of its steps
// by step.
func resetWrong(o *resetOutcome, runs []resetRun, charges map[string]int) []string {
	key := o.plan.key
	var wrong []string
	bad := func(format string, args ...any) { wrong = append(wrong, key+": "+fmt.Sprintf(format, args...)) }
	answered := o.answered()
	if len(answered) > 1 {
		bad("the reset's 201s named %d runs: %v", len(answered), answered)
	}
	o.mu.Lock()
	for _, a := range o.resets {
		if a.status == http.StatusConflict {
			// The same point every time, and, under a policy, a key of
			// its own whose slot the failed run gave back.
			bad("a reset was refused %d %s", a.status, a.code)
		}
	}
	o.mu.Unlock()
	switch {
	case !o.start.acked():
		if len(runs) > 1 {
			bad("%d runs of a start never acknowledged", len(runs))
		}
		return wrong
	case len(runs) == 0:
		bad("an acknowledged start has no execution")
		return wrong
	case len(answered) == 0 && len(runs) == 1:
		// The reset was never answered (or never sent): the run failed,
		// after a's and b's effects.
		if runs[0].status != "Failed" && o.failed {
			bad("run %s is %s, not Failed", runs[0].id, runs[0].status)
		}
		if o.failed && (charges["a"] != 1 || charges["b"] != 1 || charges["c"] != 0) {
			bad("a failed run made effects %v, not a and b once", charges)
		}
		if want := (map[string]string{"order": key, "stage": "a", "steps": "1"}); o.failed && !maps.Equal(runs[0].attrs, want) {
			bad("a failed run's search attributes are %v, want %v", runs[0].attrs, want)
		}
		return wrong
	case len(runs) != 2:
		bad("%d runs: want the failed run and its reset", len(runs))
		return wrong
	}
	first, second := runs[0], runs[1]
	if first.resetFrom != "" {
		first, second = second, first
	}
	if first.status != "Failed" || first.resetTo != second.id {
		bad("the first run %s is %s with reset_to %q, not Failed naming %s", first.id, first.status, first.resetTo, second.id)
	}
	if second.status != "Completed" || second.resetFrom != first.id {
		bad("the reset run %s is %s with reset_from %q, not Completed naming %s", second.id, second.status, second.resetFrom, first.id)
	}
	if len(answered) == 1 && answered[0] != second.id {
		bad("the reset's 201 named %s, the reset run is %s", answered[0], second.id)
	}
	if len(first.bKeys) != 1 || len(second.bKeys) != 1 || first.bKeys[0] != second.bKeys[0] {
		bad("b's keys: %v in the first run, %v in the reset run: want the same one", first.bKeys, second.bKeys)
	}
	// The first run's attributes are what it reached; the reset run's,
	// the start's (kept) and then its own steps'.
	if want := (map[string]string{"order": key, "stage": "a", "steps": "1"}); !maps.Equal(first.attrs, want) {
		bad("the first run's search attributes are %v, want %v", first.attrs, want)
	}
	if want := (map[string]string{"order": key, "stage": "c", "steps": "3"}); !maps.Equal(second.attrs, want) {
		bad("the reset run's search attributes are %v, want %v", second.attrs, want)
	}
	for _, step := range resetSteps {
		if charges[step] != 1 {
			bad("step %s made %d effects at the provider, want 1 (%v)", step, charges[step], charges)
		}
	}
	if o.plan.policy {
		if first.policyKey != key || second.policyKey != key || !second.began {
			bad("concurrency: the first run's key %q, the reset run's %q (began: %v): want %q, begun", first.policyKey, second.policyKey, second.began, key)
		}
	} else if first.policyKey != "" || second.policyKey != "" {
		bad("concurrency: runs of a start without a policy name keys %q and %q", first.policyKey, second.policyKey)
	}
	return wrong
}

// resetInvariants checks the trial's chaos_reset load: see the top of
// this file.
func (c *trialCheck) resetInvariants(ctx context.Context, outcomes []*resetOutcome) {
	if len(outcomes) == 0 {
		return
	}
	prefix := "reset-" + c.prefix
	settled := func(runs []resetRun) bool {
		byKey := map[string][]resetRun{}
		for _, r := range runs {
			byKey[r.key] = append(byKey[r.key], r)
		}
		for _, o := range outcomes {
			if len(o.answered()) == 0 {
				continue
			}
			done := false
			for _, r := range byKey[o.plan.key] {
				done = done || (r.resetFrom != "" && r.status == "Completed")
			}
			if !done {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(c.cfg.bound)
	var runs []resetRun
	var err error
	for {
		runs, err = c.resetRuns(ctx, prefix)
		if (err == nil && settled(runs)) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
	if err != nil {
		c.res.fail("reset: read the executions: %v", err)
		return
	}
	byKey := map[string][]resetRun{}
	for _, r := range runs {
		byKey[r.key] = append(byKey[r.key], r)
	}
	effects := map[string]map[string]int{}
	for customer, charges := range c.st.charges.byCustomer("reset_" + prefix) {
		order, step, _ := strings.Cut(strings.TrimPrefix(customer, "reset_"), "/")
		if effects[order] == nil {
			effects[order] = map[string]int{}
		}
		effects[order][step] += len(charges)
	}
	var bad []string
	for _, o := range outcomes {
		if w := resetWrong(o, byKey[o.plan.key], effects[o.plan.key]); len(w) > 0 {
			bad = append(bad, w...)
			continue
		}
		c.res.ResetRequests += len(o.resets)
		if len(o.answered()) == 1 {
			c.res.ResetsExact++
		}
	}
	// The keys of the starts under a policy run nothing and queue
	// nothing once their runs closed.
	for i, o := range outcomes {
		if !o.plan.policy || len(byKey[o.plan.key]) == 0 {
			continue
		}
		var r api.ConcurrencyResponse
		path := "/api/harvest/workflows/" + workflowReset + "/concurrency?key=" + url.QueryEscape(o.plan.key)
		found, err := c.st.scheduleGet(ctx, i, path, &r)
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: %v", o.plan.key, err))
		case !found:
			bad = append(bad, fmt.Sprintf("%s: GET %s: 404", o.plan.key, path))
		case r.Running != 0 || r.Pending != 0:
			bad = append(bad, fmt.Sprintf("%s: its key runs %d and queues %d after its runs closed, want none", o.plan.key, r.Running, r.Pending))
		}
	}
	if len(bad) > 0 {
		c.res.Other += len(bad)
		c.res.fail("reset: %d wrong: %s", len(bad), strings.Join(bad, "; "))
	}
}
