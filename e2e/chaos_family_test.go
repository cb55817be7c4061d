//go:build linux

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
)

// The chaos suite's load of child workflows (docs/children.md): each
// trial starts a few executions of chaos_family
// (e2e/testdata/fleetworker/family.go), which fans out
// -chaos.family.children children of chaos_family_child, collects their
// results in order and returns them. Each child makes one effect, a
// charge at the payment provider the test serves keyed by its activity's
// idempotency key and charged to a customer that names the family and
// the child's index, and returns its index, its square and the charge.
// Some parents continue as new once mid-way: the first run starts the
// first half of the children and collects their results, then continues
// as new with them, and the second run starts the rest. Some first
// start, before their children, one chaos_family_waiter of each
// parent-close policy, which waits for a signal that never comes: when
// the parent's chain closes (its waiters carried across its
// continue-as-new), the terminate one must end Terminated, the
// request_cancel one Cancelled after its cleanup (an effect too), and
// the abandon one must still be Running; the check then terminates it
// through the API, and its parent must learn that it closed, so that
// nothing of the trial is left running. The trial's faults land during
// the fan-outs.
//
// After the trial every acknowledged start must have one chain, its
// runs linked, its last Completed with exactly the children's results.
// Each child has exactly one execution under the workflow_id derived for
// it (<parent run>/child-<n>), whose start key is the parent's and the
// child's number and which names its parent (parent_execution_id); the
// parent's history records its start and its close once; its effect
// happened exactly once, and is the charge its result names. Through
// the API, the parent's children listing lists every child with its
// execution and its status, and a listing of the executions by the
// parent run's workflow_id prefix lists exactly its children.

const (
	workflowFamily       = "chaos_family"
	workflowFamilyChild  = "chaos_family_child"
	workflowFamilyWaiter = "chaos_family_waiter"
)

var (
	chaosFamilies       = flag.Int("chaos.families", 2, "chaos: chaos_family starts per trial (parents fanning out child workflows under faults)")
	chaosFamilyChildren = flag.Int("chaos.family.children", 20, "chaos: children each chaos_family starts")
)

// familyPolicies are the parent-close policies of a family's waiters, in
// the order the parent starts them (child ids 1, 2, 3), as
// e2e/testdata/fleetworker/family.go has them.
var familyPolicies = []string{"terminate", "request_cancel", "abandon"}

// familyPlan is one chaos_family start.
type familyPlan struct {
	sideStart
	children int
	// cont: the parent continues as new after the first half; waiters:
	// it starts one waiter of each policy first.
	cont, waiters bool
}

// half is how many children the first run of a family that continues as
// new starts.
func (p familyPlan) half() int {
	if p.cont {
		return p.children / 2
	}
	return p.children
}

// planFamilies plans n families of children each over window: each starts
// in its first half; they take in turn every mix of continuing as new and
// starting waiters, the first one both. Each child's effect takes 50 to
// 400 ms, so that the fan-outs last while the faults land. It draws from
// its own generator, so that adding this load left the other loads' and
// the faults' draws of a seed as they were.
func planFamilies(seed uint64, kind, prefix string, n, children int, window time.Duration) []familyPlan {
	rng := rand.New(rand.NewPCG(seed, fnv64(kind+"/family")))
	plans := make([]familyPlan, n)
	for j := range plans {
		key := fmt.Sprintf("family-%sf%02d", prefix, j)
		p := familyPlan{sideStart: sideStart{key: key, at: time.Duration(rng.Int64N(int64(window/2) + 1)), ingest: rng.IntN(2)},
			children: children, cont: j%2 == 0, waiters: j%4 != 3}
		ms := make([]int, children)
		for i := range ms {
			ms[i] = 50 + rng.IntN(350)
		}
		raw, _ := json.Marshal(map[string]any{"input": map[string]any{"family": key, "children": children, "continue": p.cont,
			"waiters": p.waiters, "child_ms": ms}})
		p.body = string(raw)
		plans[j] = p
	}
	return plans
}

// familyOutcome is what the client of one family heard.
type familyOutcome struct {
	plan  familyPlan
	start *startOutcome
	// id is the execution the start answered: the chain's first run.
	id string
}

