//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/examples"
)

// Deferred starts ride along with each trial's load too, so that the
// starts a start policy holds back are tried under the same faults: starts
// of the digest workflow under each policy (the batch the stack's
// configuration gives it, and a throttle and a debounce given by the
// requests), sent at random times through either ingest and retried as a
// client without a key would: each attempt is a start of its own, whose
// input names it. Once the trial has converged:
//
//   - every acknowledged attempt became part of exactly one execution, the
//     one its answer or its command's outcome names (a debounced attempt
//     may have been collapsed into a later one: its outcome names the
//     execution, which has the last input);
//   - no attempt is part of two executions, and none waits any more;
//   - no batch is larger than its max_size, and a throttle's executions
//     never begin more than its limit within its period.

// The policies of the trials' deferred starts.
const (
	chaosBatchMaxSize    = 3
	chaosBatchMaxWait    = time.Second
	chaosThrottleLimit   = 2
	chaosThrottlePeriod  = time.Second
	chaosDebouncePeriod  = 400 * time.Millisecond
	chaosPolicyWorkflow  = examples.WorkflowDigest
	chaosDeferredSettled = 60 * time.Second
)

// chaosStartPolicies is the configuration of the chaos stack's start
// policies, as workflows.<name> values.
var chaosStartPolicies = map[string]string{
	chaosPolicyWorkflow: fmt.Sprintf("{start_policy: {batch: {max_size: %d, max_wait: %s, key: /group}}}", chaosBatchMaxSize, chaosBatchMaxWait),
}

// deferredKinds are the policies the deferred starts come under; the
// request names the policy of those that are not the configured one.
var deferredKinds = []struct {
	kind, policy string
}{
	{"batch", ""},
	{"throttle", fmt.Sprintf(`, "start_policy": {"throttle": {"limit": %d, "period": %q, "key": "/group"}}`, chaosThrottleLimit, chaosThrottlePeriod)},
	{"debounce", fmt.Sprintf(`, "start_policy": {"debounce": {"period": %q, "key": "/group"}}`, chaosDebouncePeriod)},
}

// deferredPlan is one deferred start: its policy's kind, its group (the
// policy's key) and when it is sent.
type deferredPlan struct {
	kind, group string
	n           int
	at          time.Duration
}

func planDeferred(rng *rand.Rand, prefix string, perKind int, window time.Duration) []deferredPlan {
	var plans []deferredPlan
	for _, k := range deferredKinds {
		for n := range perKind {
			plans = append(plans, deferredPlan{kind: k.kind, group: prefix + k.kind, n: n, at: time.Duration(rng.Int64N(int64(window)))})
		}
	}
	return plans
}

// deferredAttempt is one request of a deferred start, and its answer.
type deferredAttempt struct {
	id     string // in the input: the plan's group, n and attempt
	answer answer
}

type deferredOutcome struct {
	plan     deferredPlan
	attempts []deferredAttempt
}

func (p deferredPlan) body(attempt int) (string, string) {
	id := fmt.Sprintf("%s/%d/%d", p.group, p.n, attempt)
	policy := ""
	for _, k := range deferredKinds {
		if k.kind == p.kind {
			policy = k.policy
		}
	}
	return id, fmt.Sprintf(`{"input": {"group": %q, "attempt": %q}%s}`, p.group, id, policy)
}

// runDeferred sends the plans at their times; a start whose answer is not
// final is sent again, as a new attempt, until one is or giveUp.
func (s *stack) runDeferred(ctx context.Context, plans []deferredPlan, giveUp time.Time) []*deferredOutcome {
	begin := time.Now()
	out := make([]*deferredOutcome, len(plans))
	var wg sync.WaitGroup
	for j, p := range plans {
		o := &deferredOutcome{plan: p}
		out[j] = o
		wg.Go(func() {
			if !sendAt(ctx, begin.Add(p.at)) {
				return
			}
			backoff := 100 * time.Millisecond
			for attempt := 1; ; attempt++ {
				id, body := p.body(attempt)
				a := s.startRequest(ctx, (j+attempt)%len(s.baseURLs), chaosPolicyWorkflow, "", body)
				a.attempt = attempt
				o.attempts = append(o.attempts, deferredAttempt{id: id, answer: a})
				if !a.retryable() || time.Now().After(giveUp) || ctx.Err() != nil {
					return
				}
				time.Sleep(backoff) // a client's retry pace, not synchronisation
				backoff = min(2*backoff, time.Second)
			}
		})
	}
	wg.Wait()
	return out
}

// digestExecution is an execution of the digest workflow: the attempts
// its input holds.
type digestExecution struct {
	id, status string
	createdAt  time.Time
	attempts   []string
}

