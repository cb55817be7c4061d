// Package long holds the long-lived workflows of the scale checks of
// issue 34 (e2e/long_test.go, docs/long-workflows.md): one that receives
// many keyed signals and one that runs many activities, each returning a
// summary the test checks against what it sent. The worker binary
// (e2e/testdata/longworker) registers them. It lives under e2e/internal,
// not testdata, so that `go build ./...`, `go vet ./...` and the linters
// check it with the rest of the module.
package long

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-engine/harvest"
)

// The names the tests and the worker share. They are persisted in
// histories, so they are constants.
const (
	WorkflowSignals    = "long_signals"
	WorkflowActivities = "long_activities"
	Signal             = "item"
	Step               = "long_step"
)

// ItemBytes is about what one item signal's payload takes as JSON.
const ItemBytes = 300

// Item is the payload of one item signal: its index and a pad that makes
// it ItemBytes long and depends on the index, so that a payload mixed up
// with another's shows.
type Item struct {
	I   int    `json:"i"`
	Pad string `json:"pad"`
}

// NewItem is item i, as the test sends it.
func NewItem(i int) Item { return Item{I: i, Pad: pad(i)} }

// pad is item i's pad: its index repeated, to ItemBytes less the room the
// JSON around it takes.
func pad(i int) string {
	unit := strconv.Itoa(i) + "-"
	n := ItemBytes - 24
	return strings.Repeat(unit, n/len(unit)+1)[:n]
}

// Sum adds item i to a digest: the sum of the items' hashes, so that the
// order the signals arrive in does not change it.
func Sum(digest uint64, it Item) uint64 {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%d/%s", it.I, it.Pad)
	return digest + h.Sum64()
}

// SignalsInput is long_signals' input.
type SignalsInput struct {
	// Count is how many item signals it waits for.
	Count int `json:"count"`
}

// SignalsResult is what long_signals saw of the Count signals it
// received. Every signal exactly once is Distinct == Count with no
// duplicates or bad items, SumI and Digest those of items 0 to Count-1.
type SignalsResult struct {
	Received   int `json:"received"`
	Distinct   int `json:"distinct"`
	Duplicates int `json:"duplicates"`
	// Bad counts items with an index out of range or a pad not theirs;
	// BadSample holds the first few indexes.
	Bad       int   `json:"bad"`
	BadSample []int `json:"bad_sample,omitempty"`
	SumI      int64 `json:"sum_i"`
	// Digest is Sum over the distinct items, in hex.
	Digest string `json:"digest"`
}

// itemSignal is the signal long_signals receives.
var itemSignal = harvest.NewSignal[Item](Signal)

// Signals receives in.Count item signals and says what it saw of them.
func Signals(ctx *harvest.WorkflowContext, in SignalsInput) (SignalsResult, error) {
	var out SignalsResult
	seen := make([]bool, max(in.Count, 0))
	var digest uint64
	for out.Received < in.Count {
		it, err := itemSignal.Receive(ctx)
		if err != nil {
			return out, err
		}
		out.Received++
		switch {
		case it.I < 0 || it.I >= in.Count || it.Pad != pad(it.I):
			out.Bad++
			if len(out.BadSample) < 10 {
				out.BadSample = append(out.BadSample, it.I)
			}
		case seen[it.I]:
			out.Duplicates++
		default:
			seen[it.I] = true
			out.Distinct++
			out.SumI += int64(it.I)
			digest = Sum(digest, it)
		}
	}
	out.Digest = strconv.FormatUint(digest, 16)
	return out, nil
}

// ActivitiesInput is long_activities' input.
type ActivitiesInput struct {
	// Count is how many activities it runs; Parallel how many at a time
	// (at least 1): it schedules a batch of Parallel, waits for all of
	// them, then schedules the next.
	Count    int `json:"count"`
	Parallel int `json:"parallel"`
}

// ActivitiesResult is what long_activities got back.
type ActivitiesResult struct {
	Ran     int   `json:"ran"`
	Batches int   `json:"batches"`
	Sum     int64 `json:"sum"`
}

// StepResult is what the activity long_step returns for input i.
func StepResult(i int) int64 { return int64(i)*7 + 3 }

// Activities runs in.Count long_step activities, in.Parallel at a time,
// checks each result and adds them up.
func Activities(ctx *harvest.WorkflowContext, in ActivitiesInput) (ActivitiesResult, error) {
	var out ActivitiesResult
	batch := max(in.Parallel, 1)
	opts := harvest.ActivityOptions{StartToClose: 30 * time.Second}
	for first := 0; first < in.Count; first += batch {
		var futures []*harvest.Future
		for i := first; i < min(first+batch, in.Count); i++ {
			futures = append(futures, harvest.ExecuteActivity(ctx, Step, i, opts))
		}
		for j, f := range futures {
			var v int64
			if err := f.Get(&v); err != nil {
				return out, fmt.Errorf("step %d: %w", first+j, err)
			}
			if want := StepResult(first + j); v != want {
				return out, fmt.Errorf("step %d returned %d, want %d", first+j, v, want)
			}
			out.Ran++
			out.Sum += v
		}
		out.Batches++
	}
	return out, nil
}

// Register registers both workflows and long_step on w.
func Register(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, WorkflowSignals, Signals)
	harvest.RegisterWorkflow(w, WorkflowActivities, Activities)
	harvest.RegisterActivity(w, Step, func(_ *harvest.ActivityContext, i int) (int64, error) { return StepResult(i), nil })
}
