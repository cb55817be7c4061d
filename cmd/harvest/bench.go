package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/dev/bench"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/service"
)

// benchOptions are the flags of `harvest bench`.
type benchOptions struct {
	workload    string
	n           int
	concurrency int
	signals     int
	stores      int
	addr        string
	token       string
	json        bool
	cpuProfile  string
	memProfile  string
	retention   time.Duration
	backlog     int
	backlogKept bool
	sampleEvery time.Duration
	sampleAfter time.Duration
	// extraWorkers is how many workers to add to the in-process stack,
	// each registering names of its own that the workload never runs.
	extraWorkers int
	// rate is "" (closed loop), a rate of starts a second (open loop), or
	// "auto" (the search for the highest rate that holds ratePercentile).
	rate        string
	rateP99     time.Duration
	rateStep    time.Duration
	rateFrom    float64
	rateMax     float64
	maxInFlight int
}

func newBench() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench --workload W1|W2|W3 [--n 10000] [--concurrency 16] [--addr URL] [--json]",
		Short: "Measure throughput, latency and cost per workflow under a workload",
		Long: `Run a workload over the HTTP API and print what it measured, verified:

  W1  N keyed starts of bench_echo (one activity that returns its input).
  W2  W1 plus 30% extra submissions reusing an earlier key, racing the
      original; checks N executions and N activity runs.
  W3  N collect executions (default 1000), each sent 10 keyed signals of
      which 3 are sent twice; checks each completes with its 10 items.

With --rate R the starts of W1 and W2 are open-loop, the way webhooks
arrive: R a second on a fixed schedule, whatever the answers do, every
latency measured from when its start was due. --rate auto searches for
the highest rate whose e2e p99 stays within --rate-p99 (100ms): it
doubles from --rate-from while each step of --rate-step (10s) holds,
then narrows the gap to the first that did not.

Without --addr the bench starts the whole stack in this process (as
` + "`harvest dev`" + ` does, with its configuration, in a fresh temporary state dir
that is removed afterwards) and also measures the cost per workflow: SQL
statements, transactions, JetStream messages, CPU and memory. With --addr
it runs against that stack, and those figures are not measured.

It exits non-zero when a check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cfg config.Config
			if o.addr == "" {
				var err error
				if cfg, _, _, err = service.LoadConfig(cmd, devConfigFile); err != nil {
					return err
				}
			}
			ctx, stop := service.SignalContext()
			defer stop()
			return runBench(ctx, o, cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.workload, "workload", "", "W1, W2 or W3 (required)")
	f.IntVar(&o.n, "n", 0, "workflows to run (default 10000, or 1000 for W3)")
	f.IntVar(&o.concurrency, "concurrency", bench.DefaultConcurrency, "concurrent submitters")
	f.IntVar(&o.signals, "signals", 0, "W3: item signals each execution waits for (default 10, at most 10000): a signal's cost as a history grows")
	f.StringVar(&o.addr, "addr", "", "base URL of a running stack's HTTP API (default: start one in this process)")
	f.StringVar(&o.token, "token", "", "bearer token for an --addr API that requires one (default $HARVEST_TOKEN)")
	f.BoolVar(&o.json, "json", false, "print one JSON object instead of the table")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the in-process stack and the client) to this file")
	f.DurationVar(&o.retention, "retention", 0, "in-process: the stack's retention, and its start_idempotency_window too (a retention may not be shorter), e.g. 30s for a soak whose executions are pruned as it runs")
	f.IntVar(&o.backlog, "backlog", 0, "in-process: first insert this many closed executions past their retention, for the pruner to work through during the run")
	f.BoolVar(&o.backlogKept, "backlog-kept", false, "in-process, with --backlog: insert them inside their retention instead, so the pruner leaves them (the same tables without the pruning, to compare with)")
	f.DurationVar(&o.sampleEvery, "sample-every", 0, "in-process: sample every table's rows and size this often (default 10s with --retention or --backlog)")
	f.DurationVar(&o.sampleAfter, "sample-after", 0, "in-process: go on sampling this long after the last completion (default twice --retention)")
	f.IntVar(&o.stores, "stores", 0, "in-process: spread the executions over this many PostgreSQL stores, each a database of the stack's PostgreSQL, with a scheduler each (docs/deploy.md)")
	f.IntVar(&o.extraWorkers, "extra-workers", 0, "in-process: add this many workers on the default task queue, each registering a workflow and an activity the workload never runs (a fleet of different workers)")
	f.StringVar(&o.rate, "rate", "", "W1, W2: send starts open-loop at this many a second (--n of them), or \"auto\" to search for the highest rate that holds --rate-p99")
	f.DurationVar(&o.rateP99, "rate-p99", 100*time.Millisecond, "--rate auto: the e2e p99 a rate must hold")
	f.DurationVar(&o.rateStep, "rate-step", 10*time.Second, "--rate auto: how long each rate is sent for")
	f.Float64Var(&o.rateFrom, "rate-from", 250, "--rate auto: the first rate tried, a second")
	f.Float64Var(&o.rateMax, "rate-max", 20000, "--rate auto: the highest rate tried, a second")
	f.IntVar(&o.maxInFlight, "max-in-flight", bench.DefaultMaxInFlight, "with --rate: requests waiting for their answers at most; a start due beyond it leaves late, and its lateness counts")
	f.StringVar(&o.memProfile, "memprofile", "", "write a heap profile of this process to this file when the workload ends, before the stack stops")
	service.AddConfigFlag(f, devConfigFile)
	f.Lookup("config").Usage = "YAML configuration of the in-process stack " + strings.TrimPrefix(f.Lookup("config").Usage, "YAML configuration file ")
	_ = cmd.MarkFlagRequired("workload")
	return cmd
}

// runBench runs one workload and prints its result to stdout; progress
// and notes go to stderr. cfg configures the in-process stack, without
// --addr.
func runBench(ctx context.Context, o benchOptions, cfg config.Config, stdout, stderr io.Writer) (err error) {
	bcfg := bench.Config{
		Workload:    bench.Workload(o.workload),
		N:           o.n,
		Concurrency: o.concurrency,
		Signals:     o.signals,
		BaseURL:     o.addr,
		Token:       cmp.Or(o.token, os.Getenv("HARVEST_TOKEN")),
	}
	if bcfg.Workload != bench.W1 && bcfg.Workload != bench.W2 && bcfg.Workload != bench.W3 {
		return fmt.Errorf("--workload %q: want W1, W2 or W3", o.workload)
	}
	auto := o.rate == "auto"
	if o.rate != "" && !auto {
		r, err := strconv.ParseFloat(o.rate, 64)
		if err != nil || r <= 0 || math.IsInf(r, 0) {
			return fmt.Errorf("--rate %q: want a positive number of starts a second, or auto", o.rate)
		}
		bcfg.Rate = r
	}
	if o.rate != "" && bcfg.Workload == bench.W3 {
		return errors.New("--rate sends W1's or W2's starts open-loop: W3's signals follow their starts")
	}
	bcfg.MaxInFlight = o.maxInFlight
	if o.backlogKept && o.backlog == 0 {
		return errors.New("--backlog-kept says how to insert --backlog's executions: give --backlog too")
	}
	if o.addr != "" && (o.retention != 0 || o.backlog != 0 || o.sampleEvery != 0 || o.extraWorkers != 0) {
		return errors.New("--retention, --backlog, --sample-every and --extra-workers measure a stack in this process: leave --addr out")
	}
	if o.retention != 0 || o.backlog != 0 {
		bcfg.SampleEvery = cmp.Or(o.sampleEvery, 10*time.Second)
		bcfg.SampleAfter = cmp.Or(o.sampleAfter, 2*o.retention)
	} else {
		bcfg.SampleEvery, bcfg.SampleAfter = o.sampleEvery, o.sampleAfter
	}
	if o.addr != "" {
		if err := checkReachable(ctx, strings.TrimRight(o.addr, "/"), "start one with `harvest dev`, point --addr at yours, or leave --addr out to run a stack in this process"); err != nil {
			return err
		}
	}
	if o.addr == "" {
		local, cleanup, err := startBenchStack(ctx, o, cfg, stderr)
		if err != nil {
			return err
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			err = errors.Join(err, cleanup(stopCtx))
		}()
		bcfg.Local = local
		if o.backlog > 0 {
			if !o.json {
				where := "past"
				if o.backlogKept {
					where = "inside"
				}
				fmt.Fprintf(stderr, "harvest bench: inserting %d closed executions %s their retention\n", o.backlog, where)
			}
			if err := local.SeedBacklog(ctx, o.backlog, local.Stack.Topology.Shards(), !o.backlogKept); err != nil {
				return err
			}
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			if err := f.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "harvest bench: --cpuprofile: %v\n", err)
			}
		}()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if auto {
		return runRateSearch(ctx, o, bcfg, stdout, stderr)
	}
	bar := newBenchBar(o, stderr)
	if bar != nil {
		bcfg.Progress = bar.update
	}
	res, err := bench.Run(ctx, bcfg)
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		return err
	}
	if o.memProfile != "" {
		if err := writeHeapProfile(o.memProfile); err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
	}
	if err := printBench(stdout, o.json, res, func() error { return bench.WriteTable(stdout, res) }); err != nil {
		return err
	}
	if !res.OK {
		return fmt.Errorf("bench %s: a check failed", res.Workload)
	}
	return nil
}

// printBench prints what a bench found: v as one line of JSON, or the
// table table writes.
func printBench(stdout io.Writer, asJSON bool, v any, table func() error) error {
	if !asJSON {
		return table()
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", raw)
	return err
}

// runRateSearch runs --rate auto and prints what it found; it fails
// when a step could not run or failed a check other than its latency.
func runRateSearch(ctx context.Context, o benchOptions, bcfg bench.Config, stdout, stderr io.Writer) error {
	search := bench.RateSearch{P99: o.rateP99, Step: o.rateStep, From: o.rateFrom, Max: o.rateMax}
	found, err := bench.FindRate(ctx, bcfg, search, func(st bench.RateStep) {
		if !o.json {
			verdict := "held"
			if !st.Held {
				verdict = "missed: " + st.Why
			}
			fmt.Fprintf(stderr, "harvest bench: %.0f starts/s: e2e p99 %.1f ms, %s\n", st.Rate, st.Result.E2EP99Ms, verdict)
		}
	})
	if err != nil {
		return err
	}
	if err := printBench(stdout, o.json, found, func() error { return bench.WriteRateTable(stdout, found) }); err != nil {
		return err
	}
	for _, st := range found.Steps {
		for _, c := range st.Result.Checks {
			if !c.OK {
				return fmt.Errorf("bench %s at %.0f starts/s: check %s failed", found.Workload, st.Rate, c.Name)
			}
		}
	}
	return nil
}

// startBenchStack starts the stack `harvest dev` would, from the same
// configuration, on a free port and in a fresh temporary state dir; the
// cleanup stops it and removes the dir, PostgreSQL's data with it.
func startBenchStack(ctx context.Context, o benchOptions, cfg config.Config, stderr io.Writer) (*bench.Local, func(context.Context) error, error) {
	// The stack's logs would run over the progress bar and the table:
	// errors only, unless HARVEST_LOG_LEVEL asks for more.
	if os.Getenv("HARVEST_LOG_LEVEL") == "" {
		cfg.LogLevel = "error"
	}
	log := cfg.Logger(stderr)
	stateDir, err := os.MkdirTemp("", "harvest-bench-")
	if err != nil {
		return nil, nil, fmt.Errorf("state dir: %w", err)
	}
	if !o.json {
		fmt.Fprintf(stderr, "harvest bench: starting a stack in this process (state in %s)\n", stateDir)
	}
	dc, err := devConfig(cfg, log)
	if err != nil {
		_ = os.RemoveAll(stateDir)
		return nil, nil, err
	}
	dc.StateDir, dc.Addr = stateDir, "127.0.0.1:0"
	if o.retention > 0 {
		dc.Scheduler.Retention, dc.Scheduler.RetentionByWorkflow = o.retention, nil
		dc.Scheduler.StartIdempotencyWindow = min(cmp.Or(dc.Scheduler.StartIdempotencyWindow, scheduler.DefaultStartIdempotencyWindow), o.retention)
	}
	if o.stores > 1 {
		dc.Stores = nil
		for i := range o.stores {
			dc.Stores = append(dc.Stores, devstack.StoreConfig{Name: fmt.Sprintf("s%d", i), Mode: placement.Writable})
		}
	}
	local, err := bench.StartLocal(ctx, dc)
	if err != nil {
		_ = os.RemoveAll(stateDir)
		return nil, nil, err
	}
	extra, err := startOtherWorkers(ctx, local.Stack.NC(), o.extraWorkers)
	cleanup := func(ctx context.Context) error {
		var errs []error
		for _, w := range extra {
			errs = append(errs, w.Stop(ctx))
		}
		errs = append(errs, local.Stop(ctx))
		return errors.Join(append(errs, os.RemoveAll(stateDir))...)
	}
	if err != nil {
		return nil, nil, errors.Join(err, cleanup(context.WithoutCancel(ctx)))
	}
	return local, cleanup, nil
}

// startOtherWorkers starts n workers on nc's default task queue, worker
// i registering the workflow bench_other_<i> and the activity
// bench_other_<i>_activity, which no workload runs: what a fleet of
// different workers sharing the queue costs the workload.
func startOtherWorkers(ctx context.Context, nc *nats.Conn, n int) ([]*harvest.Worker, error) {
	var out []*harvest.Worker
	for i := range n {
		w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return out, fmt.Errorf("--extra-workers: %w", err)
		}
		name := fmt.Sprintf("bench_other_%d", i)
		harvest.RegisterWorkflow(w, name, func(*harvest.WorkflowContext, struct{}) (struct{}, error) { return struct{}{}, nil })
		harvest.RegisterActivity(w, name+"_activity", func(*harvest.ActivityContext, struct{}) (struct{}, error) { return struct{}{}, nil })
		if err := w.Start(ctx); err != nil {
			return out, fmt.Errorf("--extra-workers: %w", err)
		}
		out = append(out, w)
	}
	return out, nil
}

// benchBar is the progress bar on stderr.
type benchBar struct {
	bar *progressbar.ProgressBar
}

// newBenchBar returns a progress bar on stderr, or nil with --json or
// when stderr is not a terminal.
func newBenchBar(o benchOptions, stderr io.Writer) *benchBar {
	f, ok := stderr.(*os.File)
	if o.json || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return &benchBar{bar: progressbar.NewOptions(1,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionClearOnFinish(),
	)}
}

// update shows submissions and completions together as one bar.
func (b *benchBar) update(p bench.Progress) {
	total := p.Submissions + p.Expected
	if b.bar.GetMax() != total {
		b.bar.ChangeMax(total)
	}
	b.bar.Describe(fmt.Sprintf("%s submitted %d/%d, completed %d/%d", p.Workload, p.Submitted, p.Submissions, p.Completed, p.Expected))
	_ = b.bar.Set(min(p.Submitted+p.Completed, total))
}

func (b *benchBar) finish() {
	_ = b.bar.Finish()
	_ = b.bar.Clear()
}

// writeHeapProfile writes what the heap holds live after a collection,
// while the in-process stack still runs: what a long run keeps.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close() // the write's error is the one to report
		return err
	}
	return f.Close()
}