// deferredInvariants checks what became of the trial's deferred starts.
func (c *trialCheck) deferredInvariants(ctx context.Context, outcomes []*deferredOutcome) {
	res := c.res
	var bad []string
	groups := map[string]bool{}
	for _, o := range outcomes {
		groups[o.plan.group] = true
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	// Settled: nothing of the trial waits (every acknowledged command is
	// applied and out of its group: one answered 202 accepted may still
	// be in the stream, its shard not leased again yet), every execution
	// completed.
	var acked []string
	for _, o := range outcomes {
		for _, at := range o.attempts {
			if at.answer.ok() && at.answer.commandID != "" {
				acked = append(acked, at.answer.commandID)
			}
		}
	}
	deadline := time.Now().Add(chaosDeferredSettled)
	var execs []digestExecution
	for {
		waiting, err := c.st.countAll(ctx, `SELECT count(*) FROM deferred_starts WHERE policy_key = ANY($1)`, names)
		var applied int
		if err == nil {
			applied, err = c.st.countAll(ctx, `SELECT count(*) FROM command_outcomes WHERE command_id = ANY($1)
				AND NOT coalesce((outcome->>'deferred')::bool, false)`, acked)
		}
		if err == nil {
			execs, err = c.digestExecutions(ctx, names)
		}
		settled := err == nil && waiting == 0 && applied == len(acked) && !slices.ContainsFunc(execs, func(e digestExecution) bool { return e.status == "Running" })
		if settled || time.Now().After(deadline) {
			if !settled {
				bad = append(bad, fmt.Sprintf("not settled within %s: %d deferred group(s) wait, %d of %d acknowledged commands applied (err %v)",
					chaosDeferredSettled, waiting, applied, len(acked), err))
			}
			break
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
	in := map[string][]string{} // attempt → executions holding it
	byID := map[string]digestExecution{}
	for _, e := range execs {
		byID[e.id] = e
		for _, a := range e.attempts {
			in[a] = append(in[a], e.id)
		}
		if e.status != "Completed" {
			bad = append(bad, fmt.Sprintf("execution %s is %s", e.id, e.status))
		}
	}
	for a, ids := range in {
		if len(ids) > 1 {
			res.DupExecutions++
			bad = append(bad, fmt.Sprintf("attempt %s began %d executions: %v", a, len(ids), ids))
		}
	}
	for _, o := range outcomes {
		for _, at := range o.attempts {
			if !at.answer.ok() {
				continue
			}
			res.DeferredAcked++
			exec := at.answer.executionID
			if exec == "" {
				raw, err := c.st.outcomeOf(ctx, at.answer.commandID)
				var out struct {
					ExecutionID string `json:"execution_id"`
					Deferred    bool   `json:"deferred"`
				}
				if err == nil && raw != nil {
					err = json.Unmarshal(raw, &out)
				}
				if err != nil || out.ExecutionID == "" {
					res.Lost++
					bad = append(bad, fmt.Sprintf("acknowledged %s attempt %s (command %s) began no execution: %s %v", o.plan.kind, at.id, at.answer.commandID, raw, err))
					continue
				}
				exec = out.ExecutionID
			}
			e, ok := byID[exec]
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("%s attempt %s names execution %s, not one of the trial's", o.plan.kind, at.id, exec))
			case o.plan.kind != "debounce" && !slices.Contains(e.attempts, at.id):
				bad = append(bad, fmt.Sprintf("%s attempt %s names execution %s, whose input does not hold it: %v", o.plan.kind, at.id, exec, e.attempts))
			}
		}
	}
	// The policies' own bounds.
	var throttled []time.Time
	for _, e := range execs {
		switch {
		case len(e.attempts) > chaosBatchMaxSize:
			bad = append(bad, fmt.Sprintf("execution %s holds %d starts, more than max_size %d", e.id, len(e.attempts), chaosBatchMaxSize))
		case len(e.attempts) == 1 && groupOf(e.attempts[0]) == c.prefix+"throttle":
			throttled = append(throttled, e.createdAt)
		}
	}
	slices.SortFunc(throttled, func(a, b time.Time) int { return a.Compare(b) })
	for i := chaosThrottleLimit; i < len(throttled); i++ {
		if d := throttled[i].Sub(throttled[i-chaosThrottleLimit]); d < chaosThrottlePeriod-time.Millisecond {
			bad = append(bad, fmt.Sprintf("throttled executions %d and %d began %s apart, within the period %s", i-chaosThrottleLimit, i, d, chaosThrottlePeriod))
		}
	}
	if len(bad) > 0 {
		res.Other += len(bad)
		res.fail("%d deferred start check(s) failed: %s", len(bad), sample(bad))
	}
}

// groupOf is the group an attempt's id names: "<group>/<n>/<attempt>".
func groupOf(attempt string) string {
	group, _, _ := strings.Cut(attempt, "/")
	return group
}

// digestExecutions reads the digest executions of the groups, with the
// attempts their inputs hold (one object, or a batch's list of them).
func (c *trialCheck) digestExecutions(ctx context.Context, groups []string) ([]digestExecution, error) {
	var out []digestExecution
	err := c.st.queryAll(ctx, `SELECT execution_id::text, status, created_at, input::text FROM executions
		WHERE workflow_name = $1 AND (input->>'group' = ANY($2) OR input->0->>'group' = ANY($2))`, []any{chaosPolicyWorkflow, groups}, func(rows pgx.Rows) error {
		var e digestExecution
		var input string
		if err := rows.Scan(&e.id, &e.status, &e.createdAt, &input); err != nil {
			return err
		}
		type item struct {
			Attempt string `json:"attempt"`
		}
		var list []item
		if err := json.Unmarshal([]byte(input), &list); err != nil {
			var one item
			if err := json.Unmarshal([]byte(input), &one); err != nil {
				return fmt.Errorf("execution %s: input %s: %w", e.id, input, err)
			}
			list = []item{one}
		}
		for _, it := range list {
			e.attempts = append(e.attempts, it.Attempt)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}
