//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/examples/fakepay"
)

// The chaos suite's load of schedules: each trial puts -chaos.schedule
// schedules through ingest as it begins, each firing the charge workflow
// every second from the trial's start (half a second on, rounded up to
// the second) over the trial's load window, overlap allow_all, so that the trial's faults
// land while they fire. A fire is decided by the schedule's shard in the
// transaction that advances its cursor, and its start, keyed
// sched:<id>:<nominal time>, goes through the outbox to the workflow's
// shard, which reports back its start and its close: the faults hit
// each step. The PUT is retried as the other loads retry their starts
// (a 503 or a 202 may come while ingests or schedulers are down; a PUT
// is idempotent).
//
// Once the trial has converged, for each schedule, every nominal time of
// its spec after the schedule was created (normally all of them: the PUT
// is sent before the first) has exactly one execution, Completed, whose
// key is sched:<id>:<nominal time> and workflow_id <id>-<nominal time>,
// and which made its charge once; no execution has a key of the schedule
// at any other time. Its ledger (GET …/fires, every page) holds exactly
// one row per such nominal time, trigger spec, outcome started, naming
// that execution and its status Completed, and no other row; the
// schedule has nothing running or buffered and no next fire. The check
// then deletes it.

var chaosSchedules = flag.Int("chaos.schedule", 1, "chaos: schedules per trial, each firing the charge workflow every second over -chaos.load under the trial's faults (0: none)")

const (
	// scheduleEvery is the interval of the trials' schedules.
	scheduleEvery = time.Second
	// scheduleCatchup is their catch-up window: longer than any outage
	// a trial makes, so that no fire is missed for being late.
	scheduleCatchup = 10 * time.Minute
	// scheduleLead is the least time from the PUT to the first nominal
	// time.
	scheduleLead = 500 * time.Millisecond
	// scheduleAmount is what each fire charges.
	scheduleAmount = 100
)

// schedulePlan is one schedule of a trial: its id, the customer its
// fires charge, and the ingest its PUT goes to first.
type schedulePlan struct {
	id, customer string
	ingest       int
}

// planSchedules plans n schedules. It draws from its own generator, so
// that adding this load left the other loads' and the faults' draws of a
// seed as they were.
func planSchedules(seed uint64, kind, prefix string, n int) []schedulePlan {
	rng := rand.New(rand.NewPCG(seed, fnv64(kind+"/schedule")))
	plans := make([]schedulePlan, n)
	for j := range plans {
		id := fmt.Sprintf("%ssched%d", prefix, j)
		plans[j] = schedulePlan{id: id, customer: "sched_" + id, ingest: rng.IntN(2)}
	}
	return plans
}

// body is the schedule's PUT body for the window [startAt, endAt].
func (p schedulePlan) body(startAt, endAt time.Time) string {
	raw, _ := json.Marshal(api.ScheduleRequest{
		Workflow: "charge",
		Input:    json.RawMessage(fmt.Sprintf(`{"amount_cents": %d, "customer_id": %q}`, scheduleAmount, p.customer)),
		Spec:     api.ScheduleSpec{Every: scheduleEvery.String(), StartAt: &startAt, EndAt: &endAt},
		Overlap:  api.OverlapAllowAll, CatchupWindow: scheduleCatchup.String(),
	})
	return string(raw)
}

// scheduleOutcome is what the client of one schedule heard, and the
// window its spec fires in.
type scheduleOutcome struct {
	plan           schedulePlan
	startAt, endAt time.Time
	puts           []answer
}

// nominals are the nominal times of the schedule's spec.
func (o *scheduleOutcome) nominals() []time.Time {
	var out []time.Time
	for t := o.startAt; !t.After(o.endAt); t = t.Add(scheduleEvery) {
		out = append(out, t)
	}
	return out
}

// scheduleFinal says whether an answer to a schedule's request is final:
// not a fault's (no answer, 429, 5xx) and not 202, whose command may
// still be waiting for its shard.
func scheduleFinal(a answer) bool { return !a.retryable() && a.status != http.StatusAccepted }