// runFamilies starts the families at their times, as the other side
// loads do, until giveUp; a start answered late is followed to its
// execution until idsGiveUp.
func (s *stack) runFamilies(ctx context.Context, plans []familyPlan, giveUp, idsGiveUp time.Time) []*familyOutcome {
	begin := time.Now()
	out := make([]*familyOutcome, len(plans))
	var wg sync.WaitGroup
	for j, p := range plans {
		o := &familyOutcome{plan: p, start: &startOutcome{}}
		out[j] = o
		wg.Go(func() {
			if !sendAt(ctx, begin.Add(p.at)) {
				return
			}
			var accepted string // a late answer's command
			s.startRetrying(ctx, workflowFamily, p.ingest, p.key, p.body, giveUp, func(a answer) {
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
				o.id = s.appliedExecution(ctx, accepted, idsGiveUp)
			}
		})
	}
	wg.Wait()
	return out
}

// familyRun is a run of a family's parent as PostgreSQL holds it.
type familyRun struct {
	id, key, workflowID, status, result string
	chainID, from, as                   string
	closed                              *time.Time
	// events are the Child* events of its history, in order.
	events []familyEvent
}

// familyEvent is a Child* event of a parent's history.
type familyEvent struct {
	Type  string `json:"type"`
	Child int    `json:"child"`
}

// familyKid is a child execution (of chaos_family_child or
// chaos_family_waiter) as PostgreSQL holds it.
type familyKid struct {
	id, workflow, workflowID, key, status, result, input string
	// parent, childID and policy are its parent reference's.
	parent  string
	childID int
	policy  string
	closed  *time.Time
	// tasks counts its WorkflowTaskCompleted events.
	tasks int
}

// call decodes the kid's input.
func (k familyKid) call() (familyCall, error) {
	var c familyCall
	err := json.Unmarshal([]byte(k.input), &c)
	return c, err
}

// familyCall is a chaos_family_child's or a chaos_family_waiter's input.
type familyCall struct {
	Family string `json:"family"`
	Index  int    `json:"index"`
	Policy string `json:"policy"`
}

// familyChild is a chaos_family_child's result.
type familyChild struct {
	Index  int    `json:"index"`
	Square int    `json:"square"`
	Charge string `json:"charge"`
}

// familyListed is an execution a listing by workflow_id prefix answered.
type familyListed struct {
	id, parent string
}

// familyFacts is what the check of one family reads.
type familyFacts struct {
	// runs are the parent's runs: those of its key, then those whose
	// chain or workflow_id is theirs, oldest first.
	runs []familyRun
	// kids are the executions that name a run as their parent, or whose
	// workflow_id is derived from a run's.
	kids []familyKid
	// effects are the charges made for the family, by what they are for
	// ("<index>", "cleanup-<policy>").
	effects map[string][]string
	// listed are the answers of GET /api/harvest/executions/{run}/children,
	// byPrefix those of GET /api/harvest/executions?workflow_id_prefix=<run>/,
	// by run (nil when not read).
	listed   map[string][]api.Child
	byPrefix map[string][]familyListed
}

// firsts are the runs of the family's key.
func (f familyFacts) firsts(key string) []familyRun {
	var out []familyRun
	for _, r := range f.runs {
		if r.key == key {
			out = append(out, r)
		}
	}
	return out
}

// newest is the run no run continued from (the first when there is
// none).
func (f familyFacts) newest() familyRun {
	for _, r := range f.runs {
		if r.as == "" {
			return r
		}
	}
	return f.runs[0]
}

// familyVerdict is what the check of one family found: what is wrong,
// and what it saw right.
type familyVerdict struct {
	wrong []string
	// children and waiters count its children and waiters that ended as
	// they must; runs its runs.
	children, waiters, runs int
	// abandoned is its abandon waiter, still Running, for the check to
	// terminate.
	abandoned *familyKid
}

// familyWrong checks one family: what its client heard (o) and f.
func familyWrong(o *familyOutcome, f familyFacts) familyVerdict {
	var v familyVerdict
	p := o.plan
	bad := func(format string, args ...any) { v.wrong = append(v.wrong, p.key+": "+fmt.Sprintf(format, args...)) }
	for _, a := range o.start.answers {
		if a.status >= 500 && (a.status != http.StatusServiceUnavailable || a.retryAfter == "") {
			bad("start answered %s", a)
		}
	}
	firsts := f.firsts(p.key)
	switch {
	case len(firsts) > 1:
		bad("%d executions of its key", len(firsts))
		return v
	case len(firsts) == 0 && o.start.acked():
		bad("acknowledged, no execution")
		return v
	case len(firsts) == 0:
		if len(f.effects) > 0 || len(f.kids) > 0 {
			bad("no execution, yet %d children and effects %v", len(f.kids), f.effects)
		}
		return v
	}
	first := firsts[0]
	if o.id != "" && first.id != o.id {
		bad("the start answered %s, its execution is %s", o.id, first.id)
	}
	v.runs = len(f.runs)
	// The chain: one run, or two linked both ways under one workflow_id.
	wantRuns := 1
	if p.cont {
		wantRuns = 2
	}
	runs := f.runs
	switch {
	case runs[0].id != first.id:
		bad("its first run %s is not the oldest of its runs (%s)", first.id, runs[0].id)
		return v
	case len(runs) != wantRuns:
		var what []string
		for _, r := range runs {
			what = append(what, fmt.Sprintf("%s %s (from %q, as %q)", r.id, r.status, r.from, r.as))
		}
		bad("%d runs, want %d: %s", len(runs), wantRuns, strings.Join(what, ", "))
		return v
	case first.from != "" || first.chainID != "":
		bad("its first run %s continues %q of chain %q", first.id, first.from, first.chainID)
	case p.cont && (first.status != "ContinuedAsNew" || first.as != runs[1].id || runs[1].from != first.id ||
		runs[1].chainID != first.id || runs[1].workflowID != first.workflowID):
		bad("run 1 %s %s continued as %q; run 2 %s continues %q of chain %q, workflow_id %s (the first's %s)", first.id, first.status,
			first.as, runs[1].id, runs[1].from, runs[1].chainID, runs[1].workflowID, first.workflowID)
	}
	last := runs[len(runs)-1]
	if last.status != "Completed" {
		bad("its last run %s is %s, not Completed within the bound", last.id, last.status)
	}
	// Its effects: each child's once, a cleanup only the request_cancel
	// waiter's, once.
	for what, charges := range f.effects {
		i, err := strconv.Atoi(what)
		switch {
		case err == nil && i >= 0 && i < p.children:
			if len(charges) != 1 {
				bad("child %d made its effect %d times (%v)", i, len(charges), charges)
			}
		case what == "cleanup-request_cancel" && p.waiters:
			if len(charges) != 1 {
				bad("the request_cancel waiter cleaned up %d times (%v)", len(charges), charges)
			}
		default:
			bad("effect %q (%v) is none of its children's", what, charges)
		}
	}
	// Its children: one execution each, under the workflow_id derived
	// for it, started by the run that must start it, naming it.
	runIndex := map[string]int{}
	for k, r := range runs {
		runIndex[r.id] = k
	}
	byWorkflowID := map[string]int{}
	byChild := map[string]int{}
	indexes := map[int][]familyKid{}
	policies := map[string][]familyKid{}
	for _, k := range f.kids {
		byWorkflowID[k.workflowID]++
		ref := k.parent + "/child-" + strconv.Itoa(k.childID)
		byChild[ref]++
		c, err := k.call()
		if err != nil || c.Family != p.key {
			bad("child %s (%s): input %s is not of the family (%v)", k.id, k.workflowID, k.input, err)
			continue
		}
		run, ok := runIndex[k.parent]
		switch {
		case !ok:
			bad("child %s (%s, workflow_id %s) names parent %q, none of its runs", k.id, k.workflow, k.workflowID, k.parent)
			continue
		case k.workflowID != ref:
			bad("child %s of %s, child %d: workflow_id %s, want %s", k.id, k.parent, k.childID, k.workflowID, ref)
		case k.key != "child:"+k.parent+":"+strconv.Itoa(k.childID):
			bad("child %s of %s, child %d: start key %q", k.id, k.parent, k.childID, k.key)
		}
		waiters := 0
		if p.waiters && run == 0 {
			waiters = len(familyPolicies)
		}
		switch k.workflow {
		case workflowFamilyChild:
			indexes[c.Index] = append(indexes[c.Index], k)
			wantRun, wantChild := 0, waiters+c.Index+1
			if c.Index >= p.half() {
				wantRun, wantChild = 1, c.Index-p.half()+1
			}
			if run != wantRun || k.childID != wantChild {
				bad("child %d (%s) started by run %d as child %d, want run %d child %d", c.Index, k.id, run+1, k.childID, wantRun+1, wantChild)
			}
		case workflowFamilyWaiter:
			policies[c.Policy] = append(policies[c.Policy], k)
			if want := slices.Index(familyPolicies, c.Policy) + 1; run != 0 || k.childID != want || k.policy != c.Policy {
				bad("waiter %s (%s) started by run %d as child %d with close policy %q, want run 1 child %d policy %s", k.id, c.Policy, run+1,
					k.childID, k.policy, want, c.Policy)
			}
		default:
			bad("child %s of workflow %s", k.id, k.workflow)
		}
	}
	for id, n := range byWorkflowID {
		if n > 1 {
			bad("%d executions under the workflow_id %s: a child started twice", n, id)
		}
	}
	for ref, n := range byChild {
		if n > 1 && byWorkflowID[ref] <= 1 {
			bad("%d executions name themselves %s", n, ref)
		}
	}
	var results []familyChild
	if last.status == "Completed" {
		if err := json.Unmarshal([]byte(last.result), &results); err != nil {
			bad("result %s: %v", last.result, err)
		}
		if len(results) != p.children {
			bad("%d results, want %d", len(results), p.children)
		}
	}
	for i := range p.children {
		got := indexes[i]
		if len(got) != 1 {
			bad("child %d: %d executions", i, len(got))
			continue
		}
		k := got[0]
		var r familyChild
		charges := f.effects[strconv.Itoa(i)]
		switch {
		case k.status != "Completed":
			bad("child %d (%s) is %s, not Completed", i, k.id, k.status)
		case json.Unmarshal([]byte(k.result), &r) != nil || r.Index != i || r.Square != i*i:
			bad("child %d (%s): result %s", i, k.id, k.result)
		case len(charges) != 1 || r.Charge != charges[0]:
			bad("child %d (%s) returned charge %q, the provider made %v", i, k.id, r.Charge, charges)
		case i < len(results) && results[i] != r:
			bad("result %d is %+v, child %d (%s) returned %+v", i, results[i], i, k.id, r)
		default:
			v.children++
		}
	}
	for idx := range indexes {
		if idx < 0 || idx >= p.children {
			bad("a child of index %d", idx)
		}
	}
	// Its waiters: each ended as its policy says.
	if !p.waiters && len(policies) > 0 {
		bad("waiters %v, none started", policies)
	}
	for pol := range policies {
		if !slices.Contains(familyPolicies, pol) {
			bad("a waiter of policy %q", pol)
		}
	}
	for _, pol := range familyPolicies {
		if !p.waiters {
			break
		}
		got := policies[pol]
		if len(got) != 1 {
			bad("%d waiters of policy %s", len(got), pol)
			continue
		}
		k := got[0]
		cleanups := f.effects["cleanup-"+pol]
		switch pol {
		case "terminate":
			if k.status != "Terminated" {
				bad("the terminate waiter %s is %s", k.id, k.status)
				continue
			}
		case "request_cancel":
			switch {
			case k.status != "Cancelled":
				bad("the request_cancel waiter %s is %s", k.id, k.status)
				continue
			case k.result == `"cleaned up"` && len(cleanups) == 1:
			case k.result == "null" && k.tasks == 0 && len(cleanups) == 0:
				// Asked to cancel before its code ever ran: nothing to
				// clean up.
			default:
				bad("the request_cancel waiter %s: Cancelled with result %s after %d tasks, %d cleanups", k.id, k.result, k.tasks, len(cleanups))
				continue
			}
		case "abandon":
			if k.status != "Running" {
				bad("the abandon waiter %s is %s, not left Running", k.id, k.status)
				continue
			}
			v.abandoned = &k
		}
		v.waiters++
	}
	// Its runs' histories: each child's start recorded once, its start
	// and close told once, each child's in the run that started it.
	for r, run := range runs {
		count := map[int]map[string]int{}
		for _, ev := range run.events {
			if count[ev.Child] == nil {
				count[ev.Child] = map[string]int{}
			}
			kind := ev.Type
			if strings.HasPrefix(kind, "ChildWorkflow") && kind != "ChildWorkflowInitiated" && kind != "ChildWorkflowStarted" &&
				kind != "ChildWorkflowCancelRequested" {
				kind = "closed"
			}
			count[ev.Child][kind]++
		}
		want := p.children - p.half()
		if r == 0 {
			want = p.half()
			if p.waiters {
				want += len(familyPolicies)
			}
		}
		if len(count) != want {
			bad("run %d %s: Child events of %d children, want %d", r+1, run.id, len(count), want)
		}
		for id, n := range count {
			switch {
			case id < 1 || id > want:
				bad("run %d %s: events of child %d", r+1, run.id, id)
			case n["ChildWorkflowInitiated"] != 1 || n["ChildWorkflowStarted"] > 1 || n["closed"] > 1 || n["ChildWorkflowCancelRequested"] > 0:
				bad("run %d %s: child %d's events %v", r+1, run.id, id, n)
			case (r > 0 || id > len(familyPolicies) || !p.waiters) && (n["ChildWorkflowStarted"] != 1 || n["closed"] != 1):
				// A child the run waited for: its start and close
				// told, once each.
				bad("run %d %s: child %d's events %v, want its start and close once", r+1, run.id, id, n)
			}
		}
	}
	// Through the API: each run's children as its listing has them (the
	// newest run's, which took on the children still open when the first
	// continued as new, else the run that started it), and the
	// executions of its workflow_id prefix.
	if f.listed != nil {
		find := func(startedBy string, childID int) (api.Child, bool) {
			for _, lister := range []string{f.newest().id, startedBy} {
				for _, ch := range f.listed[lister] {
					if ch.StartedBy == startedBy && ch.ChildID == childID {
						return ch, true
					}
				}
			}
			return api.Child{}, false
		}
		for _, k := range f.kids {
			ch, ok := find(k.parent, k.childID)
			switch {
			case !ok:
				bad("child %s (%s) is not in its parent's children listing", k.id, k.workflowID)
			case ch.ExecutionID != k.id || ch.Status != k.status || ch.WorkflowID != k.workflowID || ch.WorkflowName != k.workflow:
				bad("child %s (%s, %s) listed as %s %s %s (%s)", k.id, k.workflowID, k.status, ch.ExecutionID, ch.WorkflowID, ch.Status, ch.WorkflowName)
			}
		}
		for lister, children := range f.listed {
			for _, ch := range children {
				if ch.Status == "StartFailed" || ch.Status == "Initiated" && lister == f.newest().id {
					bad("%s lists child %d of %s %s", lister, ch.ChildID, ch.StartedBy, ch.Status)
				}
			}
		}
	}
	if f.byPrefix != nil {
		for _, r := range runs {
			var want, got []string
			for _, k := range f.kids {
				if k.parent == r.id {
					want = append(want, k.id)
				}
			}
			for _, e := range f.byPrefix[r.id] {
				got = append(got, e.id)
				if e.parent != r.id {
					bad("execution %s of the workflow_id prefix %s/ names parent %q", e.id, r.id, e.parent)
				}
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(want, got) {
				bad("GET executions?workflow_id_prefix=%s/ lists %v, its children are %v", r.id, got, want)
			}
		}
	}
	return v
}

// familySettled says whether every acknowledged family has its chain
// closed, and its children but the abandoned ones closed.
func familySettled(outcomes []*familyOutcome, facts map[string]familyFacts) bool {
	for _, o := range outcomes {
		f := facts[o.plan.key]
		if len(f.firsts(o.plan.key)) == 0 {
			if o.start.acked() {
				return false
			}
			continue
		}
		if n := f.newest(); n.closed == nil || n.status == "ContinuedAsNew" {
			return false
		}
		for _, k := range f.kids {
			if k.closed == nil && k.policy != "abandon" {
				return false
			}
		}
	}
	return true
}

// familyInvariants checks the trial's families, once their chains and
// children closed or the bound passed, and terminates the abandoned
// waiters.
func (c *trialCheck) familyInvariants(ctx context.Context, outcomes []*familyOutcome) {
	if len(outcomes) == 0 {
		return
	}
	prefix := "family-" + c.prefix
	var facts map[string]familyFacts
	var err error
	sctx, cancel := context.WithTimeout(ctx, c.cfg.bound)
	_ = pollUntil(sctx, 250*time.Millisecond, func() bool {
		facts, err = c.familyFacts(sctx, prefix, outcomes, false)
		return err == nil && familySettled(outcomes, facts)
	})
	cancel()
	// The children listings follow the children's reports, which may
	// still be on their way: read until all agree, for a while.
	var verdicts map[string]familyVerdict
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	perr := pollUntil(rctx, 500*time.Millisecond, func() bool {
		read, rerr := c.familyFacts(rctx, prefix, outcomes, true)
		if rerr != nil {
			err = rerr
			return false
		}
		facts, verdicts = read, map[string]familyVerdict{}
		wrongs := 0
		for _, o := range outcomes {
			v := familyWrong(o, facts[o.plan.key])
			verdicts[o.plan.key] = v
			wrongs += len(v.wrong)
		}
		return wrongs == 0
	})
	rcancel()
	if verdicts == nil {
		c.res.fail("family: read the executions: %v", cmpErr(err, perr))
		return
	}
	var bad []string
	for _, o := range outcomes {
		v := verdicts[o.plan.key]
		f := facts[o.plan.key]
		if v.abandoned != nil {
			// Nothing of the trial is left running: the abandoned waiter
			// is terminated, and its parent learns it closed.
			if w := c.terminateAbandoned(ctx, o, f, *v.abandoned); w != "" {
				v.wrong = append(v.wrong, w)
			} else {
				c.res.FamilyAbandonedTerminated++
			}
		}
		if len(v.wrong) > 0 {
			bad = append(bad, v.wrong...)
			c.familyDumps = append(c.familyDumps, c.dumpFamily(ctx, o, f))
			continue
		}
		if len(f.runs) == 0 {
			continue
		}
		c.res.FamiliesExact++
		hit, took := c.faultDuring(o, f)
		if hit {
			c.res.FamiliesHit++
		}
		c.res.FamilyLongest = max(c.res.FamilyLongest, took)
		c.res.FamilyChildren += v.children
		c.res.FamilyWaiters += v.waiters
		if v.runs > 1 {
			c.res.FamiliesContinued++
		}
	}
	if len(bad) > 0 {
		c.res.Other += len(bad)
		c.res.fail("family: %d wrong: %s", len(bad), strings.Join(bad, "; "))
	}
}

// faultDuring says whether a fault of the trial (from its signal to its
// restart) fell while the family ran, from its first start request until
// its last run closed, and how long that was.
func (c *trialCheck) faultDuring(o *familyOutcome, f familyFacts) (bool, time.Duration) {
	o.start.mu.Lock()
	defer o.start.mu.Unlock()
	closed := f.newest().closed
	if len(o.start.answers) == 0 || closed == nil {
		return false, 0
	}
	from := o.start.answers[0].at
	for _, ft := range c.res.Faults {
		signalled := ft.RestartAt.Add(-ft.Downtime - ft.StopTook)
		if signalled.Before(*closed) && ft.RestartAt.After(from) {
			return true, closed.Sub(from)
		}
	}
	return false, closed.Sub(from)
}

// cmpErr is the first error that is not nil.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// terminateAbandoned terminates the abandoned waiter k of a family and
// waits until it is Terminated and its parent's listing says so; it
// returns what went wrong, "" if nothing.
func (c *trialCheck) terminateAbandoned(ctx context.Context, o *familyOutcome, f familyFacts, k familyKid) string {
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var res *client.CloseResult
	err := retryFor(tctx, 30*time.Second, func() error {
		var err error
		res, err = c.st.apiClient(0).Terminate(tctx, k.id, "the chaos check ends the abandoned child")
		return err
	})
	if err != nil {
		return fmt.Sprintf("%s: terminate the abandoned waiter %s: %v", o.plan.key, k.id, err)
	}
	if res.Status != "Terminated" {
		return fmt.Sprintf("%s: terminate the abandoned waiter %s answered %s", o.plan.key, k.id, res.Status)
	}
	newest := f.newest().id
	var state string
	err = pollUntil(tctx, 250*time.Millisecond, func() bool {
		e, err := c.st.apiClient(1).Describe(tctx, k.id)
		if err != nil || e.Status != "Terminated" {
			state = fmt.Sprintf("describe: %v", err)
			if e != nil {
				state = e.Status
			}
			return false
		}
		l, err := c.st.apiClient(0).Children(tctx, newest)
		if err != nil {
			state = fmt.Sprintf("children of %s: %v", newest, err)
			return false
		}
		for _, ch := range l.Children {
			if ch.ExecutionID == k.id {
				state = "listed " + ch.Status
				return ch.Status == "Terminated"
			}
		}
		state = "not listed by " + newest
		return false
	})
	if err != nil {
		return fmt.Sprintf("%s: the abandoned waiter %s, terminated, then: %s", o.plan.key, k.id, state)
	}
	return ""
}

// apiClient is a client of ingest i.
func (s *stack) apiClient(i int) *client.Client {
	c, err := client.New(client.Config{BaseURL: s.baseURLs[i%len(s.baseURLs)], HTTPClient: s.client})
	if err != nil {
		panic(fmt.Sprintf("client of %s: %v", s.baseURLs[i], err)) // a base URL of ours
	}
	return c
}

// familyFacts reads what the families of the trial (their keys start
// with prefix) are, by key; withAPI also reads their listings.
func (c *trialCheck) familyFacts(ctx context.Context, prefix string, outcomes []*familyOutcome, withAPI bool) (map[string]familyFacts, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The runs, in two reads, each of every store: a chain's later runs
	// and its children may be in another store than its first.
	var firstIDs, workflowIDs []string
	err := c.st.queryAll(qctx, `SELECT execution_id::text, workflow_id FROM executions WHERE workflow_name = $1 AND starts_with(idempotency_key, $2)`,
		[]any{workflowFamily, prefix}, func(rows pgx.Rows) error {
			var id, wid string
			if err := rows.Scan(&id, &wid); err != nil {
				return err
			}
			firstIDs, workflowIDs = append(firstIDs, id), append(workflowIDs, wid)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read the families' first runs: %w", err)
	}
	var runs []familyRun
	err = c.st.queryAll(qctx, `
		SELECT e.execution_id::text, coalesce(e.idempotency_key, ''), e.workflow_id, e.status, coalesce(e.result::text, 'null'),
			coalesce(e.chain_id::text, ''), coalesce(e.continued_from::text, ''), coalesce(e.continued_as::text, ''), e.closed_at,
			(SELECT coalesce(json_agg(json_build_object('type', h.type, 'child', coalesce((h.attrs->>'child_id')::int, 0)) ORDER BY h.seq), '[]')::text
				FROM history_events h WHERE h.execution_id = e.execution_id AND starts_with(h.type, 'ChildWorkflow'))
		FROM executions e
		WHERE e.execution_id = ANY($1::uuid[]) OR e.chain_id = ANY($1::uuid[]) OR (e.workflow_name = $2 AND e.workflow_id = ANY($3))
		ORDER BY e.created_at, e.execution_id`,
		[]any{firstIDs, workflowFamily, workflowIDs}, func(rows pgx.Rows) error {
			var r familyRun
			var events string
			if err := rows.Scan(&r.id, &r.key, &r.workflowID, &r.status, &r.result, &r.chainID, &r.from, &r.as, &r.closed, &events); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(events), &r.events); err != nil {
				return fmt.Errorf("execution %s: events %s: %w", r.id, events, err)
			}
			runs = append(runs, r)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read the families' runs: %w", err)
	}
	byID := map[string]familyRun{}
	for _, r := range runs {
		byID[r.id] = r
	}
	// Each run's family: its first run's key.
	familyOf, byWorkflowID := map[string]string{}, map[string]string{}
	for _, r := range runs {
		if r.key != "" && r.chainID == "" {
			familyOf[r.id], byWorkflowID[r.workflowID] = r.key, r.key
		}
	}
	for _, r := range runs {
		if familyOf[r.id] == "" {
			familyOf[r.id] = cmp.Or(familyOf[r.chainID], byWorkflowID[r.workflowID])
		}
	}
	out := map[string]familyFacts{}
	var runIDs []string
	for _, r := range orderRuns(runs, byID) {
		key := familyOf[r.id]
		f := out[key]
		f.runs = append(f.runs, r)
		out[key] = f
		runIDs = append(runIDs, r.id)
	}
	err = c.st.queryAll(qctx, `
		SELECT e.execution_id::text, e.workflow_name, e.workflow_id, coalesce(e.idempotency_key, ''), e.status, coalesce(e.result::text, 'null'),
			coalesce(e.input::text, 'null'), coalesce(e.parent->>'execution_id', ''), coalesce((e.parent->>'child_id')::int, 0),
			coalesce(e.parent->>'close_policy', ''), e.closed_at,
			(SELECT count(*) FROM history_events h WHERE h.execution_id = e.execution_id AND h.type = 'WorkflowTaskCompleted')
		FROM executions e
		WHERE e.parent->>'execution_id' = ANY($1) OR split_part(e.workflow_id, '/', 1) = ANY($1)`,
		[]any{runIDs}, func(rows pgx.Rows) error {
			var k familyKid
			if err := rows.Scan(&k.id, &k.workflow, &k.workflowID, &k.key, &k.status, &k.result, &k.input, &k.parent, &k.childID, &k.policy,
				&k.closed, &k.tasks); err != nil {
				return err
			}
			owner := familyOf[k.parent]
			if owner == "" {
				owner = familyOf[strings.SplitN(k.workflowID, "/", 2)[0]]
			}
			f := out[owner]
			f.kids = append(f.kids, k)
			out[owner] = f
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read the families' children: %w", err)
	}
	for customer, charges := range c.st.charges.byCustomer("family_" + prefix) {
		key, what, _ := strings.Cut(strings.TrimPrefix(customer, "family_"), "/")
		f := out[key]
		if f.effects == nil {
			f.effects = map[string][]string{}
		}
		for _, ch := range charges {
			f.effects[what] = append(f.effects[what], ch.ID)
		}
		out[key] = f
	}
	if !withAPI {
		return out, nil
	}
	for _, o := range outcomes {
		f := out[o.plan.key]
		f.listed, f.byPrefix = map[string][]api.Child{}, map[string][]familyListed{}
		for i, r := range f.runs {
			l, err := c.st.apiClient(i).Children(qctx, r.id)
			if err != nil {
				return nil, fmt.Errorf("children of %s: %w", r.id, err)
			}
			f.listed[r.id] = l.Children
			page, err := c.st.apiClient(i+1).ListPage(qctx, client.ListOptions{WorkflowIDPrefix: r.id + "/", Limit: 500})
			if err != nil {
				return nil, fmt.Errorf("executions of the workflow_id prefix %s/: %w", r.id, err)
			}
			if page.NextCursor != "" {
				return nil, fmt.Errorf("executions of the workflow_id prefix %s/: more than 500", r.id)
			}
			for _, e := range page.Executions {
				f.byPrefix[r.id] = append(f.byPrefix[r.id], familyListed{id: e.ExecutionID, parent: e.ParentExecutionID})
			}
		}
		out[o.plan.key] = f
	}
	return out, nil
}

// orderRuns orders runs chain by chain, each from its first run along
// continued_as, then any run left over.
func orderRuns(runs []familyRun, byID map[string]familyRun) []familyRun {
	var out []familyRun
	seen := map[string]bool{}
	for _, r := range runs {
		if r.chainID != "" || r.from != "" {
			continue
		}
		for cur, ok := r, true; ok && !seen[cur.id]; cur, ok = byID[cur.as] {
			seen[cur.id] = true
			out = append(out, cur)
		}
	}
	for _, r := range runs {
		if !seen[r.id] {
			out = append(out, r)
		}
	}
	return out
}

// dumpFamily describes a family that went wrong for the trial's
// diagnostics: what its client heard, its runs with their histories, its
// children and their parents' listings.
func (c *trialCheck) dumpFamily(ctx context.Context, o *familyOutcome, f familyFacts) string {
	var b strings.Builder
	p := o.plan
	fmt.Fprintf(&b, "\n--- family %s (execution %s; %d children, continue %v, waiters %v) ---\nstart answers:\n", p.key, o.id, p.children, p.cont, p.waiters)
	o.start.mu.Lock()
	for _, a := range o.start.answers {
		fmt.Fprintf(&b, "  %s\n", a)
	}
	o.start.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for k, r := range f.runs {
		closed := "open"
		if r.closed != nil {
			closed = "closed " + r.closed.Format("15:04:05.000")
		}
		fmt.Fprintf(&b, "run %d %s: %s, %s, workflow_id %s, chain %q, from %q, as %q, result %.300s; history:\n%s", k+1, r.id, r.status, closed,
			r.workflowID, r.chainID, r.from, r.as, r.result, c.st.jsonRows(dctx, `
			SELECT format('  %s %s %s %s', seq, type, to_char(at, 'HH24:MI:SS.MS'), left(attrs::text, 300)) FROM history_events
			WHERE execution_id = $1 ORDER BY seq`, r.id))
		fmt.Fprintf(&b, "its children listing: %+v\n", f.listed[r.id])
	}
	for _, k := range f.kids {
		fmt.Fprintf(&b, "child %s %s: %s of %s child %d (policy %q), workflow_id %s, key %s, input %s, result %s, %d tasks\n", k.id, k.workflow,
			k.status, k.parent, k.childID, k.policy, k.workflowID, k.key, k.input, k.result, k.tasks)
	}
	fmt.Fprintf(&b, "effects: %v\n", f.effects)
	return b.String()
}

// TestFamilyWrong checks the family check itself on families made up:
// exact ones pass (one run, and two with waiters carried across), and
// each way of going wrong shows.
func TestFamilyWrong(t *testing.T) {
	const m = 4
	closed := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	exact := func(cont, waiters bool) (*familyOutcome, familyFacts) {
		p := familyPlan{sideStart: sideStart{key: "fam"}, children: m, cont: cont, waiters: waiters}
		o := &familyOutcome{plan: p, start: &startOutcome{answers: []answer{{status: http.StatusOK, executionID: "r1"}}}, id: "r1"}
		f := familyFacts{effects: map[string][]string{}, listed: map[string][]api.Child{}, byPrefix: map[string][]familyListed{}}
		runs := []familyRun{{id: "r1", key: "fam", workflowID: "wf", status: "Completed", closed: &closed}}
		if cont {
			runs[0].status, runs[0].as = "ContinuedAsNew", "r2"
			runs = append(runs, familyRun{id: "r2", workflowID: "wf", status: "Completed", chainID: "r1", from: "r1", closed: &closed})
		}
		addKid := func(run int, workflow string, childID int, call familyCall, status, result, policy string) {
			parent := runs[run].id
			in, _ := json.Marshal(call)
			k := familyKid{id: fmt.Sprintf("%s-k%d", parent, childID), workflow: workflow, workflowID: parent + "/child-" + strconv.Itoa(childID),
				key: "child:" + parent + ":" + strconv.Itoa(childID), status: status, result: result, input: string(in), parent: parent,
				childID: childID, policy: policy, closed: &closed, tasks: 2}
			if status == "Running" {
				k.closed = nil
			}
			f.kids = append(f.kids, k)
			runs[run].events = append(runs[run].events, familyEvent{"ChildWorkflowInitiated", childID})
			if policy == "" {
				runs[run].events = append(runs[run].events, familyEvent{"ChildWorkflowStarted", childID}, familyEvent{"ChildWorkflowCompleted", childID})
			} else if !cont {
				runs[run].events = append(runs[run].events, familyEvent{"ChildWorkflowStarted", childID})
			}
			// The newest run lists what it took on, the first what it
			// started.
			lister := parent
			if policy != "" && cont {
				lister = "r2"
			}
			f.listed[lister] = append(f.listed[lister], api.Child{ChildID: childID, StartedBy: parent, WorkflowName: workflow,
				WorkflowID: k.workflowID, ExecutionID: k.id, Status: status, ParentClosePolicy: policy})
			f.byPrefix[parent] = append(f.byPrefix[parent], familyListed{id: k.id, parent: parent})
		}
		waiters0 := 0
		if waiters {
			waiters0 = len(familyPolicies)
			for j, pol := range familyPolicies {
				status, result := map[string]string{"terminate": "Terminated", "request_cancel": "Cancelled", "abandon": "Running"}[pol], "null"
				if pol == "request_cancel" {
					result = `"cleaned up"`
					f.effects["cleanup-"+pol] = []string{"ch_cleanup"}
				}
				addKid(0, workflowFamilyWaiter, j+1, familyCall{Family: "fam", Policy: pol}, status, result, pol)
			}
		}
		var results []familyChild
		for i := range m {
			r := familyChild{Index: i, Square: i * i, Charge: fmt.Sprintf("ch_%d", i)}
			results = append(results, r)
			f.effects[strconv.Itoa(i)] = []string{r.Charge}
			res, _ := json.Marshal(r)
			run, childID := 0, waiters0+i+1
			if cont && i >= p.half() {
				run, childID = 1, i-p.half()+1
			}
			addKid(run, workflowFamilyChild, childID, familyCall{Family: "fam", Index: i}, "Completed", string(res), "")
		}
		res, _ := json.Marshal(results)
		runs[len(runs)-1].result = string(res)
		f.runs = runs
		return o, f
	}
	for _, shape := range []struct{ cont, waiters bool }{{false, false}, {true, true}, {false, true}, {true, false}} {
		o, f := exact(shape.cont, shape.waiters)
		v := familyWrong(o, f)
		if len(v.wrong) > 0 {
			t.Fatalf("an exact family (continue %v, waiters %v): %v", shape.cont, shape.waiters, v.wrong)
		}
		if v.children != m || (shape.waiters && (v.waiters != 3 || v.abandoned == nil)) {
			t.Fatalf("an exact family (continue %v, waiters %v): %+v", shape.cont, shape.waiters, v)
		}
	}
	kid := func(f *familyFacts, workflow string, i int) *familyKid {
		for j := range f.kids {
			c, _ := f.kids[j].call()
			child := workflow == workflowFamilyChild && c.Index == i
			waiter := workflow == workflowFamilyWaiter && c.Policy == familyPolicies[i]
			if f.kids[j].workflow == workflow && (child || waiter) {
				return &f.kids[j]
			}
		}
		t.Fatalf("no kid %s %d", workflow, i)
		return nil
	}
	for name, spoil := range map[string]func(o *familyOutcome, f *familyFacts){
		"lost": func(_ *familyOutcome, f *familyFacts) { *f = familyFacts{} },
		"two executions": func(_ *familyOutcome, f *familyFacts) {
			f.runs = append(f.runs, familyRun{id: "r9", key: "fam", status: "Completed"})
		},
		"other answered": func(o *familyOutcome, _ *familyFacts) { o.id = "r7" },
		"not completed":  func(_ *familyOutcome, f *familyFacts) { f.runs[1].status, f.runs[1].closed = "Running", nil },
		"failed":         func(_ *familyOutcome, f *familyFacts) { f.runs[1].status = "Failed" },
		"no continue":    func(_ *familyOutcome, f *familyFacts) { f.runs = f.runs[:1]; f.runs[0].as = "" },
		"link one way":   func(_ *familyOutcome, f *familyFacts) { f.runs[1].from = "" },
		"a result lost": func(_ *familyOutcome, f *familyFacts) {
			var rs []familyChild
			_ = json.Unmarshal([]byte(f.runs[1].result), &rs)
			raw, _ := json.Marshal(rs[1:])
			f.runs[1].result = string(raw)
		},
		"a result wrong": func(_ *familyOutcome, f *familyFacts) {
			f.runs[1].result = strings.Replace(f.runs[1].result, `"square":9`, `"square":8`, 1)
		},
		"child started twice": func(_ *familyOutcome, f *familyFacts) {
			k := *kid(f, workflowFamilyChild, 3)
			k.id = "dup"
			f.kids = append(f.kids, k)
		},
		"child twice, other workflow_id": func(_ *familyOutcome, f *familyFacts) {
			k := *kid(f, workflowFamilyChild, 0)
			k.id, k.childID, k.workflowID, k.key = "dup", 9, "r1/child-9", "child:r1:9"
			f.kids = append(f.kids, k)
		},
		"child missing": func(_ *familyOutcome, f *familyFacts) {
			id := kid(f, workflowFamilyChild, 2).id
			f.kids = slices.DeleteFunc(f.kids, func(k familyKid) bool { return k.id == id })
		},
		"child without its parent": func(_ *familyOutcome, f *familyFacts) { kid(f, workflowFamilyChild, 1).parent = "" },
		"child of the wrong run":   func(_ *familyOutcome, f *familyFacts) { kid(f, workflowFamilyChild, 3).parent = "r1" },
		"child other workflow_id":  func(_ *familyOutcome, f *familyFacts) { kid(f, workflowFamilyChild, 1).workflowID = "x" },
		"child failed":             func(_ *familyOutcome, f *familyFacts) { kid(f, workflowFamilyChild, 1).status = "Failed" },
		"effect twice":             func(_ *familyOutcome, f *familyFacts) { f.effects["2"] = append(f.effects["2"], "ch_again") },
		"effect lost":              func(_ *familyOutcome, f *familyFacts) { delete(f.effects, "2") },
		"effect unknown":           func(_ *familyOutcome, f *familyFacts) { f.effects["cleanup-terminate"] = []string{"ch_x"} },
		"terminate not applied":    func(_ *familyOutcome, f *familyFacts) { kid(f, workflowFamilyWaiter, 0).status = "Running" },
		"cancel not applied":       func(_ *familyOutcome, f *familyFacts) { kid(f, workflowFamilyWaiter, 1).status = "Running" },
		"cancel without cleanup":   func(_ *familyOutcome, f *familyFacts) { delete(f.effects, "cleanup-request_cancel") },
		"abandon closed":           func(_ *familyOutcome, f *familyFacts) { kid(f, workflowFamilyWaiter, 2).status = "Terminated" },
		"waiter missing": func(_ *familyOutcome, f *familyFacts) {
			id := kid(f, workflowFamilyWaiter, 0).id
			f.kids = slices.DeleteFunc(f.kids, func(k familyKid) bool { return k.id == id })
		},
		"start told twice": func(_ *familyOutcome, f *familyFacts) {
			f.runs[0].events = append(f.runs[0].events, familyEvent{"ChildWorkflowStarted", 4})
		},
		"close not told": func(_ *familyOutcome, f *familyFacts) {
			f.runs[1].events = slices.DeleteFunc(f.runs[1].events, func(e familyEvent) bool { return e.Type == "ChildWorkflowCompleted" && e.Child == 1 })
		},
		"not listed": func(_ *familyOutcome, f *familyFacts) { f.listed["r2"] = f.listed["r2"][1:] },
		"listed stale": func(_ *familyOutcome, f *familyFacts) {
			f.listed["r1"] = slices.Clone(f.listed["r1"])
			f.listed["r1"][len(f.listed["r1"])-1].Status = "Running"
		},
		"prefix lists more": func(_ *familyOutcome, f *familyFacts) {
			f.byPrefix["r1"] = append(f.byPrefix["r1"], familyListed{id: "stray", parent: "r1"})
		},
		"prefix without parent": func(_ *familyOutcome, f *familyFacts) {
			f.byPrefix["r2"] = slices.Clone(f.byPrefix["r2"])
			f.byPrefix["r2"][0].parent = ""
		},
		"start answered 500": func(o *familyOutcome, _ *familyFacts) {
			o.start.answers = append(o.start.answers, answer{status: http.StatusInternalServerError})
		},
	} {
		o, f := exact(true, true)
		spoil(o, &f)
		if v := familyWrong(o, f); len(v.wrong) == 0 {
			t.Errorf("%s: no violation", name)
		} else {
			t.Logf("%s: %s", name, strings.Join(v.wrong, "; "))
		}
	}
}
