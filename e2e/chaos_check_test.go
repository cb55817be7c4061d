//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/examples/fakepay"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
)

// trialResult is one trial's outcome.
type trialResult struct {
	Kind          string `json:"kind"`
	Trial         int    `json:"trial"`
	Seed          uint64 `json:"seed"`
	Keys          int    `json:"keys"`
	Acked         int    `json:"acknowledged"`
	Unacked       int    `json:"unacknowledged"`
	Executions    int    `json:"executions"`
	Lost          int    `json:"lost"`
	DupExecutions int    `json:"duplicated_executions"`
	DupEffects    int    `json:"duplicated_effects"`
	Stuck         int    `json:"stuck"`
	Other         int    `json:"other_violations"`
	Converged     bool   `json:"converged"`
	// PoisonRefused and PoisonSetAside count the trial's poison sends
	// refused by ingest and set aside by a scheduler.
	PoisonRefused  int `json:"poison_refused"`
	PoisonSetAside int `json:"poison_set_aside"`
	// DeferredAcked counts the trial's deferred starts (attempts) that
	// were acknowledged.
	DeferredAcked int `json:"deferred_acknowledged"`
	// FanoutCompleted counts the trial's fanout starts whose execution
	// completed as it must (see fanoutInvariants).
	FanoutCompleted int `json:"fanout_completed"`
	// FlakyRecovered counts the trial's chaos_flaky starts whose
	// execution failed its task, then completed (see flakyInvariants).
	FlakyRecovered int `json:"flaky_recovered"`
	// ChainsExact counts the trial's chaos_chain starts whose chain came
	// out exact (see chainInvariants), ChainRuns their runs,
	// ChainCarried the signals that moved from a run to the next, and
	// ChainResent the chains' signals and updates sent more than once;
	// ChainUpdates the updates those exact chains were answered.
	ChainsExact  int `json:"chains_exact"`
	ChainRuns    int `json:"chain_runs"`
	ChainCarried int `json:"chain_signals_carried"`
	ChainResent  int `json:"chain_signals_resent"`
	ChainUpdates int `json:"chain_updates"`
	// SagasCompleted counts the trial's chaos_saga starts never
	// cancelled that completed exactly, SagasCancelled those cancelled
	// that closed Cancelled with their compensations exact, and
	// SagasCompletedAnyway those cancelled too late, Completed (see
	// sagaInvariants); SagaCompensations the compensations they ran,
	// SagaGivenUp the activities their code gave up, SagaCancelRequests
	// the cancel requests sent, retries included. SagaUncompensated
	// lists the steps given up whose effect happened all the same.
	SagasCompleted       int      `json:"sagas_completed"`
	SagasCancelled       int      `json:"sagas_cancelled"`
	SagasCompletedAnyway int      `json:"sagas_completed_anyway"`
	SagaCompensations    int      `json:"saga_compensations"`
	SagaGivenUp          int      `json:"saga_activities_given_up"`
	SagaCancelRequests   int      `json:"saga_cancel_requests"`
	SagaUncompensated    []string `json:"saga_uncompensated,omitempty"`
	// ResetsExact counts the trial's chaos_reset starts whose reset was
	// answered and came out exact (see resetInvariants), ResetRequests
	// the reset requests sent, retries and doubles included.
	ResetsExact   int `json:"resets_exact"`
	ResetRequests int `json:"reset_requests"`
	// BatchDone counts the executions the trial's batch signalled, each
	// exactly once (see batchInvariants), BatchRequests the batch
	// requests sent, retries and doubles included.
	BatchDone     int `json:"batch_done"`
	BatchRequests int `json:"batch_requests"`
	// FamiliesExact counts the trial's chaos_family starts that came out
	// exact (see familyInvariants), FamiliesContinued those of them that
	// continued as new, FamiliesHit those a fault fell on while they
	// ran; FamilyLongest is the longest one of them took from its first
	// start request until its last run closed; FamilyChildren counts
	// their children, FamilyWaiters their waiters that ended as their
	// parent-close policy says, and FamilyAbandonedTerminated the
	// abandoned ones the check terminated.
	FamiliesExact             int           `json:"families_exact"`
	FamiliesContinued         int           `json:"families_continued"`
	FamiliesHit               int           `json:"families_hit"`
	FamilyLongest             time.Duration `json:"family_longest_ns"`
	FamilyChildren            int           `json:"family_children"`
	FamilyWaiters             int           `json:"family_waiters"`
	FamilyAbandonedTerminated int           `json:"family_abandoned_terminated"`
	// Convergence is the longest any execution took to complete after the
	// later of the last restart and its key's first send: how long after
	// the fault the stack needed to finish each piece of work. Settled is
	// the time from the last restart until the check saw every execution
	// Completed, which the load's own length bounds from below.
	Convergence time.Duration `json:"convergence_ns"`
	Settled     time.Duration `json:"settled_ns"`
	// ReadyAfter is how long after every command was applied every
	// process's /readyz said ready (see readiness).
	ReadyAfter time.Duration `json:"ready_after_ns"`
	LoadTook   time.Duration `json:"load_took_ns"`
	Faults     []faultRecord `json:"faults"`
	Crashes    []string      `json:"crashes,omitempty"`
	Violations []string      `json:"violations,omitempty"`
	// Slowest is the history of the execution that took longest, when it
	// took longer than -chaos.explain.
	Slowest     string `json:"slowest,omitempty"`
	diagnostics string
}