// runSchedules puts the schedules at once, each firing every second from
// the trial's start (scheduleLead on, rounded up to the second) over
// window, at least three times; a PUT is retried until an answer is
// final or giveUp.
func (s *stack) runSchedules(ctx context.Context, plans []schedulePlan, window time.Duration, giveUp time.Time) []*scheduleOutcome {
	// The first nominal time is at least scheduleLead away, so that the
	// PUT normally lands before it: a schedule's cursor starts at its
	// creation, and it owes no earlier time.
	begin := time.Now().Add(scheduleLead)
	startAt := begin.UTC().Truncate(time.Second)
	if startAt.Before(begin) {
		startAt = startAt.Add(time.Second)
	}
	endAt := startAt.Add(max(window.Truncate(scheduleEvery), 2*scheduleEvery))
	out := make([]*scheduleOutcome, len(plans))
	var wg sync.WaitGroup
	for j, p := range plans {
		o := &scheduleOutcome{plan: p, startAt: startAt, endAt: endAt}
		out[j] = o
		body := p.body(startAt, endAt)
		wg.Go(func() {
			retrying(ctx, p.ingest, len(s.baseURLs), giveUp, func(ingest, attempt int) answer {
				a, _ := s.scheduleCall(ctx, ingest, http.MethodPut, "/api/harvest/schedules/"+p.id, body)
				a.attempt = attempt
				o.puts = append(o.puts, a)
				return a
			}, scheduleFinal)
		})
	}
	wg.Wait()
	return out
}

// scheduleCall makes one request of a schedule route to ingest i; it
// answers the exchange and the body.
func (s *stack) scheduleCall(ctx context.Context, i int, method, path, body string) (answer, []byte) {
	a := answer{ingest: i, at: time.Now()}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.baseURLs[i]+path, rd)
	if err != nil {
		a.err = err.Error()
		return a, nil
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		a.err, a.took = err.Error(), time.Since(a.at)
		return a, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	a.status, a.retryAfter, a.took = resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(a.at)
	if !a.ok() {
		var e api.ErrorResponse
		_ = json.Unmarshal(data, &e)
		a.code, a.err = e.Error, e.Message
		if e.Error == "" {
			a.err = fmt.Sprintf("%.300s", data)
		}
	}
	return a, data
}

