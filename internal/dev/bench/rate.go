package bench

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// RateSearch configures FindRate. Zero values mean the defaults.
type RateSearch struct {
	// P99 is the end-to-end 99th percentile a rate must hold, default
	// 100 ms.
	P99 time.Duration
	// Step is how long each rate is sent for, default 10 s.
	Step time.Duration
	// From is the first rate tried, default 250 a second; Max the
	// highest, default 20,000.
	From, Max float64
	// Refine is how many halvings of the gap between the highest rate
	// that held and the lowest that did not follow the doubling, default
	// 3 (within an eighth of the gap).
	Refine int
}

func (s RateSearch) withDefaults() (RateSearch, error) {
	if s.P99 == 0 {
		s.P99 = 100 * time.Millisecond
	}
	if s.Step == 0 {
		s.Step = 10 * time.Second
	}
	if s.From == 0 {
		s.From = 250
	}
	if s.Max == 0 {
		s.Max = 20000
	}
	if s.Refine == 0 {
		s.Refine = 3
	}
	if s.P99 < 0 || s.Step < time.Second || s.From <= 0 || s.Max < s.From || s.Refine < 0 {
		return s, fmt.Errorf("bench: rate search %+v: want a positive p99, steps of at least 1s, and 0 < from <= max", s)
	}
	return s, nil
}

// RateStep is one rate FindRate tried.
type RateStep struct {
	Rate float64 `json:"rate"`
	// Held says the run passed its checks, without an error, with its
	// e2e p99 within the target; Why says what it missed otherwise.
	Held   bool    `json:"held"`
	Why    string  `json:"why,omitempty"`
	Result *Result `json:"result"`
}

// RateResult is what FindRate found.
type RateResult struct {
	Workload    Workload `json:"workload"`
	Target      string   `json:"target"`
	TargetP99Ms float64  `json:"target_e2e_p99_ms"`
	StepS       float64  `json:"step_s"`
	// SustainedRate is the highest rate tried that held, 0 when none
	// did.
	SustainedRate float64    `json:"sustained_rate"`
	Steps         []RateStep `json:"steps"`
}

// FindRate searches for the highest open-loop rate of cfg's workload (W1
// or W2) whose e2e p99 stays within s.P99: it doubles the rate from
// s.From while each step holds (up to s.Max), then halves the gap
// between the highest that held and the lowest that did not s.Refine
// times; when s.From itself does not hold, it halves down first. Each
// step is one open-loop Run of s.Step's worth of starts, against the
// same stack, after the previous one's executions have all completed.
// step, when set, is called after each.
func FindRate(ctx context.Context, cfg Config, s RateSearch, step func(RateStep)) (*RateResult, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Workload != W1 && cfg.Workload != W2 {
		return nil, fmt.Errorf("bench: a rate search runs W1 or W2, not %q", cfg.Workload)
	}
	out := &RateResult{Workload: cfg.Workload, TargetP99Ms: ms(s.P99), StepS: s.Step.Seconds()}
	try := func(rate float64) (bool, error) {
		c := cfg
		c.Rate, c.N = rate, max(1, int(rate*s.Step.Seconds()))
		res, err := Run(ctx, c)
		if err != nil {
			return false, err
		}
		out.Target = res.Target
		st := RateStep{Rate: rate, Result: res, Held: true}
		switch {
		case !res.OK || res.Errors > 0:
			st.Held, st.Why = false, fmt.Sprintf("checks failed or %d errors", res.Errors)
		case res.E2EP99Ms > ms(s.P99):
			st.Held, st.Why = false, fmt.Sprintf("e2e p99 %s ms over %s ms", num(res.E2EP99Ms), num(ms(s.P99)))
		}
		out.Steps = append(out.Steps, st)
		if st.Held {
			out.SustainedRate = max(out.SustainedRate, rate)
		}
		if step != nil {
			step(st)
		}
		return st.Held, nil
	}
	// lo held (0: none yet), hi did not (0: none yet).
	var lo, hi float64
	for rate := s.From; ; {
		held, err := try(rate)
		if err != nil {
			return out, err
		}
		if held {
			lo = rate
			if hi > 0 || rate >= s.Max {
				break
			}
			rate = min(2*rate, s.Max)
			continue
		}
		hi = rate
		if lo > 0 || rate < 2 {
			break
		}
		rate /= 2
	}
	for range s.Refine {
		if lo == 0 || hi == 0 {
			break
		}
		mid := (lo + hi) / 2
		held, err := try(mid)
		if err != nil {
			return out, err
		}
		if held {
			lo = mid
		} else {
			hi = mid
		}
	}
	return out, nil
}

// WriteRateTable writes a rate search's steps and what it found.
func WriteRateTable(w io.Writer, r *RateResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "harvest bench %s --rate auto: %s, e2e p99 within %s ms, %ss a step\n", r.Workload, r.Target, num(r.TargetP99Ms), num(r.StepS))
	fmt.Fprintf(tw, "  rate/s\tcompletions/s\tstart p50, p99 ms\te2e p50, p99 ms\tsend lag p99 ms\tin flight\t\n")
	for _, st := range r.Steps {
		res := st.Result
		lag := "-"
		if res.SendLagP99Ms != nil {
			lag = num(*res.SendLagP99Ms)
		}
		verdict := "held"
		if !st.Held {
			verdict = "missed: " + st.Why
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s, %s\t%s, %s\t%s\t%d\t%s\n", num(round(st.Rate)), num(res.CompletionsPerS),
			num(res.StartP50Ms), num(res.StartP99Ms), num(res.E2EP50Ms), num(res.E2EP99Ms), lag, res.MaxInFlightSeen, verdict)
	}
	if r.SustainedRate > 0 {
		fmt.Fprintf(tw, "sustained_rate\t%s/s\t\n", num(round(r.SustainedRate)))
	} else {
		fmt.Fprintf(tw, "sustained_rate\tnone: no rate tried held\t\n")
	}
	return tw.Flush()
}
