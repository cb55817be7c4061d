//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/examples/fakepay"
)

// The chaos suite's load of starts under a concurrency start policy
// (docs/start-policies.md#concurrency): each trial sends -chaos.concurrency
// keyed starts of the charge workflow over its load window, each under
// {"concurrency": {"limit": 2, "key": "/customer_id"}}, their customers
// taken in turn from three, so that each customer's starts queue behind
// its two slots while the trial's faults land. A start over the limit is
// created Pending at once and begins when a running execution of its
// customer closes: the close gives the slot back in its shard's
// transaction and the shard's timer loop begins the oldest Pending one,
// so the faults hit both the starts and the hand-overs. The starts are
// retried as the other loads retry theirs; their idempotency keys make
// the retries converge on one execution.
//
// Once the trial has converged, every acknowledged start has exactly one
// execution, under its key, Completed, which ran under its customer's
// key and limit and records when it began (concurrency.began_at); none
// is left Pending. For each customer, no instant has more than two of
// its executions between began_at and closed_at (a close at the instant
// of a begin frees its slot first), and the executions that waited began
// in the order they were created. Each made its charge once, and the
// customer has no other charge. GET …/workflows/charge/concurrency of
// each customer answers nothing running and nothing pending.

var chaosConcurrency = flag.Int("chaos.concurrency", 40, "chaos: charge starts per trial under a concurrency start policy of limit 2 over 3 customers, spread over -chaos.load under the trial's faults (0: none)")

const (
	// concurrencyLimit is the limit of the trials' concurrency policy,
	// concurrencyCustomers how many customers (key values) share the
	// starts.
	concurrencyLimit     = 2
	concurrencyCustomers = 3
	// concurrencyAmount is what each start charges.
	concurrencyAmount = 100
)

// concurrencyPlan is one start of the load: its key, body, time and
// first ingest, and the customer it charges, its concurrency key.
type concurrencyPlan struct {
	sideStart
	customer string
}

// concurrencyCustomer names customer k of a trial.
func concurrencyCustomer(prefix string, k int) string { return fmt.Sprintf("%scc%d", prefix, k) }

// planConcurrency plans n starts over window. It draws from its own
// generator, so that adding this load left the other loads' and the
// faults' draws of a seed as they were.
func planConcurrency(seed uint64, kind, prefix string, n int, window time.Duration) []concurrencyPlan {
	rng := rand.New(rand.NewPCG(seed, fnv64(kind+"/concurrency")))
	plans := make([]concurrencyPlan, n)
	for j := range plans {
		customer := concurrencyCustomer(prefix, j%concurrencyCustomers)
		body := fmt.Sprintf(`{"input": {"amount_cents": %d, "customer_id": %q}, "start_policy": {"concurrency": {"limit": %d, "key": "/customer_id"}}}`,
			concurrencyAmount, customer, concurrencyLimit)
		plans[j] = concurrencyPlan{customer: customer, sideStart: sideStart{key: fmt.Sprintf("conc-%sk%02d", prefix, j), body: body,
			at: time.Duration(rng.Int64N(int64(window))), ingest: rng.IntN(2)}}
	}
	return plans
}

// runConcurrency sends the starts at their times, retrying as the load
// does, and returns what each heard, in plans' order.
func (s *stack) runConcurrency(ctx context.Context, plans []concurrencyPlan, giveUp time.Time) []*startOutcome {
	starts := make([]sideStart, len(plans))
	for j, p := range plans {
		starts[j] = p.sideStart
	}
	return s.runSideStarts(ctx, "charge", starts, giveUp)
}

// concurrencyExec is an execution of the load as PostgreSQL holds it.
type concurrencyExec struct {
	id, key, customer, status, chargeID string
	// policy says the execution names a concurrency policy, of key
	// policyKey and limit.
	policy    bool
	policyKey string
	limit     int
	created   time.Time
	// began is concurrency.began_at, to the nanosecond the scheduler
	// wrote; closed is closed_at (microseconds, truncated).
	began, closed *time.Time
}

// waited says whether the execution was created Pending: it began after
// it was created (one given a slot at once begins as it is created).
func (e concurrencyExec) waited() bool {
	return e.began != nil && e.began.Truncate(time.Microsecond).After(e.created)
}