// scheduleGet reads path from ingest i into v: false when it answered
// 404.
func (s *stack) scheduleGet(ctx context.Context, i int, path string, v any) (bool, error) {
	a, data := s.scheduleCall(ctx, i%len(s.baseURLs), http.MethodGet, path, "")
	switch a.status {
	case http.StatusOK:
		if err := json.Unmarshal(data, v); err != nil {
			return false, fmt.Errorf("GET %s: %w: %.300s", path, err, data)
		}
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("GET %s: %s", path, a)
}

// scheduleExec is an execution of a schedule as PostgreSQL holds it.
type scheduleExec struct {
	id, key, workflowID, status, chargeID string
	created                               time.Time
}

// scheduleFacts is what the check of one schedule reads.
type scheduleFacts struct {
	// view is the schedule as GET answers it; nil when it answers 404.
	view *api.Schedule
	// fires are its ledger, every page, newest first.
	fires []api.ScheduleFire
	// execs are the executions whose key is of the schedule, or whose
	// workflow_id begins with its id and a dash.
	execs []scheduleExec
	// charges are those of its customer at the provider.
	charges []fakepay.Charge
}

// scheduleFacts reads what one schedule is, through ingest and in every
// store; reads alternate ingests by attempt.
func (c *trialCheck) scheduleFacts(ctx context.Context, p schedulePlan, attempt int) (scheduleFacts, error) {
	qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var f scheduleFacts
	var view api.Schedule
	path := "/api/harvest/schedules/" + p.id
	found, err := c.st.scheduleGet(qctx, attempt, path, &view)
	if err != nil {
		return f, err
	}
	if found {
		f.view = &view
		for cursor, page := "", 0; page == 0 || cursor != ""; page++ {
			var l api.ScheduleFireList
			q := "?limit=100"
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			if ok, err := c.st.scheduleGet(qctx, attempt+page, path+"/fires"+q, &l); err != nil || !ok {
				return f, fmt.Errorf("ledger page %d: found %v: %w", page, ok, err)
			}
			f.fires = append(f.fires, l.Fires...)
			cursor = l.NextCursor
		}
	}
	err = c.st.queryAll(qctx, `
		SELECT execution_id::text, coalesce(idempotency_key, ''), workflow_id, status, coalesce(result->>'charge_id', ''), created_at
		FROM executions WHERE workflow_name = 'charge' AND (starts_with(idempotency_key, $1) OR starts_with(workflow_id, $2))
		ORDER BY created_at`, []any{"sched:" + p.id + ":", p.id + "-"}, func(rows pgx.Rows) error {
		var e scheduleExec
		if err := rows.Scan(&e.id, &e.key, &e.workflowID, &e.status, &e.chargeID, &e.created); err != nil {
			return err
		}
		f.execs = append(f.execs, e)
		return nil
	})
	if err != nil {
		return f, fmt.Errorf("read the schedule's executions: %w", err)
	}
	f.charges = c.st.charges.byCustomer(p.customer)[p.customer]
	return f, nil
}

// scheduleSettled says whether the schedule is done: past its end, its
// fires closed and recorded so, its executions closed; or never
// acknowledged and not there.
func scheduleSettled(o *scheduleOutcome, f scheduleFacts) bool {
	if f.view == nil {
		return !slices.ContainsFunc(o.puts, answer.ok)
	}
	if len(f.view.NextFires)+len(f.view.Running)+len(f.view.Buffered) > 0 {
		return false
	}
	for _, fr := range f.fires {
		if fr.ExecutionStatus == "" && (fr.Outcome == api.FireStarting || fr.Outcome == api.FireStarted) {
			return false
		}
	}
	return !slices.ContainsFunc(f.execs, func(e scheduleExec) bool { return e.status == "Running" })
}

// scheduleVerdict is what the check of one schedule found: what is
// wrong, and what it saw right.
type scheduleVerdict struct {
	wrong []string
	// fired counts the nominal times that fired exactly, before those
	// not fired because the schedule was created after them.
	fired, before int
	// latest is how long after its nominal time the latest fire's
	// execution was created.
	latest time.Duration
	// dupExecutions and dupEffects count executions and charges beyond
	// one per nominal time.
	dupExecutions, dupEffects int
}

// nominalOfKey is the nominal time a fire's key of schedule id names.
func nominalOfKey(id, key string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(key, "sched:"+id+":")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, rest)
	return t.UTC(), err == nil && t.UTC().Format(time.RFC3339) == rest
}

