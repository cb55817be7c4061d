//go:build linux

package e2e

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/scheduler"
)

// The fault-injection suite. Each trial runs keyed charge starts, with
// duplicate retries, through both ingests of a stack of real processes
// (see chaos_stack_test.go), stops one process of the trial's kind with
// SIGKILL or SIGTERM at a random moment (NATS and PostgreSQL included) and
// starts it again after a random downtime, then checks, scoped to the
// trial's keys:
//
//   - one execution per key, and every acknowledged start has one (lost);
//   - every execution Completed within -chaos.bound of the last restart
//     (stuck), with one WorkflowStarted and one WorkflowCompleted;
//   - one charge per execution at the provider, the one its result names;
//   - ingest's answers and reads agree with PostgreSQL, and a late retry
//     of each key answers its execution;
//   - once every command is applied, every process's /readyz says ready
//     within -chaos.bound (ingest's with no failing shard);
//   - afterwards the stack serves again (both schedulers hold shards, a
//     start through each ingest completes).
//
// TestChaos runs it on one NATS server, TestChaosCluster on a 3-node
// cluster with nats_replicas 3 (where a NATS fault hits any node). The
// default run (CI) is one trial per fault kind of each (TestChaosCluster:
// of four kinds), about a minute and a half and forty seconds. Run more
// with
//
//	go test ./e2e -run '^TestChaos$' -timeout 0 -chaos.trials 200 -chaos.report chaos.md
//	go test ./e2e -run '^TestChaosCluster$' -timeout 0 -chaos.kinds all -chaos.trials 200 -chaos.report chaos-cluster.md
//
// A failing trial prints its seed; -chaos.kinds <kind> -chaos.seed <seed>
// -chaos.trials 1 replays its random choices (the timing of the processes
// is not replayed).

var (
	chaosTrials        = flag.Int("chaos.trials", 1, "chaos: trials per fault kind")
	chaosKinds         = flag.String("chaos.kinds", "", "chaos: comma-separated fault kinds to run, e.g. sigkill-nats,sigterm-worker (default all)")
	chaosSeed          = flag.Uint64("chaos.seed", 0, "chaos: base seed, trial i uses seed+i (default: from the clock)")
	chaosBound         = flag.Duration("chaos.bound", 90*time.Second, "chaos: every execution completes within this of the last restart")
	chaosReport        = flag.String("chaos.report", "", "chaos: write the summary to this file, JSON if it ends in .json, else markdown")
	chaosKeys          = flag.Int("chaos.keys", 30, "chaos: keyed starts per trial")
	chaosLoad          = flag.Duration("chaos.load", 3*time.Second, "chaos: the starts of a trial are spread over this long, and its faults fall in it")
	chaosFaults        = flag.Int("chaos.faults", 1, "chaos: each trial injects 1 to this many faults")
	chaosDowntime      = flag.Duration("chaos.downtime", 2*time.Second, "chaos: a stopped process stays down up to this long")
	chaosGrace         = flag.Duration("chaos.grace", 10*time.Second, "chaos: how long a SIGTERMed process may take to exit before it is SIGKILLed")
	chaosGiveUp        = flag.Duration("chaos.giveup", 30*time.Second, "chaos: clients stop retrying a start this long after the load ends")
	chaosChargeLatency = flag.Duration("chaos.chargelatency", 0, "chaos: the payment provider answers a new charge this late, so that faults land mid-activity")
	chaosDeferred      = flag.Int("chaos.deferred", 8, "chaos: deferred starts per trial of each start policy (batch, throttle, debounce)")
	chaosPoison        = flag.Int("chaos.poison", 4, "chaos: poison sends per trial (half refused by ingest, half published straight to the command stream and set aside)")
	chaosTapDeliveries = flag.Bool("chaos.tapdeliveries", false, "chaos: the tap also hears pull deliveries; it then keeps the pull requests of stopped workers alive (see startTap)")
	chaosExplain       = flag.Duration("chaos.explain", 0, "chaos: log the history of a trial's slowest execution when it took longer than this (0: never)")
	chaosLogs          = flag.String("chaos.logs", "", "chaos: keep the processes' logs under this directory")
	chaosLogLevel      = flag.String("chaos.loglevel", "debug", "chaos: the services' log level")
	chaosAckWait       = flag.Duration("chaos.ackwait", harvest.DefaultTaskAckWait, "chaos: the workers' HARVEST_TASK_ACK_WAIT (default: the production default)")
	chaosLeaseTTL      = flag.Duration("chaos.leasettl", scheduler.DefaultLeaseTTL, "chaos: the schedulers' HARVEST_LEASE_TTL (default: the production default)")
)

