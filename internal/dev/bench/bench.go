package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Workload names a workload.
type Workload string

// The workloads.
const (
	W1 Workload = "W1"
	W2 Workload = "W2"
	W3 Workload = "W3"
)

// Defaults.
const (
	DefaultN           = 10000
	DefaultCollectN    = 1000
	DefaultConcurrency = 16
	// DuplicateShare is the share of W2's extra submissions (of N), and of
	// W3's signals that are sent twice.
	DuplicateShare = 0.3
	// SignalsPerCollect is how many item signals each W3 execution waits
	// for by default (Config.Signals); MaxSignalsPerCollect the most.
	SignalsPerCollect    = 10
	MaxSignalsPerCollect = 10000
	// DefaultMaxInFlight bounds an open-loop run's requests in flight.
	DefaultMaxInFlight = 2048
	// DefaultStallTimeout ends a run that makes no progress for so long.
	DefaultStallTimeout = 2 * time.Minute
)

// Config configures a run. Zero values mean the documented defaults.
type Config struct {
	// Workload is W1, W2 or W3; required.
	Workload Workload
	// N is the number of workflows: default 10,000 for W1 and W2, 1,000
	// for W3.
	N int
	// Concurrency is the number of concurrent submitters, default 16.
	// With Rate, it is unused: MaxInFlight bounds the requests instead.
	Concurrency int
	// Rate, when above 0, makes W1 and W2 open-loop, the way webhooks
	// arrive: the starts are sent Rate a second on a fixed schedule,
	// whatever the answers do, each on its own connection's turn, and
	// every latency is measured from the moment its start was due, so a
	// stack that falls behind shows it in its percentiles (no
	// coordinated omission). N is then how many starts the run sends.
	Rate float64
	// MaxInFlight bounds the requests of an open-loop run waiting for
	// their answers, default DefaultMaxInFlight: a start due while they
	// are all out is sent late, and its lateness counts in its latency
	// (Result.SendLagP99Ms says how late).
	MaxInFlight int
	// Signals is how many item signals each W3 execution waits for,
	// default 10 (SignalsPerCollect): its history grows with them, which
	// is what a signal's cost is measured against.
	Signals int
	// BaseURL is the HTTP API, such as "http://127.0.0.1:8080"; with
	// Local, default Local.URL().
	BaseURL string
	// Token is the bearer token sent with every request, for an API that
	// requires one.
	Token string
	// Local, when set, is the stack in this process: completions are read
	// from its database, and costs are measured.
	Local *Local
	// HTTPClient sends the requests; nil means a client whose transport
	// keeps Concurrency idle connections and more.
	HTTPClient *http.Client
	// Progress, when set, is called about ten times a second from one
	// goroutine, and once at the end.
	Progress func(Progress)
	// StallTimeout ends the run with an error when neither a submission
	// nor a completion happens for so long, default 2 minutes.
	StallTimeout time.Duration
	// Seed makes the choice of duplicates repeatable; 0 means 1.
	Seed uint64
	// SampleEvery, with Local, samples every table's row count and size
	// that often over the run (Result.TableSizes), and SampleAfter more
	// after its last completion, to see what retention keeps.
	SampleEvery time.Duration
	SampleAfter time.Duration
}

// Progress is how far a run has come.
type Progress struct {
	Workload Workload
	// Submitted of Submissions requests have been answered.
	Submitted, Submissions int
	// Completed of Expected executions have closed.
	Completed, Expected int
}

// Check is one verification of a run.
type Check struct {
	Name string `json:"name"`
	Want int64  `json:"want"`
	Got  int64  `json:"got"`
	OK   bool   `json:"ok"`
}

