//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The chaos suite's load of continue-as-new (docs/long-workflows.md):
// each trial starts a few executions of chaos_chain
// (e2e/testdata/fleetworker), which takes int signals "v", keeps them in
// a list it carries from run to run, continues as new every
// chaosChainEvery of them and returns the list when it receives -1.
// While the trial's faults land, a client sends each one the values
// 1..chaosChainValues, then -1, as keyed signals to the chain's first run (the execution id its
// start answered), one after the other, each retried with its key until
// it is acknowledged: the runs switch under the signals, and the faults
// hit the switches. Every even value goes as a keyed update instead
// (docs/long-workflows.md#updating-a-running-workflow), retried with its
// key until it is answered: an update in flight across a switch moves to
// the next run. After the trial every acknowledged start must have
// exactly one chain, its runs linked both ways under one workflow_id,
// every run but the last ContinuedAsNew with the values so far as its
// input, the last Completed with every value exactly once, in order, and
// each update accepted once in the chain's histories: a signal or update
// lost across a switch, or taken by two runs, shows.

const (
	workflowChain = "chaos_chain"
	// chainEnd is the value that ends a chain.
	chainEnd = -1
)

// chaosChainValues is how many values a chain takes before -1, and
// chaosChainEvery how many each run takes before it continues as new: a
// chain has values/every+1 runs. The suite's trials take 12 and 3; the
// issue's check, continue-as-new every 1,000 values under the faults, is
// -chaos.chain.values 3000 -chaos.chain.every 1000 (with a -chaos.load
// long enough for the faults to fall among the sends).
var (
	chaosChainValues = flag.Int("chaos.chain.values", 12, "chaos: values each chaos_chain takes before its end (a multiple of -chaos.chain.every)")
	chaosChainEvery  = flag.Int("chaos.chain.every", 3, "chaos: values each run of a chaos_chain takes before it continues as new")
)

var chaosChains = flag.Int("chaos.chains", 2, "chaos: chaos_chain starts per trial (continue-as-new chains fed keyed signals under faults)")

// chainPlan is one chaos_chain start and when its signals go.
type chainPlan struct {
	sideStart
	// sends are the earliest times, after the load began, of the values'
	// sends, the end value last; a send waits for the one before it.
	sends []time.Duration
}

// planChains plans n chains over window: each starts in its first
// quarter and spreads its sends over the rest, so that the faults fall
// among them. It draws from its own generator, so that adding this load
// left the other loads' and the faults' draws of a seed as they were.
func planChains(seed uint64, kind, prefix string, n int, window time.Duration) []chainPlan {
	rng := rand.New(rand.NewPCG(seed, fnv64(kind+"/chain")))
	plans := make([]chainPlan, n)
	for j := range plans {
		at := time.Duration(rng.Int64N(int64(window/4) + 1))
		p := chainPlan{sideStart: sideStart{key: fmt.Sprintf("chain-%sc%02d", prefix, j), body: fmt.Sprintf(`{"input": {"every": %d}}`, *chaosChainEvery),
			at: at, ingest: rng.IntN(2)}}
		gap := int64(window-at)/int64(*chaosChainValues+1) + 1
		t := at
		for range *chaosChainValues + 1 {
			t += time.Duration(gap/2 + rng.Int64N(gap))
			p.sends = append(p.sends, t)
		}
		plans[j] = p
	}
	return plans
}

// chainKey is the idempotency key of the signal carrying value i (1..),
// or of the end value.
func chainKey(i int) string {
	if i > *chaosChainValues {
		return "end"
	}
	return fmt.Sprintf("v-%d", i)
}

// viaUpdate says whether value i (1..) goes as an update.
func viaUpdate(i int) bool { return i%2 == 0 && i <= *chaosChainValues }

// signalAnswer is one signal (or update) request's exchange.
type signalAnswer struct {
	answer
	delivered *bool // signal_delivered; nil when the outcome came late
	// updateStatus is an update's status as answered ("" for a signal).
	updateStatus string
}

