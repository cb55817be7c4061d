package bench

import (
	"context"
	"sync"
	"time"

	"github.com/sourcegraph/conc"
)

// submitOpenLoop sends the planned starts on a fixed schedule, Rate a
// second from now, each in its own goroutine, whatever the answers do:
// start j is due j/Rate seconds in. A start whose time has come while
// MaxInFlight requests are out waits for one to end, and leaves late.
// Each record's time is when its start was due, and its latency runs
// from then to its answer, so what the stack's queueing costs a caller
// shows in the percentiles, however late the client itself was.
func (r *runner) submitOpenLoop(ctx context.Context, workflow string, plan []int) []startRec {
	recs := make([]startRec, len(plan))
	slots := make(chan struct{}, r.cfg.MaxInFlight)
	var (
		wg       conc.WaitGroup
		mu       sync.Mutex
		out, top int
	)
	begin := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for j, k := range plan {
		due := begin.Add(time.Duration(float64(j) / r.cfg.Rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				wg.Wait()
				return recs
			case <-timer.C:
			}
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return recs
		case slots <- struct{}{}:
		}
		mu.Lock()
		out++
		top = max(top, out)
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				out--
				mu.Unlock()
				<-slots
			}()
			rec := r.startOne(ctx, workflow, k, map[string]any{"i": k, "run": r.runID})
			if !rec.at.IsZero() {
				rec.lag = rec.at.Sub(due)
				rec.latency += rec.lag
				rec.at = due
			}
			recs[j] = rec
		})
	}
	wg.Wait()
	r.inFlightTop = top
	return recs
}