// concurrencyFacts is what the check of the load reads.
type concurrencyFacts struct {
	execs []concurrencyExec
	// counts are what GET …/concurrency answered of each customer;
	// one missing was not read.
	counts map[string]api.ConcurrencyResponse
	// charges are each customer's at the provider.
	charges map[string][]fakepay.Charge
}

// concurrencyFacts reads the load's executions, the counts of its
// customers through ingest (alternating ingests by attempt), and their
// charges.
func (c *trialCheck) concurrencyFacts(ctx context.Context, plans []concurrencyPlan, attempt int) (concurrencyFacts, error) {
	qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	f := concurrencyFacts{counts: map[string]api.ConcurrencyResponse{}, charges: map[string][]fakepay.Charge{}}
	err := c.st.queryAll(qctx, `
		SELECT execution_id::text, idempotency_key, coalesce(input->>'customer_id', ''), status, coalesce(result->>'charge_id', ''),
			concurrency IS NOT NULL, coalesce(concurrency->>'key', ''), coalesce((concurrency->>'limit')::int, 0), concurrency->>'began_at',
			created_at, closed_at
		FROM executions WHERE workflow_name = 'charge' AND starts_with(idempotency_key, $1)
		ORDER BY created_at`, []any{"conc-" + c.prefix}, func(rows pgx.Rows) error {
		var e concurrencyExec
		var began *string
		if err := rows.Scan(&e.id, &e.key, &e.customer, &e.status, &e.chargeID, &e.policy, &e.policyKey, &e.limit, &began,
			&e.created, &e.closed); err != nil {
			return err
		}
		if began != nil {
			t, err := time.Parse(time.RFC3339Nano, *began)
			if err != nil {
				return fmt.Errorf("execution %s: began_at %q: %w", e.id, *began, err)
			}
			e.began = &t
		}
		f.execs = append(f.execs, e)
		return nil
	})
	if err != nil {
		return f, fmt.Errorf("read the executions: %w", err)
	}
	slices.SortStableFunc(f.execs, func(a, b concurrencyExec) int { return a.created.Compare(b.created) })
	customers := concurrencyCustomersOf(plans)
	for i, customer := range customers {
		var r api.ConcurrencyResponse
		path := "/api/harvest/workflows/charge/concurrency?key=" + url.QueryEscape(customer)
		found, err := c.st.scheduleGet(qctx, attempt+i, path, &r)
		if err != nil {
			return f, err
		}
		if !found {
			return f, fmt.Errorf("GET %s: 404", path)
		}
		f.counts[customer] = r
		f.charges[customer] = c.st.charges.byCustomer(customer)[customer]
	}
	return f, nil
}

// concurrencyCustomersOf lists the customers of plans, in order.
func concurrencyCustomersOf(plans []concurrencyPlan) []string {
	var out []string
	for _, p := range plans {
		if !slices.Contains(out, p.customer) {
			out = append(out, p.customer)
		}
	}
	return out
}

// concurrencySettled says whether the load is done: every acknowledged
// start has an execution, every execution is Completed, and every
// customer's count is back to nothing running and nothing pending.
func concurrencySettled(plans []concurrencyPlan, outcomes []*startOutcome, f concurrencyFacts) bool {
	have := map[string]bool{}
	for _, e := range f.execs {
		if e.status != "Completed" {
			return false
		}
		have[e.key] = true
	}
	for j, o := range outcomes {
		if o.acked() && !have[plans[j].key] {
			return false
		}
	}
	for _, customer := range concurrencyCustomersOf(plans) {
		n, ok := f.counts[customer]
		if !ok || n.Running != 0 || n.Pending != 0 {
			return false
		}
	}
	return true
}

// concurrencyVerdict is what the check of the load found: what is
// wrong, and what it saw right.
type concurrencyVerdict struct {
	wrong []string
	// bad are the customers something went wrong with.
	bad map[string]bool
	// acked counts the acknowledged starts, completed the executions
	// Completed, waited those of them created Pending, and longestWait
	// the longest one waited.
	acked, completed, waited int
	longestWait              time.Duration
	// peak is the most executions of a customer that ran at once.
	peak int
	// dupExecutions and dupEffects count executions beyond one per key
	// and charges beyond one per execution.
	dupExecutions, dupEffects int
}