// Result is what a run measured. The JSON names are those of issue 7;
// figures that a run cannot measure (costs against a remote stack) are
// null.
type Result struct {
	Workload    Workload `json:"workload"`
	N           int      `json:"n"`
	Concurrency int      `json:"concurrency"`
	// Rate is an open-loop run's target rate of starts a second
	// (Config.Rate); absent for a closed-loop run, whose Concurrency
	// submitters each wait for their answer.
	Rate *float64 `json:"rate,omitempty"`
	// SendLagP99Ms is, for an open-loop run, the 99th percentile of how
	// late the starts left after they were due (the client's own lag,
	// or MaxInFlight reached); MaxInFlightSeen the most requests out at
	// once.
	SendLagP99Ms    *float64 `json:"send_lag_p99_ms,omitempty"`
	MaxInFlightSeen int      `json:"max_in_flight,omitempty"`
	// Target is "in-process" or the remote API's URL.
	Target string `json:"target"`
	// Submissions counts start and signal requests.
	Submissions     int     `json:"submissions"`
	SubmitsPerS     float64 `json:"submits_per_s"`
	CompletionsPerS float64 `json:"completions_per_s"`
	StartP50Ms      float64 `json:"start_p50_ms"`
	StartP99Ms      float64 `json:"start_p99_ms"`
	// SignalP50Ms and SignalP99Ms are W3's signal calls.
	SignalP50Ms        *float64 `json:"signal_p50_ms,omitempty"`
	SignalP99Ms        *float64 `json:"signal_p99_ms,omitempty"`
	E2EP50Ms           float64  `json:"e2e_p50_ms"`
	E2EP99Ms           float64  `json:"e2e_p99_ms"`
	DistinctExecutions int      `json:"distinct_executions"`
	// Completed counts executions that closed as Completed.
	Completed    int   `json:"completed"`
	ActivityRuns int64 `json:"activity_runs"`
	// ActivityRunsSource says how ActivityRuns was measured: "worker"
	// (the in-process worker's count of calls of the activity function) or
	// "history" (ActivityCompleted events of the run's executions).
	ActivityRunsSource string `json:"activity_runs_source"`
	// DuplicatesDetected counts answers that reported a duplicate: starts
	// with "deduplicated": true, signals with "signal_delivered": false.
	DuplicatesDetected int `json:"duplicates_detected"`
	// Errors counts transport errors and non-2xx answers.
	Errors int `json:"errors"`
	// ErrorSamples are the first few errors.
	ErrorSamples []string `json:"error_samples,omitempty"`
	// CPUS and PeakRSSMB are this process's (stack and bench client
	// together) when in-process: CPU time over the run, peak RSS over
	// the process's life.
	CPUS      *float64 `json:"cpu_s"`
	PeakRSSMB *float64 `json:"peak_rss_mb"`
	// PostgresCPUS is the private PostgreSQL's CPU time over the run.
	PostgresCPUS *float64 `json:"postgres_cpu_s"`
	// Costs per workflow (per execution), over the run.
	SQLStatementsPerWorkflow     *float64 `json:"sql_statements_per_workflow"`
	TransactionsPerWorkflow      *float64 `json:"transactions_per_workflow"`
	JetStreamMessagesPerWorkflow *float64 `json:"jetstream_messages_per_workflow"`
	// JetStreamMessagesPerStream splits JetStreamMessagesPerWorkflow by
	// stream.
	JetStreamMessagesPerStream map[string]float64 `json:"jetstream_messages_per_workflow_by_stream,omitempty"`
	// DurationS runs from the first submission to the last completion.
	DurationS float64 `json:"duration_s"`
	// TableSizes are the tables' rows and bytes over the run, with
	// SampleEvery.
	TableSizes []TableSample `json:"table_sizes,omitempty"`
	Checks     []Check       `json:"checks"`
	// OK is true when every check passed.
	OK bool `json:"ok"`
}

// ErrStalled is returned when a run makes no progress for StallTimeout.
var ErrStalled = errors.New("bench: no progress")

func (c Config) withDefaults() (Config, error) {
	switch c.Workload {
	case W1, W2:
		if c.N == 0 {
			c.N = DefaultN
		}
	case W3:
		if c.N == 0 {
			c.N = DefaultCollectN
		}
		if c.Signals == 0 {
			c.Signals = SignalsPerCollect
		}
		if c.Signals < 1 || c.Signals > MaxSignalsPerCollect {
			return c, fmt.Errorf("bench: Signals %d: want 1 to %d", c.Signals, MaxSignalsPerCollect)
		}
	default:
		return c, fmt.Errorf("bench: Workload %q: want W1, W2 or W3", c.Workload)
	}
	if c.N < 1 {
		return c, fmt.Errorf("bench: N %d: want at least 1", c.N)
	}
	if c.Rate < 0 || (c.Rate > 0 && c.Workload == W3) {
		return c, fmt.Errorf("bench: Rate %v: want a positive rate of W1 or W2 starts a second, or 0 for a closed loop", c.Rate)
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxInFlight < 1 {
		return c, fmt.Errorf("bench: MaxInFlight %d: want at least 1", c.MaxInFlight)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Concurrency < 1 {
		return c, fmt.Errorf("bench: Concurrency %d: want at least 1", c.Concurrency)
	}
	if c.BaseURL == "" && c.Local != nil {
		c.BaseURL = c.Local.URL()
	}
	if c.BaseURL == "" {
		return c, errors.New("bench: BaseURL is required without Local")
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c, nil
}

// Run runs the configured workload and returns what it measured. A run
// whose checks fail is still a Result (OK false), not an error; errors
// are for runs that could not finish.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r, err := newRunner(cfg)
	if err != nil {
		return nil, err
	}
	defer r.close()
	return r.run(ctx)
}