// scheduleWrong checks one schedule: what its client heard (o) and f.
func scheduleWrong(o *scheduleOutcome, f scheduleFacts) scheduleVerdict {
	var v scheduleVerdict
	p := o.plan
	bad := func(format string, args ...any) { v.wrong = append(v.wrong, p.id+": "+fmt.Sprintf(format, args...)) }
	for _, a := range o.puts {
		switch {
		case a.status >= 500 && (a.status != http.StatusServiceUnavailable || a.retryAfter == ""):
			bad("PUT answered %s", a)
		case a.status >= 400 && a.status < 500 && a.status != http.StatusTooManyRequests:
			bad("PUT refused: %s", a)
		}
	}
	if f.view == nil {
		if slices.ContainsFunc(o.puts, answer.ok) {
			bad("acknowledged, yet GET answers 404")
		} else {
			bad("its PUT was never acknowledged (%d attempts)", len(o.puts))
		}
		if len(f.execs)+len(f.fires) > 0 {
			bad("no schedule, yet %d executions and %d ledger rows", len(f.execs), len(f.fires))
		}
		return v
	}
	if len(f.view.Running)+len(f.view.Buffered)+len(f.view.NextFires) > 0 {
		bad("past its end, %d running, %d buffered, next fires %v", len(f.view.Running), len(f.view.Buffered), f.view.NextFires)
	}
	// The nominal times it owes: those after it was created. Its
	// cursor starts at its creation; the PUT is sent before the first
	// nominal time, so only a PUT a fault kept back skips any.
	owed := map[int64]bool{}
	for _, t := range o.nominals() {
		if t.After(f.view.CreatedAt) {
			owed[t.Unix()] = true
		} else {
			v.before++
		}
	}
	execsAt := map[int64][]scheduleExec{}
	for _, e := range f.execs {
		t, ok := nominalOfKey(p.id, e.key)
		switch {
		case !ok:
			bad("execution %s (workflow_id %s) has key %q, none of the schedule's fires'", e.id, e.workflowID, e.key)
		case !owed[t.Unix()]:
			bad("execution %s is of nominal time %s, not one the schedule owes (%s to %s, created %s)", e.id, t.Format(time.RFC3339),
				o.startAt.Format(time.RFC3339), o.endAt.Format(time.RFC3339), f.view.CreatedAt.Format(time.RFC3339Nano))
		default:
			execsAt[t.Unix()] = append(execsAt[t.Unix()], e)
		}
	}
	firesAt := map[int64][]api.ScheduleFire{}
	for _, fr := range f.fires {
		t := fr.NominalTime.UTC()
		if !owed[t.Unix()] || !t.Equal(t.Truncate(time.Second)) {
			bad("ledger row of nominal time %s (%s %s), not one the schedule owes", t.Format(time.RFC3339Nano), fr.Trigger, fr.Outcome)
			continue
		}
		firesAt[t.Unix()] = append(firesAt[t.Unix()], fr)
	}
	charged := map[string]int{}
	for _, ch := range f.charges {
		charged[ch.ID]++
		if ch.AmountCents != scheduleAmount {
			bad("charge %s of %d cents, want %d", ch.ID, ch.AmountCents, scheduleAmount)
		}
	}
	if n := len(f.charges) - len(f.execs); n > 0 {
		v.dupEffects += n
		bad("%d charges for %d executions", len(f.charges), len(f.execs))
	}
	for _, t := range o.nominals() {
		if !owed[t.Unix()] {
			continue
		}
		stamp := t.Format(time.RFC3339)
		key, wfid := "sched:"+p.id+":"+stamp, p.id+"-"+stamp
		es, frs := execsAt[t.Unix()], firesAt[t.Unix()]
		ok := true
		var e scheduleExec
		switch {
		case len(es) != 1:
			v.dupExecutions += max(len(es)-1, 0)
			bad("%s: %d executions", stamp, len(es))
			ok = false
		default:
			e = es[0]
			if e.workflowID != wfid || e.status != "Completed" || e.created.Before(t) {
				bad("%s: execution %s, workflow_id %s, %s, created %s", stamp, e.id, e.workflowID, e.status, e.created.Format(time.RFC3339Nano))
				ok = false
			}
			if e.status == "Completed" && charged[e.chargeID] != 1 {
				bad("%s: execution %s completed with charge %q, charged %d times", stamp, e.id, e.chargeID, charged[e.chargeID])
				ok = false
			}
			v.latest = max(v.latest, e.created.Sub(t))
		}
		switch {
		case len(frs) != 1:
			bad("%s: %d ledger rows: %+v", stamp, len(frs), frs)
			ok = false
		default:
			fr := frs[0]
			if fr.Trigger != api.FireBySpec || fr.Outcome != api.FireStarted || fr.IdempotencyKey != key || fr.WorkflowID != wfid ||
				fr.ExecutionID == "" || fr.ExecutionID != e.id || fr.ExecutionStatus != "Completed" {
				bad("%s: ledger row %+v, its execution %q", stamp, fr, e.id)
				ok = false
			}
		}
		if ok {
			v.fired++
		}
	}
	return v
}