// concurrencyPeak sweeps the executions of one customer: the most that
// ran at once in [began, closed), a close at the instant of a begin
// freeing its slot first, and the executions running at the first
// instant that many ran. One that never closed runs to the end.
func concurrencyPeak(execs []concurrencyExec) (int, []string) {
	type edge struct {
		at    time.Time
		delta int
		id    string
	}
	var edges []edge
	for _, e := range execs {
		if e.began == nil {
			continue
		}
		edges = append(edges, edge{*e.began, 1, e.id})
		if e.closed != nil {
			edges = append(edges, edge{*e.closed, -1, e.id})
		}
	}
	slices.SortStableFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // closes first
	})
	peak, running := 0, map[string]bool{}
	var at []string
	for _, ed := range edges {
		if ed.delta < 0 {
			delete(running, ed.id)
			continue
		}
		running[ed.id] = true
		if len(running) > peak {
			peak, at = len(running), nil
			for id := range running {
				at = append(at, id)
			}
			slices.Sort(at)
		}
	}
	return peak, at
}

// concurrencyWrong checks the load: the plans, what their clients heard
// (outcomes, in plans' order) and f.
func concurrencyWrong(plans []concurrencyPlan, outcomes []*startOutcome, f concurrencyFacts) concurrencyVerdict {
	v := concurrencyVerdict{bad: map[string]bool{}}
	bad := func(customer, format string, args ...any) {
		v.bad[customer] = true
		v.wrong = append(v.wrong, fmt.Sprintf(format, args...))
	}
	byKey := map[string][]concurrencyExec{}
	for _, e := range f.execs {
		byKey[e.key] = append(byKey[e.key], e)
	}
	planOf := map[string]concurrencyPlan{}
	for j, p := range plans {
		planOf[p.key] = p
		execs, acked := byKey[p.key], outcomes[j].acked()
		if acked {
			v.acked++
		}
		switch {
		case len(execs) > 1:
			v.dupExecutions += len(execs) - 1
			bad(p.customer, "%s: %d executions", p.key, len(execs))
		case len(execs) == 0 && acked:
			bad(p.customer, "%s: acknowledged, no execution", p.key)
		}
		o := outcomes[j]
		o.mu.Lock()
		for _, a := range o.answers {
			switch {
			case !a.ok() && !a.retryable():
				bad(p.customer, "%s: refused: %s", p.key, a)
			// A fault is answered 503 with Retry-After, or with no answer
			// from a process that died; never 500.
			case a.status >= 500 && (a.status != http.StatusServiceUnavailable || a.retryAfter == ""):
				bad(p.customer, "%s: answered %s", p.key, a)
			case a.ok() && a.executionID != "" && len(execs) > 0 && !slices.ContainsFunc(execs, func(e concurrencyExec) bool { return e.id == a.executionID }):
				bad(p.customer, "%s: answered %s, not its execution", p.key, a)
			}
		}
		o.mu.Unlock()
	}
	byCustomer := map[string][]concurrencyExec{}
	for _, e := range f.execs {
		p, ok := planOf[e.key]
		if !ok {
			bad(e.customer, "execution %s has key %q, none of the load's", e.id, e.key)
			continue
		}
		byCustomer[p.customer] = append(byCustomer[p.customer], e)
		switch {
		case e.status != "Completed":
			bad(p.customer, "%s: execution %s %s, not Completed", e.key, e.id, e.status)
		case e.customer != p.customer:
			bad(p.customer, "%s: execution %s charges %q, want %q", e.key, e.id, e.customer, p.customer)
		case !e.policy || e.policyKey != p.customer || e.limit != concurrencyLimit:
			bad(p.customer, "%s: execution %s under policy %v key %q limit %d, want key %q limit %d", e.key, e.id, e.policy, e.policyKey, e.limit,
				p.customer, concurrencyLimit)
		case e.began == nil || e.closed == nil:
			bad(p.customer, "%s: execution %s Completed, began_at %v closed_at %v", e.key, e.id, e.began, e.closed)
		case e.began.Truncate(time.Microsecond).Before(e.created) || e.closed.Before(e.began.Truncate(time.Microsecond)):
			bad(p.customer, "%s: execution %s created %s, began %s, closed %s", e.key, e.id, e.created.Format(time.RFC3339Nano),
				e.began.Format(time.RFC3339Nano), e.closed.Format(time.RFC3339Nano))
		default:
			v.completed++
			if e.waited() {
				v.waited++
				v.longestWait = max(v.longestWait, e.began.Sub(e.created))
			}
		}
	}
	for _, customer := range concurrencyCustomersOf(plans) {
		execs := byCustomer[customer]
		peak, at := concurrencyPeak(execs)
		v.peak = max(v.peak, peak)
		if peak > concurrencyLimit {
			bad(customer, "%s: %d executions ran at once (limit %d): %s", customer, peak, concurrencyLimit, strings.Join(at, ", "))
		}
		// Those that waited began in the order they were created: the
		// order of their starts in their shard's stream.
		var waited []concurrencyExec
		for _, e := range execs {
			if e.waited() {
				waited = append(waited, e)
			}
		}
		for i := 1; i < len(waited); i++ {
			a, b := waited[i-1], waited[i]
			if a.created.Before(b.created) && b.began.Before(*a.began) {
				bad(customer, "%s: %s (created %s) began %s, before %s (created %s, began %s)", customer, b.id, b.created.Format("15:04:05.000000"),
					b.began.Format("15:04:05.000000"), a.id, a.created.Format("15:04:05.000000"), a.began.Format("15:04:05.000000"))
			}
		}
		charged := map[string]int{}
		for _, ch := range f.charges[customer] {
			charged[ch.ID]++
			if ch.AmountCents != concurrencyAmount {
				bad(customer, "%s: charge %s of %d cents, want %d", customer, ch.ID, ch.AmountCents, concurrencyAmount)
			}
		}
		if n := len(f.charges[customer]) - len(execs); n > 0 {
			v.dupEffects += n
			bad(customer, "%s: %d charges for %d executions", customer, len(f.charges[customer]), len(execs))
		}
		for _, e := range execs {
			if e.status == "Completed" && charged[e.chargeID] != 1 {
				bad(customer, "%s: execution %s completed with charge %q, charged %d times", e.key, e.id, e.chargeID, charged[e.chargeID])
			}
		}
		switch n, ok := f.counts[customer]; {
		case !ok:
			bad(customer, "%s: its count was not read", customer)
		case n.Running != 0 || n.Pending != 0:
			bad(customer, "%s: GET …/concurrency answers %d running, %d pending (limit %d)", customer, n.Running, n.Pending, n.Limit)
		}
	}
	return v
}

