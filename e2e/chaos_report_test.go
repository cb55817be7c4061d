//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// chaosSummary adds up the trials of a run, per fault kind.
type chaosSummary struct {
	seed         uint64
	config       trialConfig
	kinds        []faultKind
	ackWait      time.Duration // the workers' task ack wait
	leaseTTL     time.Duration // the schedulers' lease TTL
	natsNodes    int           // 1, or the NATS cluster's size (and replicas)
	elapsed      time.Duration
	stoppedEarly string

	mu     sync.Mutex
	trials []*trialResult
}

func (s *chaosSummary) add(r *trialResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trials = append(s.trials, r)
}

// kindSummary is one fault kind's row.
type kindSummary struct {
	Kind           string        `json:"kind"`
	Trials         int           `json:"trials"`
	Failed         int           `json:"failed"`
	Keys           int           `json:"keys"`
	Acked          int           `json:"acknowledged"`
	Unacked        int           `json:"unacknowledged"`
	Executions     int           `json:"executions"`
	Lost           int           `json:"lost"`
	DupExecutions  int           `json:"duplicated_executions"`
	DupEffects     int           `json:"duplicated_effects"`
	Stuck          int           `json:"stuck"`
	Other          int           `json:"other_violations"`
	Crashes        int           `json:"exits_no_fault_caused"`
	Escalated      int           `json:"sigterms_escalated"`
	Faults         int           `json:"faults"`
	Converged      int           `json:"converged"`
	PoisonRefused  int           `json:"poison_refused"`
	PoisonSetAside int           `json:"poison_set_aside"`
	ConvergenceP50 time.Duration `json:"convergence_p50_ns"`
	ConvergenceMax time.Duration `json:"convergence_max_ns"`
	// ReadyMax is the longest any trial's processes took to all say
	// ready after its commands were applied.
	ReadyMax time.Duration `json:"ready_max_ns"`
}

func (s *chaosSummary) byKind() []kindSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []kindSummary
	for _, k := range s.kinds {
		row := kindSummary{Kind: k.String()}
		var conv []time.Duration
		for _, r := range s.trials {
			if r.Kind != row.Kind {
				continue
			}
			row.Trials++
			if r.failed() {
				row.Failed++
			}
			row.Keys += r.Keys
			row.Acked += r.Acked
			row.Unacked += r.Unacked
			row.Executions += r.Executions
			row.Lost += r.Lost
			row.DupExecutions += r.DupExecutions
			row.DupEffects += r.DupEffects
			row.Stuck += r.Stuck
			row.Other += r.Other
			row.PoisonRefused += r.PoisonRefused
			row.PoisonSetAside += r.PoisonSetAside
			row.Crashes += len(r.Crashes)
			row.Faults += len(r.Faults)
			for _, f := range r.Faults {
				if f.Escalated {
					row.Escalated++
				}
			}
			if r.Converged {
				conv = append(conv, r.Convergence)
				row.ReadyMax = max(row.ReadyMax, r.ReadyAfter)
			}
		}
		row.Converged = len(conv)
		if len(conv) > 0 {
			slices.Sort(conv)
			row.ConvergenceP50 = conv[(len(conv)-1)/2]
			row.ConvergenceMax = conv[len(conv)-1]
		}
		if row.Trials > 0 {
			out = append(out, row)
		}
	}
	return out
}

func seconds(d time.Duration, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// markdown renders the summary as a table to paste into docs.
func (s *chaosSummary) markdown() string {
	var b strings.Builder
	c := s.config
	nats := "one NATS server (nats_replicas 1)"
	if s.natsNodes > 1 {
		nats = fmt.Sprintf("a %d-node NATS cluster (nats_replicas %d; a NATS fault hits any node)", s.natsNodes, s.natsNodes)
	}
	fmt.Fprintf(&b, "%s; seed %d; per trial %d keyed charge starts (about a third sent twice at once, a third again later, through both ingests) over %s, 1 to %d fault(s), downtime up to %s, SIGTERM grace %s, bound %s; task ack wait %s, lease TTL %s; %s in all.\n\n",
		nats, s.seed, c.keys, c.load, c.faults, c.downtime, c.grace, c.bound, s.ackWait, s.leaseTTL, s.elapsed.Round(time.Second))
	b.WriteString("| fault | trials | failed | acknowledged starts | lost | duplicated executions | duplicated effects | stuck | other violations | unacknowledged | exits no fault caused | SIGTERM escalated | poison refused / set aside | convergence p50 | convergence max | all ready after (max) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range s.byKind() {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d / %d | %s | %s | %s |\n",
			r.Kind, r.Trials, r.Failed, r.Acked, r.Lost, r.DupExecutions, r.DupEffects, r.Stuck, r.Other, r.Unacked, r.Crashes, r.Escalated,
			r.PoisonRefused, r.PoisonSetAside, seconds(r.ConvergenceP50, r.Converged), seconds(r.ConvergenceMax, r.Converged), seconds(r.ReadyMax, r.Converged))
	}
	s.mu.Lock()
	var failed []string
	for _, r := range s.trials {
		if r.failed() {
			failed = append(failed, fmt.Sprintf("- %s trial %d, seed %d: %s", r.Kind, r.Trial, r.Seed, strings.Join(r.Violations, "; ")))
		}
	}
	s.mu.Unlock()
	if len(failed) > 0 {
		fmt.Fprintf(&b, "\nFailed trials:\n%s\n", strings.Join(failed, "\n"))
	}
	if s.stoppedEarly != "" {
		fmt.Fprintf(&b, "\nIncomplete: %s.\n", s.stoppedEarly)
	}
	return b.String()
}

// write writes the summary to path: JSON (with every trial) if it ends in
// .json, else markdown.
func (s *chaosSummary) write(path string) error {
	var data []byte
	if strings.HasSuffix(path, ".json") {
		s.mu.Lock()
		trials := slices.Clone(s.trials)
		s.mu.Unlock()
		var err error
		data, err = json.MarshalIndent(map[string]any{
			"seed": s.seed, "keys_per_trial": s.config.keys, "load_ns": s.config.load, "max_faults": s.config.faults,
			"max_downtime_ns": s.config.downtime, "grace_ns": s.config.grace, "bound_ns": s.config.bound,
			"task_ack_wait_ns": s.ackWait, "lease_ttl_ns": s.leaseTTL, "nats_nodes": s.natsNodes,
			"elapsed_ns": s.elapsed, "stopped_early": s.stoppedEarly, "kinds": s.byKind(), "trials": trials,
		}, "", "  ")
		if err != nil {
			return fmt.Errorf("encode the report: %w", err)
		}
	} else {
		data = []byte(s.markdown())
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}
