//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Poison rides along with each trial's load, so that refusing it at the
// edge and setting it aside in the scheduler are tried under the same
// faults as the rest:
//
//   - starts whose input holds a NUL, sent to ingest with a key, which
//     must be refused (400) and never become an execution;
//   - start commands whose workflow_id holds a NUL, published straight to
//     the command stream (as a client bypassing ingest could), each of
//     which must be set aside as dead exactly once, answered
//     command_rejected, and never become an execution.
//
// Their keys have a prefix of their own, so the trial's other checks do
// not see them.

// poisonPlan is one poison send.
type poisonPlan struct {
	key    string
	at     time.Duration
	direct bool // published to the command stream, not sent to ingest
}

func planPoison(rng *rand.Rand, prefix string, n int, window time.Duration) []poisonPlan {
	plans := make([]poisonPlan, n)
	for j := range plans {
		plans[j] = poisonPlan{key: fmt.Sprintf("poison-%sp%02d", prefix, j), at: time.Duration(rng.Int64N(int64(window))), direct: j%2 == 1}
	}
	return plans
}

// poisonOutcome is what became of one poison send.
type poisonOutcome struct {
	plan    poisonPlan
	answers []answer // to ingest
	err     error    // publishing it straight
}

// poisonCommand is the command a direct poison plan publishes.
func poisonCommand(key string) (wire.Command, int) {
	const name = "charge"
	cmd := wire.Command{CommandID: dedup.StartCommandID(name, key), Kind: wire.KindStart, Start: &wire.StartCommand{
		WorkflowName: name, WorkflowID: "order\x00" + key, IdempotencyKey: key, TaskQueue: wire.DefaultTaskQueue,
		Input: json.RawMessage(`{"amount_cents": 1, "customer_id": "cus_poison"}`),
	}}
	return cmd, placement.StartShard(16, name, cmd.Start.WorkflowID, key)
}

// runPoison sends the poison plans at their times, retrying as the load
// does until an answer is final (ingest) or the stream acknowledged the
// command, or giveUp.
func (s *stack) runPoison(ctx context.Context, plans []poisonPlan, giveUp time.Time) []*poisonOutcome {
	begin := time.Now()
	out := make([]*poisonOutcome, len(plans))
	var wg sync.WaitGroup
	for j, p := range plans {
		o := &poisonOutcome{plan: p}
		out[j] = o
		wg.Go(func() {
			if !sendAt(ctx, begin.Add(p.at)) {
				return
			}
			if !p.direct {
				s.sendRetrying(ctx, j%len(s.baseURLs), p.key, `{"input": {"amount_cents": 1, "customer_id": "cus_\u0000"}}`, giveUp,
					func(a answer) { o.answers = append(o.answers, a) })
				return
			}
			cmd, shard := poisonCommand(p.key)
			data, err := json.Marshal(cmd)
			for err == nil {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = s.js.Publish(pctx, broker.CommandSubject(shard, cmd.Kind), data, jetstream.WithMsgID(cmd.CommandID))
				cancel()
				if err == nil || ctx.Err() != nil || time.Now().After(giveUp) {
					break
				}
				err = nil
				time.Sleep(200 * time.Millisecond) // a client's retry pace, not synchronisation
			}
			o.err = err
		})
	}
	wg.Wait()
	return out
}

// poisonInvariants checks what became of the trial's poison, once the
// trial has converged.
func (c *trialCheck) poisonInvariants(ctx context.Context, outcomes []*poisonOutcome) {
	res := c.res
	var bad []string
	for _, o := range outcomes {
		execs, err := c.st.countAll(ctx, `SELECT count(*) FROM executions WHERE idempotency_key = $1`, o.plan.key)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: read executions: %v", o.plan.key, err))
			continue
		}
		if execs != 0 {
			bad = append(bad, fmt.Sprintf("%s became %d execution(s)", o.plan.key, execs))
		}
		if !o.plan.direct {
			for _, a := range o.answers {
				if a.ok() {
					bad = append(bad, fmt.Sprintf("%s was accepted: %s", o.plan.key, a))
				}
			}
			if n := len(o.answers); n > 0 && o.answers[n-1].status == 400 {
				res.PoisonRefused++
			} else if n > 0 && !o.answers[n-1].retryable() {
				bad = append(bad, fmt.Sprintf("%s was refused with %d %s, not 400", o.plan.key, o.answers[n-1].status, o.answers[n-1].code))
			}
			continue
		}
		if o.err != nil {
			continue // never acknowledged by the stream: nothing to check
		}
		cmd, _ := poisonCommand(o.plan.key)
		var dead int
		var waited time.Duration
		for {
			var err error
			if dead, err = c.st.countAll(ctx, `SELECT count(*) FROM dead_commands WHERE command_id = $1`, cmd.CommandID); err != nil {
				dead = -1
			}
			if dead != 0 || waited > 30*time.Second {
				break
			}
			time.Sleep(100 * time.Millisecond) // poll interval, not synchronisation
			waited += 100 * time.Millisecond
		}
		if dead != 1 {
			bad = append(bad, fmt.Sprintf("%s (command %s) set aside %d times, not once", o.plan.key, cmd.CommandID, dead))
			continue
		}
		outcome, err := c.st.outcomeOf(ctx, cmd.CommandID)
		if err != nil || outcome == nil {
			bad = append(bad, fmt.Sprintf("%s: no outcome: %v", o.plan.key, err))
			continue
		}
		var out wire.Outcome
		if err := json.Unmarshal(outcome, &out); err != nil || out.Error != "command_rejected" {
			bad = append(bad, fmt.Sprintf("%s: outcome %s, not command_rejected", o.plan.key, outcome))
			continue
		}
		res.PoisonSetAside++
	}
	if len(bad) > 0 {
		res.Other += len(bad)
		res.fail("%d poison send(s) misbehaved: %s", len(bad), sample(bad))
	}
}