// concurrencyInvariants checks the load once it settled or the bound
// passed. It returns a line of what it did, and a description of the
// customers that went wrong for the trial's diagnostics.
func (c *trialCheck) concurrencyInvariants(ctx context.Context, plans []concurrencyPlan, outcomes []*startOutcome) (summary, dump string) {
	if len(plans) == 0 {
		return "", ""
	}
	var f concurrencyFacts
	var err error
	attempt := 0
	sctx, cancel := context.WithTimeout(ctx, c.cfg.bound)
	_ = pollUntil(sctx, 500*time.Millisecond, func() bool {
		attempt++
		f, err = c.concurrencyFacts(sctx, plans, attempt)
		return err == nil && concurrencySettled(plans, outcomes, f)
	})
	cancel()
	if err != nil {
		// The bound passed on a failed read: read once more.
		f, err = c.concurrencyFacts(ctx, plans, attempt+1)
	}
	if err != nil {
		c.res.Other++
		c.res.fail("concurrency: read: %v", err)
		return "", ""
	}
	v := concurrencyWrong(plans, outcomes, f)
	c.res.DupExecutions += v.dupExecutions
	c.res.DupEffects += v.dupEffects
	if len(v.wrong) > 0 {
		c.res.Other += len(v.wrong)
		c.res.fail("concurrency: %d wrong: %s", len(v.wrong), sample(v.wrong))
		for _, customer := range concurrencyCustomersOf(plans) {
			if v.bad[customer] {
				dump += c.dumpConcurrency(ctx, customer, plans, outcomes, f)
			}
		}
	}
	summary = fmt.Sprintf("concurrency: %d starts over %d customers, limit %d: %d acknowledged, %d executions Completed and charged once; %d waited Pending (the longest %s); the most of one customer running at once: %d; counts back to 0",
		len(plans), len(concurrencyCustomersOf(plans)), concurrencyLimit, v.acked, v.completed, v.waited, v.longestWait.Round(time.Millisecond), v.peak)
	return summary, dump
}