func (r *trialResult) fail(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

func (r *trialResult) failed() bool { return len(r.Violations) > 0 }

func (r *trialResult) line() string {
	var faults []string
	for _, f := range r.Faults {
		faults = append(faults, f.String())
	}
	s := fmt.Sprintf("%s trial %d seed %d: %d keys, %d acknowledged, %d executions; faults: %s; ",
		r.Kind, r.Trial, r.Seed, r.Keys, r.Acked, r.Executions, strings.Join(faults, "; "))
	if r.Converged {
		s += fmt.Sprintf("converged: every execution closed within %s of the later of the last restart and its first send; all Completed %s after the last restart",
			r.Convergence.Round(time.Millisecond), r.Settled.Round(time.Millisecond))
	} else {
		s += "did not converge"
	}
	if r.Converged && !r.failed() {
		s += fmt.Sprintf("; every /readyz ready %s later", r.ReadyAfter.Round(time.Millisecond))
	}
	if r.FanoutCompleted > 0 {
		s += fmt.Sprintf("; %d fanout executions right", r.FanoutCompleted)
	}
	if r.FlakyRecovered > 0 {
		s += fmt.Sprintf("; %d failing tasks recovered", r.FlakyRecovered)
	}
	if r.ChainsExact > 0 {
		s += fmt.Sprintf("; %d continue-as-new chains exact (%d runs, %d signals carried to a next run, %d updates answered exactly once, %d sends resent)",
			r.ChainsExact, r.ChainRuns, r.ChainCarried, r.ChainUpdates, r.ChainResent)
	}
	if n := r.SagasCompleted + r.SagasCancelled + r.SagasCompletedAnyway; n > 0 {
		s += fmt.Sprintf("; %d sagas exact (%d never cancelled completed, %d cancelled with %d compensations, %d completed before their cancel; %d activities given up, %d cancel requests)",
			n, r.SagasCompleted, r.SagasCancelled, r.SagaCompensations, r.SagasCompletedAnyway, r.SagaGivenUp, r.SagaCancelRequests)
	}
	if len(r.SagaUncompensated) > 0 {
		s += "; saga steps given up whose effect happened: " + strings.Join(r.SagaUncompensated, ", ")
	}
	if r.ResetsExact > 0 {
		s += fmt.Sprintf("; %d resets exact, each step's effect once (%d reset requests)", r.ResetsExact, r.ResetRequests)
	}
	if r.BatchDone > 0 {
		s += fmt.Sprintf("; a batch signalled %d executions once each (%d batch requests)", r.BatchDone, r.BatchRequests)
	}
	if r.FamiliesExact > 0 {
		s += fmt.Sprintf("; %d child-workflow families exact (%d continued as new, %d hit by a fault while they ran, the longest took %s; %d children once each, %d waiters closed by their parent's policy, %d abandoned ones terminated by the check)",
			r.FamiliesExact, r.FamiliesContinued, r.FamiliesHit, r.FamilyLongest.Round(time.Millisecond), r.FamilyChildren, r.FamilyWaiters, r.FamilyAbandonedTerminated)
	}
	if r.DeferredAcked > 0 {
		s += fmt.Sprintf("; %d deferred starts acknowledged", r.DeferredAcked)
	}
	if r.PoisonRefused+r.PoisonSetAside > 0 {
		s += fmt.Sprintf("; poison: %d refused by ingest, %d set aside", r.PoisonRefused, r.PoisonSetAside)
	}
	if len(r.Crashes) > 0 {
		s += "; exits no fault caused: " + strings.Join(r.Crashes, "; ")
	}
	if r.failed() {
		s += "; FAILED: " + strings.Join(r.Violations, "; ")
	}
	return s
}

// execRow is an execution of one of the trial's keys.
type execRow struct {
	id, key, status string
	chargeID        string // result.charge_id
	amount          int64
	customer        string
	updated         time.Time
	closed          *time.Time
	priority        int
}

// trialCheck checks one trial's invariants, scoped to its keys.
type trialCheck struct {
	st          *stack
	cfg         trialConfig
	prefix      string
	lastRestart time.Time
	keys        []*keyOutcome
	res         *trialResult

	rows    []execRow
	lost    []string // keys
	stuck   []execRow
	suspect []string // keys whose answers or effects are wrong
	// chainDumps describe the chaos_chain starts that went wrong,
	// sagaDumps the chaos_saga ones, familyDumps the chaos_family ones.
	chainDumps  []string
	sagaDumps   []string
	familyDumps []string
}

func (c *trialCheck) executions(ctx context.Context) ([]execRow, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []execRow
	err := c.st.queryAll(qctx, `
		SELECT execution_id::text, idempotency_key, status, coalesce(result->>'charge_id', ''),
		       coalesce((input->>'amount_cents')::bigint, 0), coalesce(input->>'customer_id', ''), updated_at, closed_at, priority
		FROM executions WHERE workflow_name = 'charge' AND starts_with(idempotency_key, $1)
		ORDER BY idempotency_key, created_at`, []any{c.prefix}, func(rows pgx.Rows) error {
		var e execRow
		if err := rows.Scan(&e.id, &e.key, &e.status, &e.chargeID, &e.amount, &e.customer, &e.updated, &e.closed, &e.priority); err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the trial's executions: %w", err)
	}
	// Across the stores, in the order one store's query gives.
	slices.SortStableFunc(out, func(a, b execRow) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// settled says whether every acknowledged key has an execution and every
// execution is Completed.
func (c *trialCheck) settled(rows []execRow) bool {
	have := map[string]bool{}
	for _, e := range rows {
		if e.status != "Completed" {
			return false
		}
		have[e.key] = true
	}
	for _, k := range c.keys {
		if k.acked() && !have[k.plan.key] {
			return false
		}
	}
	return true
}

// converge waits until the trial settles or its bound passes: bound after
// the later of the last restart and the end of the load.
func (c *trialCheck) converge(ctx context.Context, lastRestart, loadEnd time.Time) {
	from := lastRestart
	if from.IsZero() {
		from = loadEnd
	}
	deadline := loadEnd
	if lastRestart.After(deadline) {
		deadline = lastRestart
	}
	deadline = deadline.Add(c.cfg.bound)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	_ = pollUntil(dctx, 200*time.Millisecond, func() bool {
		rows, err := c.executions(dctx)
		if err != nil {
			return false
		}
		if c.settled(rows) {
			c.res.Converged, c.res.Settled = true, time.Since(from)
			return true
		}
		return false
	})
}

// invariants checks the settled (or timed out) trial and records each
// violation on the result.
func (c *trialCheck) invariants(ctx context.Context) {
	res := c.res
	var rows []execRow
	err := retryFor(ctx, 30*time.Second, func() error {
		var err error
		rows, err = c.executions(ctx)
		return err
	})
	if err != nil {
		res.fail("harness: %v", err)
		return
	}
	c.rows = rows
	if n := len(c.st.dbs); n > 1 && len(rows) >= 20 {
		// Spread over the stores, as placement does: a store with none
		// of 20 or more executions (odds below one in a million with
		// two) means the stores are not in use.
		for i := range n {
			count, err := c.st.dbCount(ctx, i, `SELECT count(*) FROM executions WHERE workflow_name = 'charge' AND starts_with(idempotency_key, $1)`, c.prefix)
			if err == nil && count == 0 {
				res.Other++
				res.fail("store %d holds none of the trial's %d executions", i, len(rows))
			}
		}
	}
	byKey := map[string][]execRow{}
	for _, e := range rows {
		byKey[e.key] = append(byKey[e.key], e)
	}
	res.Executions = len(rows)

	// Acknowledged starts have an execution; each key has at most one.
	var dupKeys, refused, wrongAnswer, unavailable, wrongPriority []string
	for _, k := range c.keys {
		execs := byKey[k.plan.key]
		for _, e := range execs {
			if e.priority != k.plan.priority {
				wrongPriority = append(wrongPriority, fmt.Sprintf("%s at priority %d, started at %d", k.plan.key, e.priority, k.plan.priority))
			}
		}
		if k.acked() {
			res.Acked++
			if len(execs) == 0 {
				c.lost = append(c.lost, k.plan.key)
			}
		} else {
			res.Unacked++
		}
		if len(execs) > 1 {
			dupKeys = append(dupKeys, k.plan.key)
			res.DupExecutions += len(execs) - 1
		}
		for _, a := range k.answers {
			switch {
			case !a.ok() && !a.retryable():
				refused = append(refused, fmt.Sprintf("%s (%d %s)", k.plan.key, a.status, a.code))
			// A fault is answered 503 with Retry-After, or with no answer
			// from a process that died; never 500.
			case a.status >= 500 && (a.status != http.StatusServiceUnavailable || a.retryAfter == ""):
				unavailable = append(unavailable, fmt.Sprintf("%s (%d %s, Retry-After %q)", k.plan.key, a.status, a.code, a.retryAfter))
			case a.ok() && a.executionID != "" && len(execs) > 0 && !slices.ContainsFunc(execs, func(e execRow) bool { return e.id == a.executionID }):
				wrongAnswer = append(wrongAnswer, fmt.Sprintf("%s answered %s", k.plan.key, a.executionID))
			}
		}
	}
	res.Lost = len(c.lost)
	if res.Lost > 0 {
		res.fail("lost %d acknowledged start(s): %s", res.Lost, sample(c.lost))
	}
	if len(dupKeys) > 0 {
		res.fail("%d key(s) with more than one execution: %s", len(dupKeys), sample(dupKeys))
		c.suspect = append(c.suspect, dupKeys...)
	}
	if len(wrongPriority) > 0 {
		res.Other += len(wrongPriority)
		res.fail("%d execution(s) not at their start's priority: %s", len(wrongPriority), sample(wrongPriority))
	}
	if len(refused) > 0 {
		res.Other += len(refused)
		res.fail("%d start(s) refused: %s", len(refused), sample(refused))
	}
	if len(unavailable) > 0 {
		res.Other += len(unavailable)
		res.fail("%d answer(s) were a 5xx other than 503 with Retry-After: %s", len(unavailable), sample(unavailable))
	}
	if len(wrongAnswer) > 0 {
		res.Other += len(wrongAnswer)
		res.fail("%d answer(s) named an execution that is not the key's: %s", len(wrongAnswer), sample(wrongAnswer))
	}

	if res.Converged {
		var slowest string
		res.Convergence, slowest = c.convergence(c.lastRestart)
		if *chaosExplain > 0 && res.Convergence > *chaosExplain {
			res.Slowest = fmt.Sprintf("execution %s, its history (ms after the last restart):\n  ", slowest) + c.st.jsonRows(ctx, `
				SELECT format('%s %s %s', round(extract(epoch FROM at - $2::timestamptz) * 1000), type, attrs::text)
				FROM history_events WHERE execution_id = $1 ORDER BY seq`, slowest, c.lastRestart)
		}
	}

	// Every execution Completed, with one WorkflowStarted and one
	// WorkflowCompleted.
	var ids []string
	for _, e := range rows {
		ids = append(ids, e.id)
		if e.status != "Completed" {
			c.stuck = append(c.stuck, e)
		}
	}
	res.Stuck = len(c.stuck)
	if res.Stuck > 0 {
		var what []string
		for _, e := range c.stuck {
			what = append(what, fmt.Sprintf("%s %s (%s)", e.key, e.id, e.status))
		}
		res.fail("%d execution(s) not Completed within %s: %s", res.Stuck, c.cfg.bound, sample(what))
	}
	type counts struct{ started, completed int }
	history := map[string]counts{}
	err = retryFor(ctx, 30*time.Second, func() error {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		clear(history)
		err := c.st.queryAll(qctx, `
			SELECT execution_id::text, count(*) FILTER (WHERE type = 'WorkflowStarted'), count(*) FILTER (WHERE type = 'WorkflowCompleted')
			FROM history_events WHERE execution_id = ANY($1::uuid[]) GROUP BY 1`, []any{ids}, func(rs pgx.Rows) error {
			var id string
			var n counts
			if err := rs.Scan(&id, &n.started, &n.completed); err != nil {
				return err
			}
			history[id] = n
			return nil
		})
		if err != nil {
			return fmt.Errorf("count history events: %w", err)
		}
		return nil
	})
	if err != nil {
		res.fail("harness: %v", err)
		return
	}
	var badHistory []string
	for _, e := range rows {
		n := history[e.id]
		switch {
		case n.started > 1 || n.completed > 1:
			res.DupExecutions++
		case n.started == 1 && (n.completed == 1 || e.status != "Completed"):
			continue
		default:
			res.Other++
		}
		badHistory = append(badHistory, fmt.Sprintf("%s: %d WorkflowStarted, %d WorkflowCompleted", e.id, n.started, n.completed))
		c.suspect = append(c.suspect, e.key)
	}
	if len(badHistory) > 0 {
		res.fail("%d execution(s) without exactly one WorkflowStarted and one WorkflowCompleted: %s", len(badHistory), sample(badHistory))
	}

	// One charge per execution, the one its result names, for its input.
	charges := c.st.charges.byCustomer(customerOf(c.prefix))
	var dupEffects, wrongEffects []string
	for key, execs := range byKey {
		got := charges[customerOf(key)]
		if len(got) > 1 {
			res.DupEffects += len(got) - 1
			var ids []string
			for _, ch := range got {
				ids = append(ids, ch.ID)
			}
			dupEffects = append(dupEffects, fmt.Sprintf("%s charged %d times (%s)", key, len(got), strings.Join(ids, ", ")))
			c.suspect = append(c.suspect, key)
		}
		for _, e := range execs {
			if e.status != "Completed" {
				continue
			}
			switch {
			case len(got) == 0:
				wrongEffects = append(wrongEffects, fmt.Sprintf("%s completed with charge %q the provider never made", e.id, e.chargeID))
			case !slices.ContainsFunc(got, func(ch fakepay.Charge) bool { return ch.ID == e.chargeID }):
				wrongEffects = append(wrongEffects, fmt.Sprintf("%s completed with charge %q, the provider made %s", e.id, e.chargeID, got[0].ID))
			case got[0].AmountCents != e.amount || got[0].CustomerID != e.customer:
				wrongEffects = append(wrongEffects, fmt.Sprintf("%s charged %d to %s for input %d to %s", e.id, got[0].AmountCents, got[0].CustomerID, e.amount, e.customer))
			default:
				continue
			}
			c.suspect = append(c.suspect, key)
		}
	}
	for customer, got := range charges {
		if key := strings.TrimPrefix(customer, "cus_"); len(byKey[key]) == 0 {
			res.DupEffects += len(got)
			dupEffects = append(dupEffects, fmt.Sprintf("%s charged %d time(s) without an execution", key, len(got)))
			c.suspect = append(c.suspect, key)
		}
	}
	sort.Strings(dupEffects)
	if len(dupEffects) > 0 {
		res.fail("%d duplicated effect(s): %s", res.DupEffects, sample(dupEffects))
	}
	if len(wrongEffects) > 0 {
		res.Other += len(wrongEffects)
		res.fail("%d execution(s) whose result and charge disagree: %s", len(wrongEffects), sample(wrongEffects))
	}
	if res.Stuck > 0 || res.failed() {
		return // the API checks below assume a settled trial
	}

	// Through the API: each execution reads as PostgreSQL has it, and a
	// late retry of each key answers its execution.
	var apiWrong []string
	for i, e := range rows {
		ingest := i % len(c.st.baseURLs)
		view, err := c.st.readExecution(ctx, ingest, e.id)
		switch {
		case err != nil:
			apiWrong = append(apiWrong, fmt.Sprintf("GET %s on ingest-%d: %v", e.id, ingest, err))
		case view.Status != e.status || view.Result.ChargeID != e.chargeID:
			apiWrong = append(apiWrong, fmt.Sprintf("GET %s on ingest-%d: %s %q, PostgreSQL has %s %q", e.id, ingest, view.Status, view.Result.ChargeID, e.status, e.chargeID))
		default:
			continue
		}
		c.suspect = append(c.suspect, e.key)
	}
	for i, k := range c.keys {
		execs := byKey[k.plan.key]
		if len(execs) != 1 {
			continue
		}
		a := c.st.sendRetrying(ctx, i%len(c.st.baseURLs), k.plan.key, k.plan.body(), time.Now().Add(30*time.Second), func(answer) {})
		if a.status != http.StatusOK || a.executionID != execs[0].id || !a.deduplicated {
			apiWrong = append(apiWrong, fmt.Sprintf("late retry of %s: %s", k.plan.key, a))
			c.suspect = append(c.suspect, k.plan.key)
		}
	}
	if len(apiWrong) > 0 {
		res.Other += len(apiWrong)
		res.fail("%d API answer(s) disagree with PostgreSQL: %s", len(apiWrong), sample(apiWrong))
	}
}

// convergence is the longest any execution took to close after the later
// of lastRestart and its key's first send, and that execution.
func (c *trialCheck) convergence(lastRestart time.Time) (time.Duration, string) {
	firstSent := map[string]time.Time{}
	for _, k := range c.keys {
		for _, a := range k.answers {
			if t, ok := firstSent[k.plan.key]; !ok || a.at.Before(t) {
				firstSent[k.plan.key] = a.at
			}
		}
	}
	var longest time.Duration
	var slowest string
	for _, e := range c.rows {
		if e.closed == nil {
			continue
		}
		from := lastRestart
		if t := firstSent[e.key]; t.After(from) {
			from = t
		}
		if took := e.closed.Sub(from); took > longest || slowest == "" {
			longest, slowest = max(took, longest), e.id
		}
	}
	return longest, slowest
}

// executionView is what GET /api/harvest/executions/{id} answers.
type executionView struct {
	Status string `json:"status"`
	Result struct {
		ChargeID string `json:"charge_id"`
	} `json:"result"`
}

func (s *stack) readExecution(ctx context.Context, ingest int, id string) (executionView, error) {
	var v executionView
	err := retryFor(ctx, 30*time.Second, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.baseURLs[ingest]+"/api/harvest/executions/"+id, nil)
		if err != nil {
			return err
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, data)
		}
		return json.Unmarshal(data, &v)
	})
	return v, err
}

// retryFor calls f until it succeeds or within passes.
func retryFor(ctx context.Context, within time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var err error
	if perr := pollUntil(ctx, 250*time.Millisecond, func() bool { err = f(); return err == nil }); perr != nil {
		return errors.Join(err, perr)
	}
	return nil
}

// sample lists up to 5 items.
func sample(items []string) string {
	if len(items) <= 5 {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:5], ", ") + fmt.Sprintf(", and %d more", len(items)-5)
}

