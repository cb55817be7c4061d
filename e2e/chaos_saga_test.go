//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The chaos suite's load of cooperative cancellation
// (docs/cancellation.md): each trial starts a few executions of
// chaos_saga (e2e/testdata/fleetworker/saga.go), which reserves, charges
// and ships, each step an activity that takes the time its input says,
// and, once it sees a cancellation, undoes the steps it completed, most
// recent first (release for reserve, refund for charge), in a
// disconnected context, and returns what it did and undid. Every
// activity makes its effect a charge at the payment provider the test
// serves, keyed by the activity's idempotency key and charged to a
// customer that names the saga and the step: the provider is the
// witness of every effect, as it is of the charge load's.
//
// While the trial's faults land, the load cancels each saga at the moment
// it planned: right after its start is acknowledged, some time into its
// steps, or never. A cancel is retried, through either ingest, until it
// is answered 200; some are sent twice, at once through both ingests or
// again once the first is answered. After the trial, every acknowledged
// start must have exactly one execution, closed (none left Running): one
// never cancelled Completed with its three steps; one cancelled either
// Cancelled with exactly one WorkflowCancelRequested, its result's undone
// steps exactly the compensations of its done steps, in reverse order,
// or Completed with its three steps and nothing undone (the cancel came
// too late). At the provider every done step and every compensation in
// the result made its effect exactly once, no compensation made one
// that is not in the result, no step more than once, and no step after
// its execution closed (a step given up must not run on). A step whose
// ActivityCompleted its history holds must be in done: a step the code
// gave up after it completed is never undone. A step given up whose
// attempt made its effect all the same, its result dropped, is allowed
// (docs/cancellation.md) and listed in the trial's line.

const workflowSaga = "chaos_saga"

var chaosSagas = flag.Int("chaos.sagas", 4, "chaos: chaos_saga starts per trial (sagas cancelled at planned moments under faults, which must compensate exactly)")

// sagaSteps are chaos_saga's steps in order, each with the step that
// undoes it ("" for none), as e2e/testdata/fleetworker/saga.go has them.
var sagaSteps = []struct{ do, undo string }{{"reserve", "release"}, {"charge", "refund"}, {"ship", ""}}

// sagaActivity is the activity of a chaos_saga step.
func sagaActivity(step string) string { return "chaos_saga_" + step }

// sagaCancel says when the load cancels a saga.
type sagaCancel int

const (
	sagaNever  sagaCancel = iota // must complete
	sagaAtOnce                   // as soon as its start is acknowledged
	sagaLater                    // some time into its steps
)

func (c sagaCancel) String() string {
	return [...]string{"never", "at once", "later"}[c]
}

// sagaPlan is one chaos_saga start, how long its steps take, and when and
// how it is cancelled.
type sagaPlan struct {
	sideStart
	stepMS []int
	undoMS int
	cancel sagaCancel
	// after is how long after the start's acknowledgement a later
	// cancel goes.
	after time.Duration
	// twice: 0 one cancel, 1 two at once (through both ingests), 2 a
	// second one again after the first is answered.
	twice int
	again time.Duration
}

// planSagas plans n sagas over window: each starts in its first half,
// and the plans take every way of cancelling in turn. It draws from its
// own generator, so that adding this load left the other loads' and the
// faults' draws of a seed as they were.
func planSagas(seed uint64, kind, prefix string, n int, window time.Duration) []sagaPlan {
	rng := rand.New(rand.NewPCG(seed, fnv64(kind+"/saga")))
	plans := make([]sagaPlan, n)
	for j := range plans {
		key := fmt.Sprintf("saga-%ss%02d", prefix, j)
		p := sagaPlan{sideStart: sideStart{key: key, at: time.Duration(rng.Int64N(int64(window/2) + 1)), ingest: rng.IntN(2)},
			undoMS: 50 + rng.IntN(200), twice: rng.IntN(3), again: time.Duration(rng.Int64N(int64(500 * time.Millisecond)))}
		total := 0
		for range sagaSteps {
			ms := 100 + rng.IntN(400)
			p.stepMS = append(p.stepMS, ms)
			total += ms
		}
		switch j % 4 {
		case 0:
			p.cancel = sagaNever
		case 1:
			p.cancel = sagaAtOnce
		default:
			// Anywhere from the first step to a little after the last.
			p.cancel = sagaLater
			p.after = time.Duration(rng.Int64N(int64(total+300))) * time.Millisecond
		}
		raw, _ := json.Marshal(map[string]any{"input": map[string]any{"order": key, "step_ms": p.stepMS, "undo_ms": p.undoMS}})
		p.body = string(raw)
		plans[j] = p
	}
	return plans
}

