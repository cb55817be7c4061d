package examples

import (
	"fmt"

	"github.com/harvest-engine/harvest"
)

// WorkflowTally is the name of tally, which travels on the wire.
const WorkflowTally = "tally"

// AddSignal is what tally adds up.
var AddSignal = harvest.NewSignal[int]("add")

// AddUpdate is the update that adds to tally and answers with what it
// added up so far.
const AddUpdate = "add"

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

// Tally adds up the signals "add", and the updates "add", for ever, or
// until it has Until of them, continuing as new every Every of them so
// that each run's history stays short: a subscription's counter, an
// agent's loop. Signals and updates sent to the first run's execution id
// reach the newest run; a key dedupes across all of them. An update is
// answered with the tally as it stands once it is added; its validator
// refuses a negative number, and any once the tally is complete. Its
// query state "progress" says what it has added up so far.
func Tally(ctx *harvest.WorkflowContext, in TallyInput) (TallyInput, error) {
	in.Runs++
	if err := harvest.SetQueryState(ctx, TallyProgress, in); err != nil {
		return in, err
	}
	taken := 0 // by this run
	add := func(v int) error {
		in.Total += v
		in.Count++
		taken++
		return harvest.SetQueryState(ctx, TallyProgress, in)
	}
	err := harvest.SetUpdateHandler(ctx, AddUpdate, func(_ *harvest.WorkflowContext, v int) (TallyInput, error) {
		return in, add(v)
	}, harvest.UpdateOptions{Validator: func(v int) error {
		switch {
		case v < 0:
			return fmt.Errorf("tally adds numbers from 0 up, not %d", v)
		case in.Until > 0 && in.Count >= in.Until:
			return fmt.Errorf("the tally is complete (%d numbers)", in.Count)
		}
		return nil
	}})
	if err != nil {
		return in, err
	}
	signals := AddSignal.Channel(ctx)
	for {
		if in.Until > 0 && in.Count >= in.Until {
			return in, nil
		}
		if taken >= max(in.Every, 1) {
			return in, harvest.ContinueAsNew(ctx, in)
		}
		seen := taken
		if err := harvest.Await(ctx, func() bool { return signals.HasPending() || taken != seen }); err != nil {
			return in, err
		}
		var v int
		ok, err := signals.ReceiveAsync(&v)
		if err != nil {
			return in, err
		}
		if ok {
			if err := add(v); err != nil {
				return in, err
			}
		}
	}
}