func (a signalAnswer) String() string {
	if !a.ok() {
		return a.answer.String()
	}
	if a.updateStatus != "" {
		return fmt.Sprintf("%s attempt %d ingest-%d took %s: %d update %s deduplicated=%v", a.at.Format("15:04:05.000"), a.attempt, a.ingest,
			a.took.Round(time.Millisecond), a.status, a.updateStatus, a.deduplicated)
	}
	s := fmt.Sprintf("%s attempt %d ingest-%d took %s: %d", a.at.Format("15:04:05.000"), a.attempt, a.ingest, a.took.Round(time.Millisecond), a.status)
	if a.delivered != nil {
		return s + fmt.Sprintf(" signal_delivered=%v", *a.delivered)
	}
	return s + " accepted, command_id=" + a.commandID
}

// chainSend is one value's send and what it heard.
type chainSend struct {
	key     string
	value   int
	update  bool
	answers []signalAnswer
}

func (s *chainSend) acked() bool {
	return slices.ContainsFunc(s.answers, func(a signalAnswer) bool { return a.acks(s.update) })
}

// acks says whether a acknowledges its send: a signal's 202, an update's
// answer (200, completed).
func (a signalAnswer) acks(update bool) bool {
	if update {
		return a.status == http.StatusOK && a.updateStatus == "completed"
	}
	return a.status == http.StatusAccepted
}

// chainOutcome is what the client of one chain heard.
type chainOutcome struct {
	plan  chainPlan
	start *startOutcome
	// first is the execution id the start answered, to which every
	// signal went.
	first string
	sends []*chainSend
	// stopped says why the sends stopped before the end value was
	// acknowledged, if they did.
	stopped string
}

// runChains starts the chains at their times, as the other side loads
// do, and sends each acknowledged one its values. The starts give up at
// giveUp; a signal is retried until signalsGiveUp.
func (s *stack) runChains(ctx context.Context, plans []chainPlan, giveUp, signalsGiveUp time.Time) []*chainOutcome {
	begin := time.Now()
	out := make([]*chainOutcome, len(plans))
	var wg sync.WaitGroup
	for j, p := range plans {
		o := &chainOutcome{plan: p, start: &startOutcome{}}
		out[j] = o
		wg.Go(func() {
			if !sendAt(ctx, begin.Add(p.at)) {
				return
			}
			var accepted string // a late answer's command
			s.startRetrying(ctx, workflowChain, p.ingest, p.key, p.body, giveUp, func(a answer) {
				o.start.mu.Lock()
				o.start.answers = append(o.start.answers, a)
				o.start.mu.Unlock()
				if a.ok() && o.first == "" {
					o.first = a.executionID
				}
				if a.ok() && a.executionID == "" && a.commandID != "" {
					accepted = a.commandID
				}
			})
			if o.first == "" && accepted != "" {
				// Acknowledged late (202 accepted): the execution is the
				// command's, once it is applied, as a client polling
				// GET /api/harvest/commands/{id} learns.
				o.first = s.appliedExecution(ctx, accepted, signalsGiveUp)
			}
			if o.first == "" {
				return // not acknowledged: nothing to signal
			}
			ingest := p.ingest
			for i, at := range p.sends {
				value := i + 1
				if value > *chaosChainValues {
					value = chainEnd
				}
				if !sendAt(ctx, begin.Add(at)) {
					o.stopped = "the trial ended"
					return
				}
				send := &chainSend{key: chainKey(i + 1), value: value, update: viaUpdate(i + 1)}
				o.sends = append(o.sends, send)
				record := func(a signalAnswer) { send.answers = append(send.answers, a) }
				var last signalAnswer
				if send.update {
					last = s.updateRetrying(ctx, ingest, o.first, "v", send.key, fmt.Sprint(value), signalsGiveUp, record)
				} else {
					last = s.signalRetrying(ctx, ingest, o.first, "v", send.key, fmt.Sprint(value), signalsGiveUp, record)
				}
				if !send.acked() {
					o.stopped = fmt.Sprintf("%s (value %d) not acknowledged, last answer: %s", send.key, value, last)
					return
				}
				ingest = (ingest + 1) % len(s.baseURLs)
			}
		})
	}
	wg.Wait()
	return out
}

// appliedExecution waits, until deadline, for the command commandID to be
// applied, and returns the execution its stored outcome names ("" if it
// is not applied by then).
func (s *stack) appliedExecution(ctx context.Context, commandID string, deadline time.Time) string {
	for ctx.Err() == nil && time.Now().Before(deadline) {
		raw, err := s.outcomeOf(ctx, commandID)
		if err == nil && raw != nil {
			var out struct {
				ExecutionID string `json:"execution_id"`
			}
			if json.Unmarshal(raw, &out) == nil && out.ExecutionID != "" {
				return out.ExecutionID
			}
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ""
		case <-t.C:
		}
	}
	return ""
}