// cancelAnswer is one cancel request's exchange.
type cancelAnswer struct {
	answer
	// execStatus and requested are a 200's status and cancel_requested.
	execStatus string
	requested  bool
}

func (a cancelAnswer) String() string {
	if a.status != http.StatusOK {
		return a.answer.String()
	}
	return fmt.Sprintf("%s send %d attempt %d ingest-%d took %s: 200 status %s cancel_requested=%v", a.at.Format("15:04:05.000"), a.send, a.attempt,
		a.ingest, a.took.Round(time.Millisecond), a.execStatus, a.requested)
}

// sagaOutcome is what the client of one saga heard.
type sagaOutcome struct {
	plan  sagaPlan
	start *startOutcome
	// id is the execution the start answered, which the cancels name.
	id string
	mu sync.Mutex
	// cancels are the answers of every cancel request, of every send.
	cancels []cancelAnswer
	// sends counts the cancel sends begun, unanswered says why one ended
	// without a 200.
	sends      int
	unanswered []string
}

func (o *sagaOutcome) record(a cancelAnswer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cancels = append(o.cancels, a)
}

// cancelled says whether any cancel request went out.
func (o *sagaOutcome) cancelled() bool { return o.sends > 0 }

// runSagas starts the sagas at their times, as the other side loads do,
// and cancels each acknowledged one as planned. The starts give up at
// giveUp; a cancel is retried until cancelsGiveUp.
func (s *stack) runSagas(ctx context.Context, plans []sagaPlan, giveUp, cancelsGiveUp time.Time) []*sagaOutcome {
	begin := time.Now()
	out := make([]*sagaOutcome, len(plans))
	var wg sync.WaitGroup
	for j, p := range plans {
		o := &sagaOutcome{plan: p, start: &startOutcome{}}
		out[j] = o
		wg.Go(func() {
			if !sendAt(ctx, begin.Add(p.at)) {
				return
			}
			var accepted string // a late answer's command
			s.startRetrying(ctx, workflowSaga, p.ingest, p.key, p.body, giveUp, func(a answer) {
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
			acked := time.Now()
			if o.id == "" && accepted != "" {
				o.id = s.appliedExecution(ctx, accepted, cancelsGiveUp)
			}
			if o.id == "" || p.cancel == sagaNever {
				return
			}
			if p.cancel == sagaLater && !sendAt(ctx, acked.Add(p.after)) {
				return
			}
			send := func(n, ingest int) {
				last := s.cancelRetrying(ctx, ingest, o.id, cancelsGiveUp, func(a cancelAnswer) {
					a.send = n
					o.record(a)
				})
				if last.status != http.StatusOK {
					o.mu.Lock()
					o.unanswered = append(o.unanswered, fmt.Sprintf("cancel %d: last answer %s", n, last))
					o.mu.Unlock()
				}
			}
			switch p.twice {
			case 1:
				o.sends = 2
				var both sync.WaitGroup
				both.Go(func() { send(0, p.ingest) })
				both.Go(func() { send(1, 1-p.ingest) })
				both.Wait()
			case 2:
				o.sends = 2
				send(0, p.ingest)
				if sendAt(ctx, time.Now().Add(p.again)) {
					send(1, 1-p.ingest)
				}
			default:
				o.sends = 1
				send(0, p.ingest)
			}
		})
	}
	wg.Wait()
	return out
}

// cancelRetrying sends a cancel until it is answered 200, is refused for
// good or giveUp passes, switching ingest after each failed attempt, and
// records every answer. A 202 (the outcome came late) is sent again: a
// cancel is idempotent, the scheduler records one request however often
// it comes. A 404 is retried too: a start answered before it was applied
// has no execution yet.
func (s *stack) cancelRetrying(ctx context.Context, first int, executionID string, giveUp time.Time, record func(cancelAnswer)) cancelAnswer {
	return retrying(ctx, first, len(s.baseURLs), giveUp, func(ingest, attempt int) cancelAnswer {
		a := s.cancelRequest(ctx, ingest, executionID)
		a.attempt = attempt
		record(a)
		return a
	}, func(a cancelAnswer) bool {
		return a.status == http.StatusOK || !(a.retryable() || a.status == http.StatusAccepted || a.status == http.StatusNotFound)
	})
}

// cancelRequest makes one cancel request to ingest i.
func (s *stack) cancelRequest(ctx context.Context, i int, executionID string) cancelAnswer {
	base, data := s.post(ctx, i, "/api/harvest/executions/"+executionID+"/cancel", "", `{"reason": "chaos"}`)
	a := cancelAnswer{answer: base}
	if a.status == http.StatusOK {
		var out struct {
			Status          string `json:"status"`
			CancelRequested bool   `json:"cancel_requested"`
		}
		_ = json.Unmarshal(data, &out)
		a.execStatus, a.requested = out.Status, out.CancelRequested
	}
	return a
}

// sagaExecution is a chaos_saga execution as PostgreSQL holds it.
type sagaExecution struct {
	id, key, status string
	result          string // JSON
	closed          *time.Time
	// cancelRequests, tasks and givenUp count its WorkflowCancelRequested,
	// WorkflowTaskCompleted and ActivityCancelRequested events;
	// completed are the activities of its ActivityCompleted events.
	cancelRequests, tasks, givenUp int
	completed                      []string
}

// sagaResult is chaos_saga's result.
type sagaResult struct {
	Done   []string `json:"done"`
	Undone []string `json:"undone"`
}

// sagaVerdict is what the check of one saga found: what is wrong, and
// the steps whose effect happened though they are not done, their
// activity given up while it ran and its result dropped (not a
// violation: a step given up is not undone, docs/cancellation.md).
type sagaVerdict struct {
	wrong        []string
	uncompensate []string
}

// sagaWrong checks one saga: what its client heard (o), got, the
// executions of its key, and effects, when the provider made each of its
// steps' effects, by step.
func sagaWrong(o *sagaOutcome, got []sagaExecution, effects map[string][]time.Time) sagaVerdict {
	var v sagaVerdict
	key := o.plan.key
	bad := func(format string, args ...any) { v.wrong = append(v.wrong, key+": "+fmt.Sprintf(format, args...)) }
	var requested bool
	answered := map[string]bool{} // the statuses 200 answers named
	for _, a := range o.cancels {
		if a.status >= 500 && (a.status != http.StatusServiceUnavailable || a.retryAfter == "") {
			bad("cancel answered %s", a)
		}
		if a.status != http.StatusOK {
			continue
		}
		answered[a.execStatus] = true
		requested = requested || a.requested
		if a.execStatus == "Running" && !a.requested {
			bad("cancel answered Running, not cancel_requested: %s", a)
		}
		if o.id != "" && a.executionID != o.id {
			bad("cancel of %s answered for %s", o.id, a.executionID)
		}
	}
	switch {
	case len(got) > 1:
		bad("%d executions", len(got))
		return v
	case len(got) == 0 && o.start.acked():
		bad("acknowledged, no execution")
		return v
	case len(got) == 0:
		if len(effects) > 0 {
			bad("effects %v without an execution", effects)
		}
		return v
	}
	e := got[0]
	if o.id != "" && e.id != o.id {
		bad("the start answered %s, its execution is %s", o.id, e.id)
	}
	if len(o.unanswered) > 0 {
		bad("a cancel was never answered 200: %s", strings.Join(o.unanswered, "; "))
	}
	var res sagaResult
	if e.result != "null" {
		if err := json.Unmarshal([]byte(e.result), &res); err != nil {
			bad("result %s: %v", e.result, err)
			return v
		}
	}
	var all, comps []string
	for _, s := range sagaSteps {
		all = append(all, s.do)
	}
	for k := len(res.Done) - 1; k >= 0 && k < len(sagaSteps); k-- {
		if u := sagaSteps[k].undo; u != "" {
			comps = append(comps, u)
		}
	}
	switch e.status {
	case "Completed":
		switch {
		case !slices.Equal(res.Done, all) || len(res.Undone) > 0:
			bad("Completed with result %s, want every step done and none undone", e.result)
		case e.cancelRequests > 1 || (e.cancelRequests == 1 && !o.cancelled()):
			bad("Completed with %d WorkflowCancelRequested, %d cancel(s) sent", e.cancelRequests, o.sends)
		}
	case "Cancelled":
		switch {
		case !o.cancelled():
			bad("Cancelled, never asked to")
		case e.cancelRequests == 0 && e.tasks == 0 && e.result == "null":
			// Closed at once: its code never ran (the request came
			// before its first task was dispatched), nothing to undo.
			if len(effects) > 0 {
				bad("Cancelled before its code ran, yet effects %v", effects)
			}
		case e.cancelRequests != 1:
			bad("Cancelled with %d WorkflowCancelRequested (%d workflow tasks completed)", e.cancelRequests, e.tasks)
		case !slices.Equal(res.Done, all[:min(len(res.Done), len(all))]) || len(res.Done) > len(all):
			bad("Cancelled with done steps %v, not a prefix of %v", res.Done, all)
		case !slices.Equal(res.Undone, comps):
			bad("Cancelled with done %v and undone %v, want undone %v", res.Done, res.Undone, comps)
		}
	default:
		bad("%s, not Completed or Cancelled within the bound", e.status)
	}
	if requested && e.cancelRequests != 1 {
		bad("a cancel answered cancel_requested, the history holds %d WorkflowCancelRequested", e.cancelRequests)
	}
	for st := range answered {
		if st != "Running" && st != e.status {
			bad("a cancel answered it %s, it is %s", st, e.status)
		}
	}
	// Each step's effect: done once, or given up (none, or one that ran
	// before it was given up); each compensation's once if undone, else
	// never; nothing after the execution closed.
	for _, s := range sagaSteps {
		for _, step := range []string{s.do, s.undo} {
			if step == "" {
				continue
			}
			at := effects[step]
			in := slices.Contains(res.Done, step)
			if step == s.undo {
				in = slices.Contains(res.Undone, step)
			}
			ran := slices.Contains(e.completed, sagaActivity(step))
			switch {
			case in && len(at) != 1:
				bad("%s in its result, its effect made %d times", step, len(at))
			case in && !ran:
				bad("%s in its result, no ActivityCompleted of %s", step, sagaActivity(step))
			case in:
				// As it must be.
			case ran:
				// Its completion is in the history, yet the code was
				// told it was given up: its effect is never undone (a
				// lost compensation), or, for the last step, undone
				// steps come after it.
				bad("%s completed (ActivityCompleted of %s in its history) but its code gave it up: result %s", step, sagaActivity(step), e.result)
			case step == s.undo && len(at) > 0:
				bad("compensation %s made %d time(s), its result %s does not list it", step, len(at), e.result)
			case len(at) > 1:
				bad("%s made %d times", step, len(at))
			case len(at) == 1:
				v.uncompensate = append(v.uncompensate, step)
			}
			if step != s.undo && e.closed != nil {
				for _, t := range at {
					if t.After(*e.closed) {
						bad("%s made its effect at %s, after the execution closed at %s", step, t.Format("15:04:05.000"), e.closed.Format("15:04:05.000"))
					}
				}
			}
		}
	}
	for step := range effects {
		if !slices.ContainsFunc(sagaSteps, func(s struct{ do, undo string }) bool { return s.do == step || s.undo == step }) {
			bad("an effect of an unknown step %q", step)
		}
	}
	return v
}

// sagaInvariants checks the trial's sagas, once their cancels ended and
// they all closed or the bound passed.
func (c *trialCheck) sagaInvariants(ctx context.Context, outcomes []*sagaOutcome) {
	if len(outcomes) == 0 {
		return
	}
	acked := map[string]bool{}
	for _, o := range outcomes {
		acked[o.plan.key] = o.start.acked()
	}
	prefix := "saga-" + c.prefix
	execs, err := settle(ctx, c, acked, func(ctx context.Context) ([]sagaExecution, error) {
		return c.sagaExecutions(ctx, prefix)
	}, func(e sagaExecution) (string, string) {
		// settle waits for Completed; a saga settles once it closed,
		// Completed or Cancelled alike.
		if e.status == "Cancelled" {
			return e.key, "Completed"
		}
		return e.key, e.status
	})
	if err != nil {
		c.res.fail("saga: read the executions: %v", err)
		return
	}
	byKey := map[string][]sagaExecution{}
	for _, e := range execs {
		byKey[e.key] = append(byKey[e.key], e)
	}
	effects := c.st.charges.sagaEffects("saga_" + prefix)
	var bad []string
	for _, o := range outcomes {
		got := byKey[o.plan.key]
		c.res.SagaCancelRequests += len(o.cancels)
		v := sagaWrong(o, got, effects[o.plan.key])
		if len(v.wrong) == 0 && len(got) == 1 {
			v.wrong = c.sagaLateCancel(ctx, o, got[0])
		}
		if len(v.wrong) > 0 {
			bad = append(bad, v.wrong...)
			c.sagaDumps = append(c.sagaDumps, c.dumpSaga(ctx, o, got, effects[o.plan.key]))
			continue
		}
		if len(got) == 0 {
			continue
		}
		e := got[0]
		var res sagaResult
		_ = json.Unmarshal([]byte(e.result), &res)
		switch {
		case e.status == "Completed" && o.cancelled():
			c.res.SagasCompletedAnyway++
		case e.status == "Completed":
			c.res.SagasCompleted++
		default:
			c.res.SagasCancelled++
		}
		c.res.SagaCompensations += len(res.Undone)
		c.res.SagaGivenUp += e.givenUp
		for _, step := range v.uncompensate {
			c.res.SagaUncompensated = append(c.res.SagaUncompensated, fmt.Sprintf("%s (%s): %s", o.plan.key, e.id, step))
		}
	}
	if len(bad) > 0 {
		c.res.Other += len(bad)
		c.res.fail("saga: %d wrong: %s", len(bad), strings.Join(bad, "; "))
	}
}

// sagaLateCancel cancels a closed saga once more: the answer must say
// how it ended and ask nothing.
func (c *trialCheck) sagaLateCancel(ctx context.Context, o *sagaOutcome, e sagaExecution) []string {
	a := c.st.cancelRetrying(ctx, 0, e.id, time.Now().Add(30*time.Second), func(cancelAnswer) {})
	if a.status != http.StatusOK || a.execStatus != e.status || a.requested {
		return []string{fmt.Sprintf("%s: a late cancel of %s, %s: %s", o.plan.key, e.id, e.status, a)}
	}
	return nil
}

// sagaExecutions reads the chaos_saga executions whose keys start with
// prefix, with what their histories hold.
func (c *trialCheck) sagaExecutions(ctx context.Context, prefix string) ([]sagaExecution, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []sagaExecution
	err := c.st.queryAll(qctx, `
		SELECT e.execution_id::text, e.idempotency_key, e.status, coalesce(e.result::text, 'null'), e.closed_at,
			(SELECT count(*) FROM history_events h WHERE h.execution_id = e.execution_id AND h.type = 'WorkflowCancelRequested'),
			(SELECT count(*) FROM history_events h WHERE h.execution_id = e.execution_id AND h.type = 'WorkflowTaskCompleted'),
			(SELECT count(*) FROM history_events h WHERE h.execution_id = e.execution_id AND h.type = 'ActivityCancelRequested'),
			(SELECT coalesce(json_agg(h.attrs->>'activity_name' ORDER BY h.seq), '[]')::text FROM history_events h
				WHERE h.execution_id = e.execution_id AND h.type = 'ActivityCompleted')
		FROM executions e WHERE e.workflow_name = $1 AND starts_with(e.idempotency_key, $2)`,
		[]any{workflowSaga, prefix}, func(rows pgx.Rows) error {
			var e sagaExecution
			var completed string
			if err := rows.Scan(&e.id, &e.key, &e.status, &e.result, &e.closed, &e.cancelRequests, &e.tasks, &e.givenUp, &completed); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(completed), &e.completed); err != nil {
				return fmt.Errorf("execution %s: activities completed %s: %w", e.id, completed, err)
			}
			out = append(out, e)
			return nil
		})
	return out, err
}

// sagaEffects returns when the provider made each effect charged to a
// saga customer that starts with prefix, by saga key and step: the fleet
// worker charges a step of a saga to "saga_<key>/<step>" (sagaCustomer).
func (l *chargeLog) sagaEffects(prefix string) map[string]map[string][]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]map[string][]time.Time{}
	for i, c := range l.charges {
		if !strings.HasPrefix(c.CustomerID, prefix) {
			continue
		}
		order, step, _ := strings.Cut(strings.TrimPrefix(c.CustomerID, "saga_"), "/")
		if out[order] == nil {
			out[order] = map[string][]time.Time{}
		}
		out[order][step] = append(out[order][step], l.at[i])
	}
	return out
}