// scheduleInvariants checks the trial's schedules once they settled or
// the bound passed, then deletes them. It returns a line of what they
// did, and a description of those that went wrong for the trial's
// diagnostics.
func (c *trialCheck) scheduleInvariants(ctx context.Context, outcomes []*scheduleOutcome) (summary, dump string) {
	if len(outcomes) == 0 {
		return "", ""
	}
	var bad, dumps []string
	exact, fired, before, during := 0, 0, 0, 0
	var latest time.Duration
	for _, o := range outcomes {
		var f scheduleFacts
		var err error
		attempt := 0
		sctx, cancel := context.WithTimeout(ctx, c.cfg.bound)
		_ = pollUntil(sctx, 500*time.Millisecond, func() bool {
			attempt++
			f, err = c.scheduleFacts(sctx, o.plan, attempt)
			return err == nil && scheduleSettled(o, f)
		})
		cancel()
		if err != nil {
			// The bound passed on a failed read: read once more.
			f, err = c.scheduleFacts(ctx, o.plan, attempt+1)
		}
		var v scheduleVerdict
		if err != nil {
			v.wrong = []string{fmt.Sprintf("%s: read: %v", o.plan.id, err)}
		} else {
			v = scheduleWrong(o, f)
		}
		if f.view != nil {
			if w := c.deleteSchedule(ctx, o.plan); w != "" {
				v.wrong = append(v.wrong, w)
			}
		}
		c.res.DupExecutions += v.dupExecutions
		c.res.DupEffects += v.dupEffects
		if len(v.wrong) > 0 {
			bad = append(bad, v.wrong...)
			dumps = append(dumps, c.dumpSchedule(ctx, o, f))
			continue
		}
		exact++
		fired += v.fired
		before += v.before
		latest = max(latest, v.latest)
		for _, ft := range c.res.Faults {
			signalled := ft.RestartAt.Add(-ft.Downtime - ft.StopTook)
			if signalled.Before(o.endAt.Add(time.Second)) && ft.RestartAt.After(o.startAt) {
				during++
			}
		}
	}
	if len(bad) > 0 {
		c.res.Other += len(bad)
		c.res.fail("schedule: %d wrong: %s", len(bad), sample(bad))
	}
	o := outcomes[0]
	summary = fmt.Sprintf("schedules: %d of %d exact, firing every %s from %s to %s: %d fires, each one execution Completed and charged once and one ledger row started; %d nominal time(s) before a schedule's creation; the latest fire's execution was created %s after its nominal time; %d fault(s) fell while they fired; deleted",
		exact, len(outcomes), scheduleEvery, o.startAt.Format("15:04:05"), o.endAt.Format("15:04:05"), fired, before, latest.Round(time.Millisecond), during)
	return summary, strings.Join(dumps, "")
}

// deleteSchedule deletes the schedule, retrying as a client would, and
// waits until GET answers 404; it returns what went wrong, "" if
// nothing.
func (c *trialCheck) deleteSchedule(ctx context.Context, p schedulePlan) string {
	var answers []string
	path := "/api/harvest/schedules/" + p.id
	// A 404 after an attempt that may have been applied is the delete
	// done.
	final := func(a answer) bool {
		return a.status == http.StatusOK || (a.status == http.StatusNotFound && len(answers) > 1) || scheduleFinal(a)
	}
	last := retrying(ctx, p.ingest, len(c.st.baseURLs), time.Now().Add(30*time.Second), func(ingest, attempt int) answer {
		a, _ := c.st.scheduleCall(ctx, ingest, http.MethodDelete, path, "")
		a.attempt = attempt
		answers = append(answers, a.String())
		return a
	}, final)
	if last.status != http.StatusOK && (last.status != http.StatusNotFound || len(answers) < 2) {
		return fmt.Sprintf("%s: DELETE: %s", p.id, strings.Join(answers, "; "))
	}
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var state string
	attempt := 0
	if err := pollUntil(gctx, 250*time.Millisecond, func() bool {
		attempt++
		var view api.Schedule
		found, err := c.st.scheduleGet(gctx, attempt, path, &view)
		state = fmt.Sprintf("found %v, err %v", found, err)
		return err == nil && !found
	}); err != nil {
		return fmt.Sprintf("%s: deleted (%s), yet GET: %s", p.id, strings.Join(answers, "; "), state)
	}
	return ""
}