// signalRetrying sends a keyed signal until it is acknowledged (202), is
// refused for good or giveUp passes, switching ingest after each failed
// attempt, and records every answer. A 404 is retried too: a start
// answered before it was applied has no execution yet.
func (s *stack) signalRetrying(ctx context.Context, first int, executionID, name, key, body string, giveUp time.Time, record func(signalAnswer)) signalAnswer {
	return retrying(ctx, first, len(s.baseURLs), giveUp, func(ingest, attempt int) signalAnswer {
		a := s.signalRequest(ctx, ingest, executionID, name, key, body)
		a.attempt = attempt
		record(a)
		return a
	}, func(a signalAnswer) bool {
		return a.status == http.StatusAccepted || !(a.retryable() || a.status == http.StatusNotFound)
	})
}

// signalRequest makes one keyed signal request to ingest i.
func (s *stack) signalRequest(ctx context.Context, i int, executionID, name, key, body string) signalAnswer {
	var out struct {
		SignalDelivered *bool  `json:"signal_delivered"`
		CommandID       string `json:"command_id"`
	}
	a := s.keyedPost(ctx, i, "/api/harvest/workflows/"+executionID+"/signal/"+name, key, body, &out)
	a.delivered, a.commandID = out.SignalDelivered, out.CommandID
	return a
}