// dumpSaga describes a saga that went wrong for the trial's diagnostics:
// what its client heard, its executions with their histories, and its
// effects.
func (c *trialCheck) dumpSaga(ctx context.Context, o *sagaOutcome, got []sagaExecution, effects map[string][]time.Time) string {
	var b strings.Builder
	p := o.plan
	fmt.Fprintf(&b, "\n--- saga %s (execution %s; steps %v ms, undo %d ms; cancel %s after %s, twice %d) ---\nstart answers:\n", p.key, o.id,
		p.stepMS, p.undoMS, p.cancel, p.after, p.twice)
	o.start.mu.Lock()
	for _, a := range o.start.answers {
		fmt.Fprintf(&b, "  %s\n", a)
	}
	o.start.mu.Unlock()
	fmt.Fprintf(&b, "cancel answers (%d send(s)):\n", o.sends)
	for _, a := range o.cancels {
		fmt.Fprintf(&b, "  %s\n", a)
	}
	for step, at := range effects {
		var ts []string
		for _, t := range at {
			ts = append(ts, t.Format("15:04:05.000"))
		}
		fmt.Fprintf(&b, "effect %s at %s\n", step, strings.Join(ts, ", "))
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, e := range got {
		closed := "open"
		if e.closed != nil {
			closed = "closed " + e.closed.Format("15:04:05.000")
		}
		fmt.Fprintf(&b, "execution %s: %s, %s, result %s; activities: %s\nhistory:\n%s", e.id, e.status, closed, e.result,
			c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM (SELECT activity_id, activity_name, status, attempt FROM activities WHERE execution_id = $1) x`, e.id),
			c.st.jsonRows(dctx, `SELECT format('  %s %s %s %s', seq, type, to_char(at, 'HH24:MI:SS.MS'), attrs::text) FROM history_events
				WHERE execution_id = $1 ORDER BY seq`, e.id))
	}
	return b.String()
}

// TestSagaWrong checks the saga check itself on sagas made up: exact
// ones pass (never cancelled, cancelled mid-way, cancelled too late),
// and each way of going wrong shows.
func TestSagaWrong(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	acked := func() *startOutcome {
		return &startOutcome{answers: []answer{{status: http.StatusOK, executionID: "e1"}}}
	}
	asked := []cancelAnswer{{answer: answer{status: http.StatusOK, executionID: "e1"}, execStatus: "Running", requested: true}}
	closed := at(10)
	type fixture struct {
		o       *sagaOutcome
		got     []sagaExecution
		effects map[string][]time.Time
	}
	completed := func() fixture {
		return fixture{
			o: &sagaOutcome{plan: sagaPlan{sideStart: sideStart{key: "k"}, cancel: sagaNever}, start: acked(), id: "e1"},
			got: []sagaExecution{{id: "e1", key: "k", status: "Completed", result: `{"done":["reserve","charge","ship"],"undone":[]}`, closed: &closed,
				tasks: 4, completed: []string{"chaos_saga_reserve", "chaos_saga_charge", "chaos_saga_ship"}}},
			effects: map[string][]time.Time{"reserve": {at(1)}, "charge": {at(2)}, "ship": {at(3)}},
		}
	}
	cancelled := func() fixture {
		return fixture{
			o: &sagaOutcome{plan: sagaPlan{sideStart: sideStart{key: "k"}, cancel: sagaLater}, start: acked(), id: "e1", sends: 1, cancels: asked},
			got: []sagaExecution{{id: "e1", key: "k", status: "Cancelled", result: `{"done":["reserve","charge"],"undone":["refund","release"]}`, closed: &closed,
				cancelRequests: 1, tasks: 5, givenUp: 1,
				completed: []string{"chaos_saga_reserve", "chaos_saga_charge", "chaos_saga_refund", "chaos_saga_release"}}},
			// ship's attempt made its effect before it was given up.
			effects: map[string][]time.Time{"reserve": {at(1)}, "charge": {at(2)}, "ship": {at(3)}, "refund": {at(4)}, "release": {at(5)}},
		}
	}
	late := func() fixture {
		f := completed()
		f.o.plan.cancel, f.o.sends = sagaAtOnce, 2
		f.o.cancels = []cancelAnswer{
			{answer: answer{status: http.StatusOK, executionID: "e1"}, execStatus: "Completed"},
			{answer: answer{status: http.StatusServiceUnavailable, retryAfter: "1"}},
			{answer: answer{status: http.StatusOK, executionID: "e1"}, execStatus: "Completed"},
		}
		return f
	}
	for name, f := range map[string]fixture{"completed": completed(), "cancelled": cancelled(), "cancelled too late": late()} {
		v := sagaWrong(f.o, f.got, f.effects)
		if len(v.wrong) > 0 {
			t.Fatalf("an exact saga, %s: %v", name, v.wrong)
		}
		if name == "cancelled" && !slices.Equal(v.uncompensate, []string{"ship"}) {
			t.Fatalf("ship given up with its effect made: uncompensated %v", v.uncompensate)
		}
	}
	for name, spoil := range map[string]func(*fixture){
		"compensation twice":        func(f *fixture) { f.effects["refund"] = append(f.effects["refund"], at(6)) },
		"compensation lost":         func(f *fixture) { delete(f.effects, "release") },
		"compensation not in undo":  func(f *fixture) { f.got[0].result = `{"done":["reserve","charge"],"undone":["refund"]}` },
		"undone in the wrong order": func(f *fixture) { f.got[0].result = `{"done":["reserve","charge"],"undone":["release","refund"]}` },
		"undone for a step not done": func(f *fixture) {
			f.got[0].result = `{"done":["reserve"],"undone":["refund","release"]}`
		},
		"compensation of a step not done": func(f *fixture) {
			f.got[0].result = `{"done":["reserve"],"undone":["release"]}`
			f.got[0].completed = []string{"chaos_saga_reserve", "chaos_saga_release"}
		},
		"done without its effect":        func(f *fixture) { delete(f.effects, "charge") },
		"done without ActivityCompleted": func(f *fixture) { f.got[0].completed = f.got[0].completed[1:] },
		"step after the close":           func(f *fixture) { f.effects["ship"] = []time.Time{at(11)} },
		"given up after it completed": func(f *fixture) {
			f.got[0].completed = append(f.got[0].completed, "chaos_saga_ship")
		},
		"step twice":                  func(f *fixture) { f.effects["ship"] = []time.Time{at(3), at(4)} },
		"cancel requested twice":      func(f *fixture) { f.got[0].cancelRequests = 2 },
		"no cancel request":           func(f *fixture) { f.got[0].cancelRequests = 0 },
		"still running":               func(f *fixture) { f.got[0].status, f.got[0].closed = "Running", nil },
		"failed":                      func(f *fixture) { f.got[0].status = "Failed" },
		"terminated":                  func(f *fixture) { f.got[0].status = "Terminated" },
		"never asked":                 func(f *fixture) { f.o.sends, f.o.cancels = 0, nil },
		"two executions":              func(f *fixture) { f.got = append(f.got, f.got[0]) },
		"lost":                        func(f *fixture) { f.got = nil },
		"other execution":             func(f *fixture) { f.got[0].id = "e2" },
		"cancel never answered":       func(f *fixture) { f.o.unanswered = []string{"cancel 0: last answer 503"} },
		"cancel answered 500":         func(f *fixture) { f.o.cancels = append(f.o.cancels, cancelAnswer{answer: answer{status: 500}}) },
		"answered running, not asked": func(f *fixture) { f.o.cancels[0].requested = false },
		"answered completed":          func(f *fixture) { f.o.cancels[0].execStatus, f.o.cancels[0].requested = "Completed", false },
	} {
		f := cancelled()
		f.o.cancels = slices.Clone(f.o.cancels)
		spoil(&f)
		if v := sagaWrong(f.o, f.got, f.effects); len(v.wrong) == 0 {
			t.Errorf("%s: no violation", name)
		} else {
			t.Logf("%s: %s", name, strings.Join(v.wrong, "; "))
		}
	}
	for name, spoil := range map[string]func(*fixture){
		"a step missing":              func(f *fixture) { f.got[0].result = `{"done":["reserve","charge"],"undone":[]}` },
		"undone, yet Completed":       func(f *fixture) { f.got[0].result = `{"done":["reserve","charge","ship"],"undone":["refund"]}` },
		"a compensation made":         func(f *fixture) { f.effects["refund"] = []time.Time{at(4)} },
		"a cancel request, none sent": func(f *fixture) { f.got[0].cancelRequests = 1 },
		"an effect, no execution":     func(f *fixture) { f.got, f.o.start = nil, &startOutcome{} },
		"asked, none in history": func(f *fixture) {
			f.o.sends, f.o.cancels = 1, []cancelAnswer{{answer: answer{status: http.StatusOK, executionID: "e1"}, execStatus: "Running", requested: true}}
		},
	} {
		f := completed()
		spoil(&f)
		if v := sagaWrong(f.o, f.got, f.effects); len(v.wrong) == 0 {
			t.Errorf("%s: no violation", name)
		} else {
			t.Logf("%s: %s", name, strings.Join(v.wrong, "; "))
		}
	}
}