// dumpSchedule describes a schedule that went wrong for the trial's
// diagnostics: what its client heard, the schedule, its ledger and its
// executions.
func (c *trialCheck) dumpSchedule(ctx context.Context, o *scheduleOutcome, f scheduleFacts) string {
	var b strings.Builder
	p := o.plan
	fmt.Fprintf(&b, "\n--- schedule %s (every %s from %s to %s, customer %s) ---\nPUT answers:\n", p.id, scheduleEvery,
		o.startAt.Format(time.RFC3339), o.endAt.Format(time.RFC3339), p.customer)
	for _, a := range o.puts {
		fmt.Fprintf(&b, "  %s\n", a)
	}
	view, _ := json.Marshal(f.view)
	fmt.Fprintf(&b, "GET: %s\n", view)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fmt.Fprintf(&b, "row: %s\n", c.st.jsonRows(dctx, `SELECT row_to_json(x)::text FROM schedules x WHERE schedule_id = $1`, p.id))
	fmt.Fprintf(&b, "ledger (%d rows, newest first):\n", len(f.fires))
	for _, fr := range f.fires {
		fmt.Fprintf(&b, "  %s %s %s key %s workflow_id %s execution %s %s %s %s recorded %s\n", fr.NominalTime.Format(time.RFC3339Nano), fr.Trigger,
			fr.Outcome, fr.IdempotencyKey, fr.WorkflowID, fr.ExecutionID, fr.ExecutionStatus, fr.Error, fr.Message, fr.RecordedAt.Format("15:04:05.000"))
	}
	fmt.Fprintf(&b, "executions (%d):\n", len(f.execs))
	for _, e := range f.execs {
		fmt.Fprintf(&b, "  %s key %s workflow_id %s %s charge %q created %s\n", e.id, e.key, e.workflowID, e.status, e.chargeID, e.created.Format("15:04:05.000"))
	}
	fmt.Fprintf(&b, "charges (%d):", len(f.charges))
	for _, ch := range f.charges {
		fmt.Fprintf(&b, " %s", ch.ID)
	}
	b.WriteString("\n")
	return b.String()
}