// faultKind is a signal and the role of the process it is sent to.
type faultKind struct {
	sig  syscall.Signal
	role string
}

func (k faultKind) String() string {
	s := "sigkill"
	if k.sig == syscall.SIGTERM {
		s = "sigterm"
	}
	return s + "-" + k.role
}

var chaosRoles = []string{"ingest", "scheduler", "worker", "nats", "postgres"}

func allFaultKinds() []faultKind {
	var out []faultKind
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		for _, role := range chaosRoles {
			out = append(out, faultKind{sig, role})
		}
	}
	return out
}

func selectedFaultKinds(filter string) ([]faultKind, error) {
	all := allFaultKinds()
	if filter == "" || filter == "all" {
		return all, nil
	}
	var out []faultKind
	for _, name := range strings.Split(filter, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(all, func(k faultKind) bool { return k.String() == name })
		if i < 0 {
			var names []string
			for _, k := range all {
				names = append(names, k.String())
			}
			return nil, fmt.Errorf("-chaos.kinds: no fault kind %q; want some of %s", name, strings.Join(names, ","))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// trialConfig is what every trial of a run shares.
type trialConfig struct {
	keys     int
	load     time.Duration
	faults   int
	downtime time.Duration
	grace    time.Duration
	giveUp   time.Duration
	bound    time.Duration
}

// budget is the longest a trial may take.
func (c trialConfig) budget() time.Duration {
	return c.load + laterMax + c.giveUp + time.Duration(c.faults)*(c.grace+c.downtime+30*time.Second) + c.bound + 2*time.Minute
}

// TestChaos runs the suite on one NATS server.
func TestChaos(t *testing.T) { runChaos(t, 1, 1, *chaosTrials, *chaosKinds) }

// TestChaosCluster runs it on a 3-node NATS cluster with nats_replicas 3:
// a NATS fault hits any node, the leaders of the streams included. By
// default it runs the kinds the cluster changes: the NATS faults, and
// the kills of a scheduler and a worker, whose restarts reconnect to
// any node and find their consumers' leaders elsewhere (-chaos.kinds
// all for every kind).
func TestChaosCluster(t *testing.T) {
	kinds := *chaosKinds
	if kinds == "" {
		kinds = "sigkill-nats,sigterm-nats,sigkill-scheduler,sigkill-worker"
	}
	runChaos(t, 3, 1, *chaosTrials, kinds)
}

// TestChaosStores runs it with the executions spread over two PostgreSQL
// stores (two databases of the one server, a scheduler for each in every
// scheduler process): half the trials per fault kind of the others, at
// least one (one by default), and by default only the kinds that hit
// what the stores change (the schedulers, PostgreSQL, NATS).
func TestChaosStores(t *testing.T) {
	kinds := *chaosKinds
	if kinds == "" {
		kinds = "sigkill-scheduler,sigterm-scheduler,sigkill-postgres,sigkill-nats"
	}
	runChaos(t, 1, 2, max(1, *chaosTrials/2), kinds)
}

func runChaos(t *testing.T, natsNodes, stores, trials int, kindList string) {
	if testing.Short() {
		t.Skip("builds and runs a stack of real processes and kills them")
	}
	kinds, err := selectedFaultKinds(kindList)
	if err != nil {
		t.Fatal(err)
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano() % 1e9)
	}
	cfg := trialConfig{keys: *chaosKeys, load: *chaosLoad, faults: max(*chaosFaults, 1), downtime: *chaosDowntime,
		grace: *chaosGrace, giveUp: *chaosGiveUp, bound: *chaosBound}
	t.Logf("chaos: seed %d, %d trial(s) of %d fault kind(s), %d keys per trial, %d store(s), bound %s", seed, trials, len(kinds), cfg.keys, stores, cfg.bound)

	began := time.Now()
	bins := t.TempDir()
	if err := buildChaosBinaries(bins); err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos: built nats-server, ingest, scheduler, worker in %s", time.Since(began).Round(time.Millisecond))

	sum := &chaosSummary{seed: seed, config: cfg, kinds: kinds, ackWait: *chaosAckWait, leaseTTL: *chaosLeaseTTL, natsNodes: natsNodes}
	r := &trialRunner{cfg: cfg, stackCfg: stackConfig{bins: bins, leaseTTL: *chaosLeaseTTL, ackWait: *chaosAckWait, logLevel: *chaosLogLevel, natsNodes: natsNodes, stores: stores}}
	t.Cleanup(r.closeStack)

	deadline, hasDeadline := t.Deadline()
run:
	for _, kind := range kinds {
		for i := range trials {
			if hasDeadline && time.Until(deadline) < cfg.budget() {
				sum.stoppedEarly = fmt.Sprintf("stopped before trial %d of %s: less than %s left before -timeout (run with -timeout 0)", i, kind, cfg.budget().Round(time.Second))
				t.Log("chaos: " + sum.stoppedEarly)
				break run
			}
			t.Run(fmt.Sprintf("%s/%03d", kind, i), func(t *testing.T) {
				res := r.run(t, kind, i, seed+uint64(i))
				sum.add(res)
				if res.failed() {
					t.Errorf("%s trial %d (seed %d) failed: %s\nreproduce: go test ./e2e -run '^%s$' -chaos.kinds %s -chaos.seed %d -chaos.trials 1\n%s",
						kind, i, res.Seed, strings.Join(res.Violations, "; "), testName(t), kind, res.Seed, res.diagnostics)
				}
			})
		}
	}
	sum.elapsed = time.Since(began)
	t.Logf("chaos summary:\n%s", sum.markdown())
	if *chaosReport != "" {
		if err := sum.write(*chaosReport); err != nil {
			t.Errorf("write the chaos report: %v", err)
		} else {
			t.Logf("chaos: report written to %s", *chaosReport)
		}
	}
}

// trialRunner runs trials on one stack, replaced after a failed trial.
type trialRunner struct {
	cfg      trialConfig
	stackCfg stackConfig
	st       *stack
	stacks   int
	healthy  bool // the stack passed its health check after the last trial
}

func (r *trialRunner) closeStack() {
	if r.st != nil {
		r.st.close()
		r.st = nil
	}
}

// ensureStack returns a serving stack: the current one if it is up, else
// a fresh one.
func (r *trialRunner) ensureStack(ctx context.Context, canary string, logf func(string, ...any)) error {
	if r.st != nil && r.healthy {
		return nil
	}
	if r.st != nil {
		hctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := r.st.waitHealthy(hctx, canary+"pre")
		cancel()
		if err == nil {
			return nil
		}
		logf("chaos: the stack is not healthy, starting a fresh one: %v", err)
		r.closeStack()
	}
	r.stacks++
	cfg := r.stackCfg
	if *chaosLogs != "" {
		cfg.logDir = filepath.Join(*chaosLogs, fmt.Sprintf("stack-%03d", r.stacks))
	}
	began := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := newStack(sctx, cfg)
	if err != nil {
		return fmt.Errorf("start a stack: %w", err)
	}
	r.st = st
	if err := st.waitHealthy(sctx, canary+"fresh"); err != nil {
		return fmt.Errorf("fresh stack not healthy: %w", err)
	}
	logf("chaos: stack %d up in %s (logs in %s)", r.stacks, time.Since(began).Round(time.Millisecond), st.pg.log.dir)
	return nil
}

// faultPlan is one planned fault.
type faultPlan struct {
	at       time.Duration // after the load began
	target   int           // index among the role's members
	downtime time.Duration
}

// faultRecord is what happened to one fault.
type faultRecord struct {
	Target     string        `json:"target"`
	Signal     string        `json:"signal"`
	At         time.Duration `json:"at_ns"` // after the load began
	Downtime   time.Duration `json:"downtime_ns"`
	StopTook   time.Duration `json:"stop_took_ns"`
	Escalated  bool          `json:"escalated_to_sigkill"`
	Exit       string        `json:"exit"`
	RestartAt  time.Time     `json:"restart_at"`
	RestartErr string        `json:"restart_error,omitempty"`
	NotReady   string        `json:"not_ready,omitempty"` // the target was not serving when signalled
}

func (f faultRecord) String() string {
	s := fmt.Sprintf("%s %s at +%s", f.Signal, f.Target, f.At.Round(time.Millisecond))
	if f.NotReady != "" {
		s += " (not ready: " + f.NotReady + ")"
	}
	s += fmt.Sprintf(": exited after %s (%s)", f.StopTook.Round(time.Millisecond), f.Exit)
	if f.Escalated {
		s += ", SIGKILLed after the grace period"
	}
	s += fmt.Sprintf(", down %s, restarted %s", f.Downtime.Round(time.Millisecond), f.RestartAt.Format("15:04:05.000"))
	if f.RestartErr != "" {
		s += ": restart failed: " + f.RestartErr
	}
	return s
}

// run runs trial i of kind with seed.
func (r *trialRunner) run(t *testing.T, kind faultKind, i int, seed uint64) *trialResult {
	res := &trialResult{Kind: kind.String(), Trial: i, Seed: seed, Keys: r.cfg.keys}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.budget())
	defer cancel()
	// Keys name the seed, so a replay with -chaos.seed sends the same keys
	// (which pick the shards).
	prefix := fmt.Sprintf("chaos-%s-%d-", kind, seed)
	if err := r.ensureStack(ctx, "canary-"+prefix, t.Logf); err != nil {
		res.fail("harness: %v", err)
		res.diagnostics = err.Error()
		r.closeStack()
		return res
	}
	st := r.st
	// The kind takes part in the seed, so kinds run with one base seed
	// differ, and -chaos.kinds K -chaos.seed S replays K's trial of seed S.
	rng := rand.New(rand.NewPCG(seed, fnv64(kind.String())))
	plans := planLoad(rng, prefix, r.cfg.keys, r.cfg.load)
	poison := planPoison(rng, prefix, *chaosPoison, r.cfg.load)
	deferred := planDeferred(rng, prefix, *chaosDeferred, r.cfg.load)
	fanout := planFanout(rng, prefix, *chaosFanout, r.cfg.load)
	flaky := planFlaky(rng, prefix, *chaosFlaky, r.cfg.load)
	chains := planChains(seed, kind.String(), prefix, *chaosChains, r.cfg.load)
	sagas := planSagas(seed, kind.String(), prefix, *chaosSagas, r.cfg.load)
	resets := planResets(seed, kind.String(), prefix, *chaosResets, r.cfg.load)
	batch := planBatch(seed, kind.String(), prefix, *chaosBatch, r.cfg.load)
	families := planFamilies(seed, kind.String(), prefix, *chaosFamilies, *chaosFamilyChildren, r.cfg.load)
	schedules := planSchedules(seed, kind.String(), prefix, *chaosSchedules)
	concurrency := planConcurrency(seed, kind.String(), prefix, *chaosConcurrency, r.cfg.load)
	targets := st.members(kind.role)
	faults := make([]faultPlan, 1+rng.IntN(r.cfg.faults))
	for j := range faults {
		faults[j] = faultPlan{
			at:       time.Duration(rng.Int64N(int64(r.cfg.load))),
			target:   rng.IntN(len(targets)),
			downtime: time.Duration(rng.Int64N(int64(r.cfg.downtime) + 1)),
		}
	}
	slices.SortFunc(faults, func(a, b faultPlan) int { return int(a.at - b.at) })

	marks := map[string]logMark{}
	for _, m := range st.all() {
		marks[m.name()] = m.logs().mark()
	}
	_ = st.crashes() // forget what happened before this trial
	st.tap.reset()
	began := time.Now()
	giveUp := began.Add(r.cfg.load + laterMax + r.cfg.giveUp)
	loadDone := make(chan []*keyOutcome, 1)
	go func() { loadDone <- st.runLoad(ctx, plans, giveUp) }()
	poisonDone := make(chan []*poisonOutcome, 1)
	go func() { poisonDone <- st.runPoison(ctx, poison, giveUp) }()
	deferredDone := make(chan []*deferredOutcome, 1)
	go func() { deferredDone <- st.runDeferred(ctx, deferred, giveUp) }()
	fanoutDone := make(chan []*fanoutOutcome, 1)
	go func() { fanoutDone <- st.runFanout(ctx, fanout, giveUp) }()
	flakyDone := make(chan []*startOutcome, 1)
	go func() { flakyDone <- st.runFlaky(ctx, flaky, giveUp) }()
	// A chain's signals are retried for as long as its runs may take to
	// complete: until the bound after the starts gave up.
	chainsDone := make(chan []*chainOutcome, 1)
	go func() { chainsDone <- st.runChains(ctx, chains, giveUp, giveUp.Add(r.cfg.bound)) }()
	// A saga's cancels are retried as a chain's signals are.
	sagasDone := make(chan []*sagaOutcome, 1)
	go func() { sagasDone <- st.runSagas(ctx, sagas, giveUp, giveUp.Add(r.cfg.bound)) }()
	resetsDone := make(chan []*resetOutcome, 1)
	go func() { resetsDone <- st.runResets(ctx, resets, giveUp, giveUp.Add(r.cfg.bound)) }()
	batchDone := make(chan *batchOutcome, 1)
	go func() { batchDone <- st.runBatch(ctx, batch, giveUp, giveUp.Add(r.cfg.bound)) }()
	familiesDone := make(chan []*familyOutcome, 1)
	go func() { familiesDone <- st.runFamilies(ctx, families, giveUp, giveUp.Add(r.cfg.bound)) }()
	schedulesDone := make(chan []*scheduleOutcome, 1)
	go func() { schedulesDone <- st.runSchedules(ctx, schedules, r.cfg.load, giveUp) }()
	concurrencyDone := make(chan []*startOutcome, 1)
	go func() { concurrencyDone <- st.runConcurrency(ctx, concurrency, giveUp) }()

	var lastRestart time.Time
	for _, f := range faults {
		timer := time.NewTimer(time.Until(began.Add(f.at)))
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
		m := targets[f.target]
		// A fault hits a serving process, not one still starting after the
		// previous fault.
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		notReady := m.waitReady(rctx)
		rcancel()
		rec := faultRecord{Target: m.name(), Signal: strings.ToUpper(unix(kind.sig)), At: time.Since(began), Downtime: f.downtime}
		if notReady != nil {
			rec.NotReady = notReady.Error()
		}
		stop, err := m.stop(kind.sig, r.cfg.grace)
		if err != nil {
			rec.Exit = err.Error()
		} else {
			rec.StopTook, rec.Escalated, rec.Exit = stop.exitedAt.Sub(stop.at), stop.escalated, stop.exit
		}
		down := time.NewTimer(f.downtime)
		select {
		case <-ctx.Done():
		case <-down.C:
		}
		down.Stop()
		rec.RestartAt = time.Now()
		if err := m.start(ctx); err != nil {
			rec.RestartErr = err.Error()
			res.fail("harness: restart %s: %v", m.name(), err)
		}
		lastRestart = rec.RestartAt
		res.Faults = append(res.Faults, rec)
	}
	keys := <-loadDone
	loadEnd := time.Now()
	res.LoadTook = loadEnd.Sub(began)

	check := &trialCheck{st: st, cfg: r.cfg, prefix: prefix, lastRestart: lastRestart, keys: keys, res: res}
	check.converge(ctx, lastRestart, loadEnd)
	check.invariants(ctx)
	check.poisonInvariants(ctx, <-poisonDone)
	check.deferredInvariants(ctx, <-deferredDone)
	check.fanoutInvariants(ctx, <-fanoutDone)
	check.flakyInvariants(ctx, flaky, <-flakyDone)
	check.chainInvariants(ctx, <-chainsDone)
	check.sagaInvariants(ctx, <-sagasDone)
	check.resetInvariants(ctx, <-resetsDone)
	check.batchInvariants(ctx, <-batchDone)
	check.familyInvariants(ctx, <-familiesDone)
	schedSummary, schedDump := check.scheduleInvariants(ctx, <-schedulesDone)
	concSummary, concDump := check.concurrencyInvariants(ctx, concurrency, <-concurrencyDone)
	if !res.failed() {
		check.readiness(ctx)
	}
	r.healthy = false
	if !res.failed() {
		hctx, hcancel := context.WithTimeout(ctx, time.Minute)
		if err := st.waitHealthy(hctx, "canary-"+prefix+"post"); err != nil {
			res.fail("not recovered: %v", err)
		} else {
			r.healthy = true
		}
		hcancel()
	}
	for _, c := range st.crashes() {
		res.Crashes = append(res.Crashes, fmt.Sprintf("%s run %d exited on its own at %s: %s", c.member, c.run, c.at.Format("15:04:05.000"), c.exit))
	}
	if res.failed() {
		res.diagnostics = check.diagnose(ctx, marks) + schedDump + concDump
		r.closeStack() // the next trial gets a fresh stack
	}
	t.Logf("%s", res.line())
	if schedSummary != "" {
		t.Logf("%s", schedSummary)
	}
	if concSummary != "" {
		t.Logf("%s", concSummary)
	}
	if res.Slowest != "" {
		t.Logf("slowest %s", res.Slowest)
	}
	return res
}

// testName is the name of the top-level test t runs in.
func testName(t *testing.T) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return name
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

func unix(sig syscall.Signal) string {
	if sig == syscall.SIGTERM {
		return "sigterm"
	}
	return "sigkill"
}

// keepLogsHint says where a failed trial's full logs are.
func keepLogsHint() string {
	if *chaosLogs != "" {
		return "full logs under " + *chaosLogs
	}
	return "pass -chaos.logs DIR to keep the full logs"
}