// dumpConcurrency describes a customer that went wrong for the trial's
// diagnostics: what the clients of its starts heard, its executions, its
// key's state and queue, and its charges.
func (c *trialCheck) dumpConcurrency(ctx context.Context, customer string, plans []concurrencyPlan, outcomes []*startOutcome, f concurrencyFacts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n--- concurrency key %s (limit %d) ---\nanswers:\n", customer, concurrencyLimit)
	for j, p := range plans {
		if p.customer != customer {
			continue
		}
		o := outcomes[j]
		o.mu.Lock()
		for _, a := range o.answers {
			fmt.Fprintf(&b, "  %s %s\n", p.key, a)
		}
		o.mu.Unlock()
	}
	fmt.Fprintf(&b, "executions (created, began, closed):\n")
	stamp := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format("15:04:05.000000")
	}
	for _, e := range f.execs {
		if e.customer == customer {
			fmt.Fprintf(&b, "  %s key %s %s %s %s %s charge %q policy %v %q %d\n", e.id, e.key, e.status, stamp(&e.created), stamp(e.began),
				stamp(e.closed), e.chargeID, e.policy, e.policyKey, e.limit)
		}
	}
	count, _ := json.Marshal(f.counts[customer])
	fmt.Fprintf(&b, "GET …/concurrency: %s\n", count)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fmt.Fprintf(&b, "key: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM start_policy_keys x WHERE workflow_name = 'charge' AND kind = 'concurrency' AND policy_key = $1`, customer))
	fmt.Fprintf(&b, "waiting: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM concurrency_waiting x WHERE workflow_name = 'charge' AND policy_key = $1 ORDER BY seq`, customer))
	fmt.Fprintf(&b, "charges (%d):", len(f.charges[customer]))
	for _, ch := range f.charges[customer] {
		fmt.Fprintf(&b, " %s", ch.ID)
	}
	b.WriteString("\n")
	return b.String()
}

// TestConcurrencyWrong checks the concurrency check itself on a load
// made up: an exact one passes, and each way of going wrong shows.
func TestConcurrencyWrong(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) *time.Time {
		t := t0.Add(time.Duration(ms) * time.Millisecond)
		return &t
	}
	// Five starts of customer c: e0 and e1 run at once; e2, e3 and e4
	// wait, e2 beginning as e0 closes and e3 as e1 closes, e4 later. One
	// start of customer d, given its slot at once.
	exact := func() ([]concurrencyPlan, []*startOutcome, concurrencyFacts) {
		var plans []concurrencyPlan
		var outcomes []*startOutcome
		f := concurrencyFacts{counts: map[string]api.ConcurrencyResponse{}, charges: map[string][]fakepay.Charge{}}
		for j, times := range [][3]int{{0, 0, 100}, {10, 10, 150}, {20, 100, 200}, {30, 150, 250}, {40, 200, 260}, {50, 50, 60}} {
			customer := "c"
			if j == 5 {
				customer = "d"
			}
			key, id := fmt.Sprintf("k%d", j), fmt.Sprintf("e%d", j)
			plans = append(plans, concurrencyPlan{sideStart: sideStart{key: key}, customer: customer})
			outcomes = append(outcomes, &startOutcome{answers: []answer{{status: http.StatusCreated, executionID: id}}})
			f.execs = append(f.execs, concurrencyExec{id: id, key: key, customer: customer, status: "Completed", chargeID: "ch" + id,
				policy: true, policyKey: customer, limit: concurrencyLimit, created: *at(times[0]), began: at(times[1]), closed: at(times[2])})
			f.charges[customer] = append(f.charges[customer], fakepay.Charge{ID: "ch" + id, AmountCents: concurrencyAmount, CustomerID: customer})
			f.counts[customer] = api.ConcurrencyResponse{Workflow: "charge", Key: customer, Limit: concurrencyLimit}
		}
		return plans, outcomes, f
	}
	plans, outcomes, f := exact()
	if v := concurrencyWrong(plans, outcomes, f); len(v.wrong) > 0 || v.acked != 6 || v.completed != 6 || v.waited != 3 ||
		v.longestWait != 160*time.Millisecond || v.peak != 2 {
		t.Fatalf("an exact load: %+v", v)
	}
	if !concurrencySettled(plans, outcomes, f) {
		t.Fatal("an exact load is not settled")
	}
	// A start never acknowledged may have no execution.
	plans, outcomes, f = exact()
	outcomes[5].answers, f.execs, f.charges["d"] = []answer{{status: 0, err: "refused"}}, f.execs[:5], nil
	if v := concurrencyWrong(plans, outcomes, f); len(v.wrong) > 0 {
		t.Fatalf("a start never acknowledged: %v", v.wrong)
	}
	for name, spoil := range map[string]func(f *concurrencyFacts, outcomes []*startOutcome){
		"lost": func(f *concurrencyFacts, _ []*startOutcome) { f.execs = f.execs[1:] },
		"twice": func(f *concurrencyFacts, _ []*startOutcome) {
			e := f.execs[2]
			e.id = "dup"
			f.execs = append(f.execs, e)
		},
		"stranger": func(f *concurrencyFacts, _ []*startOutcome) { f.execs[2].key = "k9" },
		"pending": func(f *concurrencyFacts, _ []*startOutcome) {
			f.execs[4].status, f.execs[4].began, f.execs[4].closed = "Pending", nil, nil
		},
		"failed":      func(f *concurrencyFacts, _ []*startOutcome) { f.execs[4].status = "Failed" },
		"no policy":   func(f *concurrencyFacts, _ []*startOutcome) { f.execs[1].policy = false },
		"other key":   func(f *concurrencyFacts, _ []*startOutcome) { f.execs[1].policyKey = "d" },
		"other limit": func(f *concurrencyFacts, _ []*startOutcome) { f.execs[1].limit = 3 },
		"other input": func(f *concurrencyFacts, _ []*startOutcome) { f.execs[1].customer = "d" },
		"never began": func(f *concurrencyFacts, _ []*startOutcome) { f.execs[3].began = nil },
		"early begin": func(f *concurrencyFacts, _ []*startOutcome) { f.execs[3].began = at(25) },
		"three at once": func(f *concurrencyFacts, _ []*startOutcome) {
			f.execs[2].began = at(99)
		},
		"never closed": func(f *concurrencyFacts, _ []*startOutcome) { f.execs[0].closed = nil },
		"out of order": func(f *concurrencyFacts, _ []*startOutcome) { f.execs[3].began, f.execs[2].began = at(100), at(150) },
		"refused": func(_ *concurrencyFacts, o []*startOutcome) {
			o[1].answers = append(o[1].answers, answer{status: http.StatusConflict})
		},
		"a 500": func(_ *concurrencyFacts, o []*startOutcome) {
			o[1].answers = append(o[1].answers, answer{status: http.StatusInternalServerError})
		},
		"wrong answer": func(_ *concurrencyFacts, o []*startOutcome) { o[1].answers[0].executionID = "e0" },
		"charged twice": func(f *concurrencyFacts, _ []*startOutcome) {
			f.charges["c"] = append(f.charges["c"], f.charges["c"][0])
		},
		"not charged":  func(f *concurrencyFacts, _ []*startOutcome) { f.charges["c"] = f.charges["c"][1:] },
		"other amount": func(f *concurrencyFacts, _ []*startOutcome) { f.charges["d"][0].AmountCents = 1 },
		"still running": func(f *concurrencyFacts, _ []*startOutcome) {
			f.counts["c"] = api.ConcurrencyResponse{Running: 1, Limit: concurrencyLimit}
		},
		"still pending": func(f *concurrencyFacts, _ []*startOutcome) {
			f.counts["d"] = api.ConcurrencyResponse{Pending: 1, Limit: concurrencyLimit}
		},
		"count unread": func(f *concurrencyFacts, _ []*startOutcome) { delete(f.counts, "d") },
	} {
		plans, outcomes, f := exact()
		spoil(&f, outcomes)
		if v := concurrencyWrong(plans, outcomes, f); len(v.wrong) == 0 {
			t.Errorf("%s: no violation", name)
		} else {
			t.Logf("%s: %s", name, strings.Join(v.wrong, "; "))
		}
	}
	// A close at the instant of a begin frees its slot first.
	if peak, _ := concurrencyPeak(f.execs[:5]); peak != 2 {
		t.Errorf("closes at the instants of begins: peak %d, want 2", peak)
	}
}