// diagnose gathers what explains a failed trial: the faults, the lost
// keys with what their clients heard and where their start went, the stuck
// executions with their history and pending work, the shards' state in
// PostgreSQL and JetStream, and the processes' warnings and last lines
// since the trial began.
func (c *trialCheck) diagnose(ctx context.Context, marks map[string]logMark) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	res := c.res
	w("=== diagnostics of %s trial %d (seed %d), load took %s ===\n", res.Kind, res.Trial, res.Seed, res.LoadTook.Round(time.Millisecond))
	for _, f := range res.Faults {
		w("fault: %s\n", f)
	}
	for _, cr := range res.Crashes {
		w("exit no fault caused: %s\n", cr)
	}
	if c.st == nil {
		return b.String()
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	byKey := map[string]*keyOutcome{}
	for _, k := range c.keys {
		byKey[k.plan.key] = k
	}
	var needles []string // what to look for in the streams and the outbox

	for i, key := range c.lost {
		if i == 10 {
			w("... and %d more lost keys\n", len(c.lost)-10)
			break
		}
		commandID := dedup.StartCommandID("charge", key)
		shard := placement.StartShard(chaosShards, "charge", "", key)
		w("\n--- lost key %s (command_id %s, shard %d) ---\n", key, commandID, shard)
		c.writeAnswers(&b, byKey[key])
		w("shard %d now: %s\n", shard, c.st.jsonRows(dctx, `SELECT format('owner %s epoch %s, applied_seq %s', l.owner, l.epoch, o.applied_seq) FROM shard_leases l JOIN shard_offsets o USING (shard) WHERE shard = $1`, shard))
		w("start claim: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM start_claims x WHERE workflow_name = 'charge' AND idempotency_key = $1`, key))
		w("command outcome: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM command_outcomes x WHERE command_id = $1`, commandID))
		c.writeJourney(&b, key, commandID)
		needles = append(needles, key)
	}
	for i, e := range c.stuck {
		if i == 10 {
			w("... and %d more stuck executions\n", len(c.stuck)-10)
			break
		}
		w("\n--- stuck execution %s (key %s, %s, last updated %s) ---\n", e.id, e.key, e.status, e.updated.Format("15:04:05.000"))
		w("execution: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM (SELECT execution_id, shard, status, last_seq, wft_id, wft_outstanding, wft_dirty, result, error, created_at, updated_at FROM executions WHERE execution_id = $1) x`, e.id))
		w("history:\n%s", c.st.jsonRows(dctx, `SELECT format('  %s %s %s %s', seq, type, to_char(at, 'HH24:MI:SS.MS'), attrs::text) FROM history_events WHERE execution_id = $1 ORDER BY seq`, e.id))
		w("activities: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM activities x WHERE execution_id = $1`, e.id))
		w("timers: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM timers x WHERE execution_id = $1`, e.id))
		w("outbox rows naming it: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM (SELECT id, shard, subject, msg_id, created_at FROM outbox WHERE position(convert_to($1, 'UTF8') in payload) > 0) x`, e.id))
		c.writeAnswers(&b, byKey[e.key])
		c.writeJourney(&b, e.id)
		needles = append(needles, e.id)
	}
	suspects := slices.Compact(slices.Sorted(slices.Values(c.suspect)))
	for i, key := range suspects {
		if i == 10 {
			w("... and %d more keys with wrong answers or effects\n", len(suspects)-10)
			break
		}
		w("\n--- key %s ---\n", key)
		w("executions: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM (SELECT execution_id, shard, status, result, created_at FROM executions WHERE workflow_name = 'charge' AND idempotency_key = $1) x`, key))
		c.writeAnswers(&b, byKey[key])
	}

	for _, d := range c.chainDumps {
		w("%s", d)
	}
	for _, d := range c.sagaDumps {
		w("%s", d)
	}
	for _, d := range c.familyDumps {
		w("%s", d)
	}

	w("\n--- shards (PostgreSQL) ---\n")
	w("%s", c.st.jsonRows(dctx, `SELECT format('  shard %s: owner %s epoch %s expires %s, applied_seq %s, stream_created %s', l.shard, l.owner, l.epoch, to_char(l.expires_at, 'HH24:MI:SS.MS'), o.applied_seq, o.stream_created) FROM shard_leases l JOIN shard_offsets o USING (shard) ORDER BY shard`))
	w("schedulers: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM schedulers x`))
	w("outbox: %s\n", c.st.jsonRows(dctx, `SELECT format('%s rows, oldest %s', count(*), min(created_at)) FROM outbox`))
	w("\n--- JetStream ---\n")
	c.st.writeStreams(dctx, &b, needles)

	w("\n--- logs since the trial began (! warnings and errors, | last lines; %s) ---\n", keepLogsHint())
	for _, m := range c.st.all() {
		w("%s:\n%s", m.name(), m.logs().excerpt(marks[m.name()], interestingLine, 15, 8))
	}
	return b.String()
}

func (c *trialCheck) writeAnswers(b *strings.Builder, k *keyOutcome) {
	if k == nil {
		fmt.Fprintf(b, "answers: none (not a key of the load)\n")
		return
	}
	fmt.Fprintf(b, "sends planned: %v; answers:\n", k.plan.sends)
	for _, a := range k.answers {
		fmt.Fprintf(b, "  %s\n", a)
	}
}

// writeJourney writes what the tap saw of the messages naming needles.
func (c *trialCheck) writeJourney(b *strings.Builder, needles ...string) {
	events := c.st.tap.journey(needles)
	fmt.Fprintf(b, "its messages on NATS (seen by a tap on the command and task subjects, PubAcks, deliveries and acks; the tap misses what passes while it reconnects):\n")
	if len(events) == 0 {
		fmt.Fprintf(b, "  none\n")
	}
	const most = 60
	if len(events) > most {
		fmt.Fprintf(b, "  [%d earlier events left out]\n", len(events)-most)
		events = events[len(events)-most:]
	}
	for _, e := range events {
		fmt.Fprintf(b, "  %s\n", e)
	}
}

// interestingLine picks warnings and errors from any member's output.
func interestingLine(line string) bool {
	if strings.Contains(line, "Restored") && strings.Contains(line, "HARVEST_") {
		return true // NATS recovering a stream at start-up
	}
	for _, s := range []string{"level=WARN", "level=ERROR", "[WRN]", "[ERR]", "[FTL]", "FATAL:", "PANIC:", "ERROR:", "panic:"} {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// jsonRows runs a query of one text column and joins its rows, one a line.
func (s *stack) jsonRows(ctx context.Context, sql string, args ...any) string {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out []string
	err := s.queryAll(qctx, sql, args, func(rows pgx.Rows) error {
		var v *string
		if err := rows.Scan(&v); err != nil {
			return err
		}
		if v != nil {
			out = append(out, *v)
		}
		return nil
	})
	if err != nil {
		out = append(out, "(query failed: "+err.Error()+")")
	}
	if len(out) == 0 {
		return "none"
	}
	if strings.HasPrefix(out[0], "  ") {
		return strings.Join(out, "\n") + "\n"
	}
	return strings.Join(out, "\n  ")
}

// writeStreams describes the command and task streams, their consumers,
// and the stored messages that contain any of needles.
func (s *stack) writeStreams(ctx context.Context, b *strings.Builder, needles []string) {
	for _, name := range []string{broker.CommandStream, broker.TaskStream} {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		str, err := s.js.Stream(qctx, name)
		if err != nil {
			fmt.Fprintf(b, "stream %s: %v\n", name, err)
			cancel()
			continue
		}
		info, err := str.Info(qctx)
		if err != nil {
			fmt.Fprintf(b, "stream %s: %v\n", name, err)
			cancel()
			continue
		}
		st := info.State
		fmt.Fprintf(b, "stream %s (created %s): %d messages, seq %d..%d, %d deleted, %d consumers\n",
			name, info.Created.Format("15:04:05.000"), st.Msgs, st.FirstSeq, st.LastSeq, st.NumDeleted, st.Consumers)
		consumers := str.ListConsumers(qctx)
		for ci := range consumers.Info() {
			fmt.Fprintf(b, "  consumer %s filter %q: pending %d, ack pending %d, redelivered %d, waiting %d, delivered stream seq %d, ack floor stream seq %d\n",
				ci.Name, ci.Config.FilterSubject+strings.Join(ci.Config.FilterSubjects, ","), ci.NumPending, ci.NumAckPending, ci.NumRedelivered,
				ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream)
		}
		if err := consumers.Err(); err != nil {
			fmt.Fprintf(b, "  list consumers: %v\n", err)
		}
		cancel()
		if len(needles) == 0 || st.Msgs == 0 {
			continue
		}
		found, scanned := 0, 0
		for seq := st.FirstSeq; seq <= st.LastSeq && scanned < 20000; scanned++ {
			gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
			msg, err := str.GetMsg(gctx, seq, jetstream.WithGetMsgSubject(">"))
			gcancel()
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgNotFound) {
					fmt.Fprintf(b, "  read from seq %d: %v\n", seq, err)
				}
				break
			}
			seq = msg.Sequence + 1
			for _, n := range needles {
				if bytes.Contains(msg.Data, []byte(n)) {
					found++
					fmt.Fprintf(b, "  holds seq %d %s msg_id %s at %s naming %s: %.300s\n", msg.Sequence, msg.Subject,
						msg.Header.Get(jetstream.MsgIDHeader), msg.Time.Format("15:04:05.000"), n, msg.Data)
					break
				}
			}
		}
		fmt.Fprintf(b, "  %d stored message(s) name a lost key or a stuck execution (%d scanned)\n", found, scanned)
	}
}
