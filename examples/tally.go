package examples

import "github.com/harvest-engine/harvest"

// WorkflowTally is the name of tally, which travels on the wire.
const WorkflowTally = "tally"

// AddSignal is what tally adds up.
var AddSignal = harvest.NewSignal[int]("add")

// TallyInput is tally's input, and what each run passes the next.
type TallyInput struct {
	// Every is how many signals a run takes before it continues as new
	// (at least 1).
	Every int `json:"every"`
	// Until is how many signals in all the chain takes before it
	// returns; 0: never.
	Until int `json:"until"`
	// Total, Count and Runs are what the runs so far added up: the sum
	// of the signals, how many, and how many runs took them.
	Total int `json:"total"`
	Count int `json:"count"`
	Runs  int `json:"runs"`
}

// TallyProgress is the name of tally's query state: what it added up so
// far, a TallyInput, readable while it runs.
const TallyProgress = "progress"

// Tally adds up the signals "add" for ever, or until it has Until of
// them, continuing as new every Every signals so that each run's history
// stays short: a subscription's counter, an agent's loop. Signals sent
// to the first run's execution id reach the newest run; a key dedupes
// across all of them. Its query state "progress" says what it has added
// up so far.
func Tally(ctx *harvest.WorkflowContext, in TallyInput) (TallyInput, error) {
	in.Runs++
	if err := harvest.SetQueryState(ctx, TallyProgress, in); err != nil {
		return in, err
	}
	for range max(in.Every, 1) {
		v, err := AddSignal.Receive(ctx)
		if err != nil {
			return in, err
		}
		in.Total += v
		in.Count++
		if err := harvest.SetQueryState(ctx, TallyProgress, in); err != nil {
			return in, err
		}
		if in.Until > 0 && in.Count >= in.Until {
			return in, nil
		}
	}
	return in, harvest.ContinueAsNew(ctx, in)
}
