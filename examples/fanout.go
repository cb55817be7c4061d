package examples

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/harvest-engine/harvest"
)

// Names of fanout's workflow and activity; they travel on the wire.
const (
	WorkflowFanout = "fanout"
	ActivitySquare = "square"
)

// Square is the typed definition of the square activity, shared by its
// registration and the workflow that calls it.
var Square = harvest.NewActivity[int, int](ActivitySquare)

// FanoutInput is the input of fanout.
type FanoutInput struct {
	Items []int `json:"items"`
	// Deadline is a Go duration, such as "30s": the batch gives up on
	// the squares not done by then.
	Deadline string `json:"deadline"`
}

// FanoutResult is the result of fanout.
type FanoutResult struct {
	// Version is the version of fanout's batch ids the execution took
	// (harvest.GetVersion): 1 since they became 8 random bytes, recorded
	// in its history the first time it ran.
	Version int `json:"version"`
	// BatchID is a random id drawn once for the batch, recorded in its
	// history (harvest.SideEffect).
	BatchID string `json:"batch_id"`
	// Squares are the items' squares in the items' order; Done counts
	// those computed before the deadline (a missing one is 0).
	Squares  []int `json:"squares"`
	Done     int   `json:"done"`
	Sum      int   `json:"sum"`
	TimedOut bool  `json:"timed_out"`
	// StartedAt is the workflow's time when it began (harvest.Now).
	StartedAt time.Time `json:"started_at"`
}

// Fanout squares its items in parallel and sums them, or gives up on
// those not done by its deadline. It shows the determinism helpers:
// workflow goroutines (harvest.Go) and a channel between them, a Selector
// over that channel and a timer, the timer cancelled once every square is
// in, a random id drawn once (harvest.SideEffect) under a recorded
// version (harvest.GetVersion), the workflow's time
// (harvest.Now) and its replay-safe logger. Every replay of it decides as
// its first run did.
func Fanout(ctx *harvest.WorkflowContext, in FanoutInput) (FanoutResult, error) {
	deadline, err := time.ParseDuration(in.Deadline)
	if err != nil {
		return FanoutResult{}, harvest.NewNonRetryableError("invalid_input", "deadline %q: %v", in.Deadline, err)
	}
	out := FanoutResult{
		Version: harvest.GetVersion(ctx, "fanout-batch-id", harvest.DefaultVersion, 1),
		BatchID: harvest.SideEffect(ctx, func() string {
			b := make([]byte, 8)
			_, _ = rand.Read(b) // never fails (crypto/rand)
			return hex.EncodeToString(b)
		}),
		Squares:   make([]int, len(in.Items)),
		StartedAt: harvest.Now(ctx),
	}
	type square struct{ i, v int }
	results := harvest.NewChannel[square](ctx)
	for i, item := range in.Items {
		harvest.Go(ctx, func(ctx *harvest.WorkflowContext) {
			v, err := Square.Execute(ctx, item).Get()
			if err != nil {
				v = 0
			}
			results.Send(ctx, square{i, v})
		})
	}
	timer := harvest.NewTimer(ctx, deadline)
	for out.Done < len(in.Items) && !out.TimedOut {
		harvest.NewSelector(ctx).
			AddChannel(results, func() {
				r, _ := results.Receive(ctx)
				out.Squares[r.i] = r.v
				out.Sum += r.v
				out.Done++
			}).
			AddTimer(timer, func(*harvest.Timer) { out.TimedOut = true }).
			Select()
	}
	timer.Cancel()
	ctx.Logger().Info("batch done", "batch_id", out.BatchID, "done", out.Done, "timed_out", out.TimedOut)
	return out, nil
}

// registerFanout registers fanout and its activity on w.
func registerFanout(r registrar) {
	workflow(r, WorkflowFanout, Fanout)
	if !r.has(Square.Name()) {
		return
	}
	Square.Register(r.w, func(_ *harvest.ActivityContext, n int) (int, error) {
		const most = 3_037_000_499 // the square of a larger int overflows
		if n > most || n < -most {
			return 0, harvest.NewNonRetryableError("invalid_input", "%d squared overflows", n)
		}
		return n * n, nil
	}, harvest.ActivityOptions{StartToClose: 10 * time.Second})
}