// TestScheduleWrong checks the schedule check itself on schedules made
// up: an exact one passes, one created late owes only the later times,
// and each way of going wrong shows.
func TestScheduleWrong(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	exact := func() (*scheduleOutcome, scheduleFacts) {
		p := schedulePlan{id: "s", customer: "sched_s"}
		o := &scheduleOutcome{plan: p, startAt: start, endAt: start.Add(3 * time.Second), puts: []answer{{status: http.StatusCreated}}}
		f := scheduleFacts{view: &api.Schedule{ScheduleID: "s", CreatedAt: start.Add(-500 * time.Millisecond)}}
		for i, n := range o.nominals() {
			stamp := n.Format(time.RFC3339)
			id := fmt.Sprintf("e%d", i)
			f.execs = append(f.execs, scheduleExec{id: id, key: "sched:s:" + stamp, workflowID: "s-" + stamp, status: "Completed",
				chargeID: "ch" + id, created: n.Add(20 * time.Millisecond)})
			f.fires = append([]api.ScheduleFire{{NominalTime: n, Trigger: "spec", Outcome: "started", IdempotencyKey: "sched:s:" + stamp,
				WorkflowID: "s-" + stamp, ExecutionID: id, ExecutionStatus: "Completed"}}, f.fires...)
			f.charges = append(f.charges, fakepay.Charge{ID: "ch" + id, AmountCents: scheduleAmount, CustomerID: p.customer})
		}
		return o, f
	}
	o, f := exact()
	if v := scheduleWrong(o, f); len(v.wrong) > 0 || v.fired != 4 || v.before != 0 || v.latest != 20*time.Millisecond {
		t.Fatalf("an exact schedule: %+v", v)
	}
	// Created after its first two nominal times: it owes the others.
	o, f = exact()
	f.view.CreatedAt = start.Add(1500 * time.Millisecond)
	f.execs, f.fires, f.charges = f.execs[2:], f.fires[:2], f.charges[2:]
	if v := scheduleWrong(o, f); len(v.wrong) > 0 || v.fired != 2 || v.before != 2 {
		t.Fatalf("a schedule created late: %+v", v)
	}
	if !scheduleSettled(o, f) {
		t.Fatal("an exact schedule is not settled")
	}
	for name, spoil := range map[string]func(o *scheduleOutcome, f *scheduleFacts){
		"not there":     func(_ *scheduleOutcome, f *scheduleFacts) { f.view = nil },
		"never acked":   func(o *scheduleOutcome, f *scheduleFacts) { o.puts, f.view, f.execs, f.fires = nil, nil, nil, nil },
		"a 500":         func(o *scheduleOutcome, _ *scheduleFacts) { o.puts = append(o.puts, answer{status: 500}) },
		"refused":       func(o *scheduleOutcome, _ *scheduleFacts) { o.puts = append(o.puts, answer{status: 400}) },
		"still running": func(_ *scheduleOutcome, f *scheduleFacts) { f.view.Running = []api.ScheduleFire{f.fires[0]} },
		"a next fire": func(_ *scheduleOutcome, f *scheduleFacts) {
			f.view.NextFires = []api.ScheduleNextFire{{NominalTime: start}}
		},
		"a fire missing":   func(_ *scheduleOutcome, f *scheduleFacts) { f.execs, f.fires = f.execs[1:], f.fires[:3] },
		"an execution out": func(_ *scheduleOutcome, f *scheduleFacts) { f.execs = f.execs[1:] },
		"a row out":        func(_ *scheduleOutcome, f *scheduleFacts) { f.fires = f.fires[1:] },
		"fired twice": func(_ *scheduleOutcome, f *scheduleFacts) {
			e := f.execs[1]
			e.id = "dup"
			f.execs = append(f.execs, e)
		},
		"beyond its end": func(o *scheduleOutcome, _ *scheduleFacts) { o.endAt = o.endAt.Add(-time.Second) },
		"fired before":   func(_ *scheduleOutcome, f *scheduleFacts) { f.view.CreatedAt = start.Add(500 * time.Millisecond) },
		"other key":      func(_ *scheduleOutcome, f *scheduleFacts) { f.execs[2].key = "sched:s:2026-01-01T12:00:02.5Z" },
		"other id":       func(_ *scheduleOutcome, f *scheduleFacts) { f.execs[2].workflowID = "x" },
		"not completed":  func(_ *scheduleOutcome, f *scheduleFacts) { f.execs[0].status = "Failed" },
		"early":          func(_ *scheduleOutcome, f *scheduleFacts) { f.execs[0].created = start.Add(-time.Millisecond) },
		"deduplicated":   func(_ *scheduleOutcome, f *scheduleFacts) { f.fires[1].Outcome = "deduplicated" },
		"row other exec": func(_ *scheduleOutcome, f *scheduleFacts) { f.fires[1].ExecutionID = "e0" },
		"row not closed": func(_ *scheduleOutcome, f *scheduleFacts) { f.fires[1].ExecutionStatus = "" },
		"row triggered":  func(_ *scheduleOutcome, f *scheduleFacts) { f.fires[1].Trigger = "trigger" },
		"extra row": func(_ *scheduleOutcome, f *scheduleFacts) {
			f.fires = append(f.fires, api.ScheduleFire{NominalTime: start.Add(time.Hour), Trigger: "spec", Outcome: "missed_catchup"})
		},
		"charged twice": func(_ *scheduleOutcome, f *scheduleFacts) { f.charges = append(f.charges, f.charges[0]) },
		"not charged":   func(_ *scheduleOutcome, f *scheduleFacts) { f.charges = f.charges[1:] },
	} {
		o, f := exact()
		spoil(o, &f)
		if v := scheduleWrong(o, f); len(v.wrong) == 0 {
			t.Errorf("%s: no violation", name)
		} else {
			t.Logf("%s: %s", name, strings.Join(v.wrong, "; "))
		}
	}
}