// keyedPost makes one POST to ingest i's path with an Idempotency-Key
// and a JSON body, decodes a 2xx answer's body into out, and returns
// the exchange (an error answer's code and message in it).
func (s *stack) keyedPost(ctx context.Context, i int, path, key, body string, out any) signalAnswer {
	a := signalAnswer{answer: answer{ingest: i, at: time.Now()}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.baseURLs[i]+path, bytes.NewBufferString(body))
	if err != nil {
		a.err = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := s.client.Do(req)
	if err != nil {
		a.err = err.Error()
		a.took = time.Since(a.at)
		return a
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	a.status = resp.StatusCode
	a.retryAfter = resp.Header.Get("Retry-After")
	a.took = time.Since(a.at)
	if !a.ok() {
		var e struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		a.code, a.err = e.Error, e.Message
		return a
	}
	if err := json.Unmarshal(data, out); err != nil {
		a.err = fmt.Sprintf("answer is not JSON: %v: %q", err, data)
	}
	return a
}

// updateRetrying sends a keyed update until it is answered (200,
// completed), is refused for good or giveUp passes, switching ingest
// after each failed attempt, and records every answer. A 202 (the
// update is not answered yet) is sent again, with its key: it is the
// same update. A 404 execution_not_found is retried, as for a signal.
func (s *stack) updateRetrying(ctx context.Context, first int, executionID, name, key, body string, giveUp time.Time, record func(signalAnswer)) signalAnswer {
	return retrying(ctx, first, len(s.baseURLs), giveUp, func(ingest, attempt int) signalAnswer {
		a := s.updateRequest(ctx, ingest, executionID, name, key, body)
		a.attempt = attempt
		record(a)
		return a
	}, func(a signalAnswer) bool {
		return a.acks(true) || !(a.retryable() || a.status == http.StatusAccepted || a.code == "execution_not_found")
	})
}

// updateRequest makes one keyed update request to ingest i.
func (s *stack) updateRequest(ctx context.Context, i int, executionID, name, key, body string) signalAnswer {
	var out struct {
		UpdateID     string `json:"update_id"`
		Status       string `json:"status"`
		Deduplicated bool   `json:"deduplicated"`
	}
	a := s.keyedPost(ctx, i, "/api/harvest/executions/"+executionID+"/updates/"+name, key, body, &out)
	a.updateStatus, a.commandID, a.deduplicated = out.Status, out.UpdateID, out.Deduplicated
	return a
}

// chainRun is one run of a chain as PostgreSQL holds it.
type chainRun struct {
	id, key, workflowID, status, result, input string
	chainID, from, as                          string
	// keys are the idempotency keys of the signals its history holds, in
	// order; updates the ids of the updates it accepted.
	keys    []string
	updates []string
}

// chain is a chaos_chain start's runs: the one its key names first, then
// those whose chain_id names it, and any other run of its workflow_id.
type chain struct {
	key  string
	runs []chainRun
}

// newest is the chain's run no run continued from, or the first.
func (ch chain) newest() chainRun {
	for _, r := range ch.runs {
		if r.as == "" {
			return r
		}
	}
	return ch.runs[0]
}

// chainInvariants checks the trial's chains, once their sends ended and
// they all completed or the bound passed.
func (c *trialCheck) chainInvariants(ctx context.Context, outcomes []*chainOutcome) {
	if len(outcomes) == 0 {
		return
	}
	acked := map[string]bool{}
	for _, o := range outcomes {
		acked[o.plan.key] = o.start.acked()
	}
	chains, err := settle(ctx, c, acked, func(ctx context.Context) ([]chain, error) {
		return c.chains(ctx, "chain-"+c.prefix)
	}, func(ch chain) (string, string) { return ch.key, ch.newest().status })
	if err != nil {
		c.res.fail("chain: read the executions: %v", err)
		return
	}
	byKey := map[string][]chain{}
	for _, ch := range chains {
		byKey[ch.key] = append(byKey[ch.key], ch)
	}
	var bad []string
	for _, o := range outcomes {
		for _, s := range o.sends {
			if len(s.answers) > 1 {
				c.res.ChainResent++
			}
		}
		got := byKey[o.plan.key]
		wrong := c.chainWrong(ctx, o, got)
		if len(wrong) > 0 {
			bad = append(bad, wrong...)
			c.chainDumps = append(c.chainDumps, c.dumpChain(ctx, o, got))
		} else if len(got) == 1 {
			c.res.ChainsExact++
			c.res.ChainRuns += len(got[0].runs)
			c.res.ChainCarried += got[0].carried()
			c.res.ChainUpdates += *chaosChainValues / 2
		}
	}
	if len(bad) > 0 {
		c.res.Other += len(bad)
		c.res.fail("chain: %d wrong: %s", len(bad), strings.Join(bad, "; "))
	}
}

// chainWrong lists what is wrong with one chain start: its client's
// answers, and got, the chains of its key.
func (c *trialCheck) chainWrong(ctx context.Context, o *chainOutcome, got []chain) []string {
	key := o.plan.key
	bad := chainAnswersWrong(o)
	switch {
	case len(got) > 1:
		return append(bad, fmt.Sprintf("%s: %d chains", key, len(got)))
	case len(got) == 0 && o.start.acked():
		return append(bad, key+": acknowledged, no execution")
	case len(got) == 0:
		return bad
	}
	ch := got[0]
	switch {
	case ch.runs[0].id != o.first:
		return append(bad, fmt.Sprintf("%s: the start answered %s, its first run is %s", key, o.first, ch.runs[0].id))
	case o.stopped != "":
		return append(bad, fmt.Sprintf("%s: its signals stopped: %s", key, o.stopped))
	}
	if wrong := ch.wrong(c.cfg.bound); wrong != "" {
		return append(bad, key+": "+wrong)
	}
	if len(bad) > 0 {
		return bad
	}
	// A key dedupes across the chain, after its last run closed too.
	a := c.st.signalRetrying(ctx, 0, o.first, "v", chainKey(1), "1", time.Now().Add(30*time.Second), func(signalAnswer) {})
	// A late outcome (202 accepted, no signal_delivered) says nothing
	// either way.
	if a.status != http.StatusAccepted || (a.delivered != nil && *a.delivered) {
		return append(bad, fmt.Sprintf("%s: a late resend of %s to its first run: %s", key, chainKey(1), a))
	}
	return nil
}

// dumpChain describes a chain that went wrong for the trial's
// diagnostics: what its client heard, its runs and their histories.
func (c *trialCheck) dumpChain(ctx context.Context, o *chainOutcome, chains []chain) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n--- chain %s (first run %s) ---\nstart answers:\n", o.plan.key, o.first)
	o.start.mu.Lock()
	for _, a := range o.start.answers {
		fmt.Fprintf(&b, "  %s\n", a)
	}
	o.start.mu.Unlock()
	for _, s := range o.sends {
		kind := "signal"
		if s.update {
			kind = "update"
		}
		fmt.Fprintf(&b, "%s %s (%d):\n", kind, s.key, s.value)
		for _, a := range s.answers {
			fmt.Fprintf(&b, "  %s\n", a)
		}
	}
	if o.stopped != "" {
		fmt.Fprintf(&b, "sends stopped: %s\n", o.stopped)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, ch := range chains {
		for k, r := range ch.runs {
			fmt.Fprintf(&b, "run %d %s: %s, workflow_id %s, chain %q, from %q, as %q, input %s, result %s; history:\n%s", k+1, r.id, r.status,
				r.workflowID, r.chainID, r.from, r.as, r.input, r.result, c.st.jsonRows(dctx, `
				SELECT format('  %s %s %s %s', seq, type, to_char(at, 'HH24:MI:SS.MS'), attrs::text) FROM history_events
				WHERE execution_id = $1 ORDER BY seq`, r.id))
		}
	}
	return b.String()
}

// carried counts the signals that moved from a run to the next: the
// keys both histories hold.
func (ch chain) carried() int {
	n := 0
	for k := 1; k < len(ch.runs); k++ {
		for _, key := range ch.runs[k].keys {
			if slices.Contains(ch.runs[k-1].keys, key) {
				n++
			}
		}
	}
	return n
}

// chainAnswersWrong lists what o's signal answers got wrong: a key
// answered signal_delivered true twice (delivered twice), or a 5xx other
// than 503 with Retry-After.
func chainAnswersWrong(o *chainOutcome) []string {
	var bad []string
	for _, s := range o.sends {
		delivered, answered := 0, 0
		for _, a := range s.answers {
			if a.delivered != nil && *a.delivered {
				delivered++
			}
			if s.update && a.acks(true) && !a.deduplicated {
				answered++
			}
			if a.status >= 500 && (a.status != http.StatusServiceUnavailable || a.retryAfter == "") {
				bad = append(bad, fmt.Sprintf("%s: %s answered %s", o.plan.key, s.key, a))
			}
		}
		if delivered > 1 {
			bad = append(bad, fmt.Sprintf("%s: %s answered signal_delivered true %d times", o.plan.key, s.key, delivered))
		}
		if answered > 1 {
			bad = append(bad, fmt.Sprintf("%s: update %s answered completed, not deduplicated, %d times", o.plan.key, s.key, answered))
		}
	}
	return bad
}

// wrong says what is wrong with a chain whose client had every value
// acknowledged, "" if nothing: its runs, from the first along
// continued_as, must be every run it has, ContinuedAsNew but the last,
// linked both ways under one workflow_id, each with the values so far as
// its input, and the last Completed with every value once, in order.
func (ch chain) wrong(bound time.Duration) string {
	byID := map[string]chainRun{}
	for _, r := range ch.runs {
		byID[r.id] = r
	}
	first := ch.runs[0]
	if first.chainID != "" || first.from != "" {
		return fmt.Sprintf("its first run %s names chain %q, continued from %q", first.id, first.chainID, first.from)
	}
	var walk []chainRun
	for r := first; ; {
		walk = append(walk, r)
		if r.as == "" || len(walk) > len(ch.runs) {
			break
		}
		next, ok := byID[r.as]
		if !ok {
			return fmt.Sprintf("run %d (%s, %s) continued as %s, which is not of its chain", len(walk), r.id, r.status, r.as)
		}
		r = next
	}
	var problems []string
	if len(walk) != len(ch.runs) {
		var ids []string
		for _, r := range ch.runs {
			ids = append(ids, fmt.Sprintf("%s %s (chain %q, from %q, as %q, workflow_id %s)", r.id, r.status, r.chainID, r.from, r.as, r.workflowID))
		}
		problems = append(problems, fmt.Sprintf("%d runs linked from the first, %d in all: %s", len(walk), len(ch.runs), strings.Join(ids, ", ")))
	}
	for k, r := range walk {
		last := k == len(walk)-1
		var in struct {
			Every  int   `json:"every"`
			Values []int `json:"values"`
		}
		switch {
		case r.workflowID != first.workflowID:
			problems = append(problems, fmt.Sprintf("run %d %s: workflow_id %s, the first's %s", k+1, r.id, r.workflowID, first.workflowID))
		case k > 0 && (r.chainID != first.id || r.from != walk[k-1].id):
			problems = append(problems, fmt.Sprintf("run %d %s: chain %q, continued from %q; want %s, %s", k+1, r.id, r.chainID, r.from, first.id, walk[k-1].id))
		case !last && r.status != "ContinuedAsNew":
			problems = append(problems, fmt.Sprintf("run %d %s: %s, continued as %s", k+1, r.id, r.status, r.as))
		case last && r.status != "Completed":
			problems = append(problems, fmt.Sprintf("run %d %s, the last: %s, not Completed within %s", k+1, r.id, r.status, bound))
		case json.Unmarshal([]byte(r.input), &in) != nil || in.Every != *chaosChainEvery || !slices.Equal(in.Values, seq(1, k**chaosChainEvery)):
			problems = append(problems, fmt.Sprintf("run %d %s: input %s, want the values 1..%d", k+1, r.id, r.input, k**chaosChainEvery))
		case len(slices.Compact(slices.Sorted(slices.Values(r.keys)))) != len(r.keys):
			problems = append(problems, fmt.Sprintf("run %d %s: a signal key twice in its history: %v", k+1, r.id, r.keys))
		}
	}
	var updates []string
	for _, r := range walk {
		updates = append(updates, r.updates...)
	}
	if n := len(slices.Compact(slices.Sorted(slices.Values(updates)))); n != len(updates) || n != *chaosChainValues/2 {
		problems = append(problems, fmt.Sprintf("%d updates accepted in the chain's histories, %d distinct, want %d: %v", len(updates), n, *chaosChainValues/2, updates))
	}
	if len(problems) > 0 {
		return strings.Join(problems, "; ")
	}
	if want := *chaosChainValues / *chaosChainEvery + 1; len(walk) != want {
		return fmt.Sprintf("%d runs, want %d", len(walk), want)
	}
	var got []int
	last := walk[len(walk)-1]
	if err := json.Unmarshal([]byte(last.result), &got); err != nil {
		return fmt.Sprintf("last run %s: result %s: %v", last.id, last.result, err)
	}
	if slices.Equal(got, seq(1, *chaosChainValues)) {
		return ""
	}
	count := map[int]int{}
	for _, v := range got {
		count[v]++
	}
	var missing, twice []int
	for v := 1; v <= *chaosChainValues; v++ {
		switch {
		case count[v] == 0:
			missing = append(missing, v)
		case count[v] > 1:
			twice = append(twice, v)
		}
	}
	return fmt.Sprintf("last run %s: result %v, want 1..%d in order (missing %v, more than once %v)", last.id, got, *chaosChainValues, missing, twice)
}

// seq is from..to, empty when to < from.
func seq(from, to int) []int {
	out := []int{}
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

// chains reads the chaos_chain starts whose keys start with prefix and
// their runs.
func (c *trialCheck) chains(ctx context.Context, prefix string) ([]chain, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var runs []chainRun
	err := c.st.queryAll(qctx, `
		WITH firsts AS (SELECT execution_id, workflow_id FROM executions WHERE workflow_name = $1 AND starts_with(idempotency_key, $2))
		SELECT e.execution_id::text, coalesce(e.idempotency_key, ''), e.workflow_id, e.status, coalesce(e.result::text, 'null'),
			coalesce(e.input::text, 'null'), coalesce(e.chain_id::text, ''), coalesce(e.continued_from::text, ''), coalesce(e.continued_as::text, ''),
			(SELECT coalesce(json_agg(coalesce(h.attrs->>'idempotency_key', '') ORDER BY h.seq), '[]')::text FROM history_events h
				WHERE h.execution_id = e.execution_id AND h.type = 'SignalReceived'),
			(SELECT coalesce(json_agg(h.attrs->>'update_id' ORDER BY h.seq), '[]')::text FROM history_events h
				WHERE h.execution_id = e.execution_id AND h.type = 'WorkflowUpdateAccepted')
		FROM executions e
		WHERE e.execution_id IN (SELECT execution_id FROM firsts) OR e.chain_id IN (SELECT execution_id FROM firsts)
			OR (e.workflow_name = $1 AND e.workflow_id IN (SELECT workflow_id FROM firsts))
		ORDER BY e.created_at, e.execution_id`,
		[]any{workflowChain, prefix}, func(rows pgx.Rows) error {
			var r chainRun
			var keys, updates string
			if err := rows.Scan(&r.id, &r.key, &r.workflowID, &r.status, &r.result, &r.input, &r.chainID, &r.from, &r.as, &keys, &updates); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(keys), &r.keys); err != nil {
				return fmt.Errorf("execution %s: signal keys %s: %w", r.id, keys, err)
			}
			if err := json.Unmarshal([]byte(updates), &r.updates); err != nil {
				return fmt.Errorf("execution %s: updates %s: %w", r.id, updates, err)
			}
			runs = append(runs, r)
			return nil
		})
	if err != nil {
		return nil, err
	}
	var out []chain
	for _, r := range runs {
		if r.key == "" {
			continue
		}
		ch := chain{key: r.key, runs: []chainRun{r}}
		for _, o := range runs {
			if o.id != r.id && (o.chainID == r.id || o.workflowID == r.workflowID) {
				ch.runs = append(ch.runs, o)
			}
		}
		out = append(out, ch)
	}
	return out, nil
}

// TestChainWrong checks the chain check itself on chains made up: an
// exact one passes, and a value lost, one taken twice, a broken link and
// a run left out each show, and so do an update accepted twice or not at
// all.
func TestChainWrong(t *testing.T) {
	exact := func() chain {
		ch := chain{key: "k"}
		for k := range *chaosChainValues / *chaosChainEvery + 1 {
			in, _ := json.Marshal(map[string]any{"every": *chaosChainEvery, "values": seq(1, k**chaosChainEvery)})
			r := chainRun{id: fmt.Sprintf("run-%d", k), key: "", workflowID: "wf", status: "ContinuedAsNew", result: "null", input: string(in)}
			for v := k**chaosChainEvery + 1; v <= min((k+1)**chaosChainEvery, *chaosChainValues); v++ {
				if viaUpdate(v) {
					r.updates = append(r.updates, fmt.Sprint("u-", v))
				}
			}
			if k == 0 {
				r.key = "k"
			} else {
				r.chainID, r.from = "run-0", fmt.Sprintf("run-%d", k-1)
				ch.runs[k-1].as = r.id
			}
			ch.runs = append(ch.runs, r)
		}
		last := &ch.runs[len(ch.runs)-1]
		last.status = "Completed"
		res, _ := json.Marshal(seq(1, *chaosChainValues))
		last.result = string(res)
		return ch
	}
	ch := exact()
	ch.runs[1].keys = append(ch.runs[1].keys, "v-7") // carried to run 3
	ch.runs[2].keys = []string{"v-7", "v-8", "v-9"}
	if got := ch.wrong(time.Minute); got != "" || ch.carried() != 1 {
		t.Fatalf("an exact chain: %q, %d carried", got, ch.carried())
	}
	for name, spoil := range map[string]func(*chain){
		"value lost":   func(ch *chain) { ch.runs[len(ch.runs)-1].result = "[1,2,3,4,5,6,7,8,9,10,12]" },
		"value twice":  func(ch *chain) { ch.runs[len(ch.runs)-1].result = "[1,2,3,4,5,6,7,8,9,10,11,11,12]" },
		"out of order": func(ch *chain) { ch.runs[len(ch.runs)-1].result = "[1,2,3,4,5,6,7,8,9,10,12,11]" },
		"link one way": func(ch *chain) { ch.runs[2].from = "run-0" },
		"run left out": func(ch *chain) { ch.runs[1].as = "" },
		"not closed":   func(ch *chain) { ch.runs[len(ch.runs)-1].status = "Running" },
		"carry wrong":  func(ch *chain) { ch.runs[2].input = `{"every":3,"values":[1,2,3,4,5]}` },
		"other id":     func(ch *chain) { ch.runs[3].workflowID = "other" },
		"key twice":    func(ch *chain) { ch.runs[1].keys = []string{"v-4", "v-5", "v-4"} },
		"update twice": func(ch *chain) { ch.runs[2].updates = append(ch.runs[2].updates, ch.runs[1].updates[0]) },
		"update lost":  func(ch *chain) { ch.runs[1].updates = nil },
	} {
		ch := exact()
		spoil(&ch)
		if got := ch.wrong(time.Minute); got == "" {
			t.Errorf("%s: no violation", name)
		} else {
			t.Logf("%s: %s", name, got)
		}
	}
}
