// Command fleetworker is a worker of a heterogeneous fleet, for the
// end-to-end tests: the worker binary, registering only the names
// FLEET_NAMES lists (comma-separated; all when unset) among the examples
// and workflows of its own: fleet_a, fleet_b, chaos_flaky, whose code
// panics for its first 1.5 s, chaos_chain, which keeps the signals it
// receives across runs it continues as new, chaos_saga (saga.go),
// which undoes its steps when it is cancelled, and chaos_family
// (family.go), which fans out child workflows. fleet_a and fleet_b each
// run the activity fleet_c; each says which worker (FLEET_ID) ran it.
package main

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/examples/fakepay"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
)

// ChainInput is chaos_chain's input, and what each of its runs passes
// the next.
type ChainInput struct {
	// Every is how many values a run takes before it continues as new.
	Every int `json:"every"`
	// Values are the values the chain's runs took so far, in order.
	Values []int `json:"values,omitempty"`
}

// chainValue is a value for chaos_chain, as a signal (values come as
// updates of the same name too); -1 ends the chain.
var chainValue = harvest.NewSignal[int]("v")

// Ran says which workers ran a fleet workflow and its activity.
type Ran struct {
	Workflow string `json:"workflow"`
	Activity string `json:"activity"`
}

func main() {
	cmd := service.Command("worker", "Run some of the example and fleet workflows from a task queue", run, service.FlagAdminAddr, service.FlagTaskQueue)
	os.Exit(service.Exit(cmd, os.Args[1:], os.Stderr))
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	var keep func(string) bool
	if names := os.Getenv("FLEET_NAMES"); names != "" {
		list := strings.Split(names, ",")
		keep = func(name string) bool { return slices.Contains(list, name) }
	}
	has := func(name string) bool { return keep == nil || keep(name) }
	me := os.Getenv("FLEET_ID")
	svc := examples.NewServices()
	if cfg.FakepayURL != "" {
		svc.PaymentsAPI = fakepay.NewClient(cfg.FakepayURL)
	}
	fleet := func(ctx *harvest.WorkflowContext, in string) (Ran, error) {
		var by string
		err := harvest.ExecuteActivity(ctx, "fleet_c", in, harvest.ActivityOptions{StartToClose: 10 * time.Second}).Get(&by)
		return Ran{Workflow: me, Activity: by}, err
	}
	return service.RunWorker(ctx, cfg, log, func(w *harvest.Worker) {
		examples.RegisterOnly(w, svc, keep)
		for _, name := range []string{"fleet_a", "fleet_b"} {
			if has(name) {
				harvest.RegisterWorkflow(w, name, fleet)
			}
		}
		if has("chaos_flaky") {
			// Workflow code that panics for its first moments, as a bad
			// deploy's does until it is fixed: its first tasks fail on
			// the worker, which reports them (wft_failed); the scheduler
			// shows the execution failing its task and dispatches it again
			// after a backoff, until one completes. Reading the clock here
			// is the point: no replay may depend on it for its decisions.
			harvest.RegisterWorkflow(w, "chaos_flaky", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				if time.Since(ctx.Info().StartTime) < 1500*time.Millisecond {
					panic("chaos_flaky: still broken")
				}
				return "recovered", nil
			})
		}
		if has("chaos_chain") {
			harvest.RegisterActivity(w, "chaos_chain_echo", func(_ *harvest.ActivityContext, v int) (int, error) { return v, nil })
			// A chain of runs under the chaos suite's faults: each run
			// takes Every values, then continues as new with the list.
			// It does not drain the channel first: values that arrived
			// while the run was deciding must move to the next run
			// (continue-as-new's carry), neither lost nor taken twice.
			harvest.RegisterWorkflow(w, "chaos_chain", func(ctx *harvest.WorkflowContext, in ChainInput) ([]int, error) {
				// Values come as signals "v" and as updates "v", each
				// answered with the values so far once it is taken.
				taken, ended := 0, false
				take := func(v int) {
					if v == -1 {
						ended = true
						return
					}
					in.Values = append(in.Values, v)
					taken++
				}
				// An update's value goes through an activity first, so that
				// its handler waits across workflow tasks: a worker killed
				// between its accept and its answer leaves the update to a
				// replay, which must run the handler on from the accept.
				if err := harvest.SetUpdateHandler(ctx, "v", func(ctx *harvest.WorkflowContext, v int) ([]int, error) {
					if err := harvest.ExecuteActivity(ctx, "chaos_chain_echo", v).Get(&v); err != nil {
						return nil, err
					}
					take(v)
					return append([]int{}, in.Values...), nil
				}); err != nil {
					return nil, err
				}
				values := chainValue.Channel(ctx)
				for {
					switch {
					case ended:
						return append([]int{}, in.Values...), nil
					case taken >= max(in.Every, 1):
						return nil, harvest.ContinueAsNew(ctx, in)
					}
					seen := taken
					if err := harvest.Await(ctx, func() bool { return values.HasPending() || taken != seen || ended }); err != nil {
						return nil, err
					}
					var v int
					ok, err := values.ReceiveAsync(&v)
					if err != nil {
						return nil, err
					}
					if ok {
						take(v)
					}
				}
			})
		}
		if has(workflowSaga) {
			registerSaga(w, svc.PaymentsAPI)
		}
		if has(workflowReset) {
			registerReset(w, svc.PaymentsAPI)
		}
		if has(workflowFamily) {
			registerFamily(w, svc.PaymentsAPI)
		}
		if has("fleet_c") {
			harvest.RegisterActivity(w, "fleet_c", func(*harvest.ActivityContext, string) (string, error) { return me, nil })
		}
	})
}
