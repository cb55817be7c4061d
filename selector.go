package harvest

import "github.com/harvest-engine/harvest/api"

// Selector waits on several signal channels, workflow channels, timers
// and activity futures at once. Select runs the callback of the case that
// became ready first, as the workflow saw its history, so it picks the
// same case on every replay; with a default case it never blocks.
type Selector struct {
	x     *execution
	cases []selectCase
	dflt  func()
}

type selectCase struct {
	ready func() (int, bool) // when the case became ready (a tick), if it is
	run   func()
	wait  api.WaitCase
}

// NewSelector returns an empty selector.
func NewSelector(ctx *WorkflowContext) *Selector { return &Selector{x: ctx.x} }

// AddReceive adds a case that is ready when c has a signal; fn must
// receive it.
func (s *Selector) AddReceive(c *SignalChannel, fn func(c *SignalChannel)) *Selector {
	s.cases = append(s.cases, selectCase{ready: c.readyTick, run: func() { fn(c) }, wait: c.wait()})
	return s
}

// AddChannel adds a case that is ready when c, a channel made with
// NewChannel, has a value to receive or is closed; fn must receive it.
// c may also be a WorkflowContext's Done, ready once the execution's
// cancellation is visible (and staying so: fn receives nothing).
func (s *Selector) AddChannel(c ReceiveChannel, fn func()) *Selector {
	s.cases = append(s.cases, selectCase{ready: c.readyTick, run: fn, wait: c.wait()})
	return s
}

// AddFuture adds a case that is ready when the activity has finished, or
// was given up for the execution's cancellation.
func (s *Selector) AddFuture(f *Future, fn func(f *Future)) *Selector {
	s.cases = append(s.cases, selectCase{ready: f.readyTick, run: func() { fn(f) }, wait: f.wait()})
	return s
}

// AddTimer adds a case that is ready when the timer has fired, or the
// execution's cancellation cancelled it (Timer.Wait then returns a
// canceled error). A timer cancelled with Timer.Cancel is never ready.
func (s *Selector) AddTimer(t *Timer, fn func(t *Timer)) *Selector {
	s.cases = append(s.cases, selectCase{ready: t.readyTick, run: func() { fn(t) }, wait: t.wait()})
	return s
}

// AddDefault adds the case that runs when no other case is ready, so
// that Select does not block.
func (s *Selector) AddDefault(fn func()) *Selector {
	s.dflt = fn
	return s
}

// ready returns the case that became ready first (the first added of
// those that became ready together), or -1.
func (s *Selector) ready() int {
	best, bestTick := -1, 0
	for i, c := range s.cases {
		if tick, ok := c.ready(); ok && (best < 0 || tick < bestTick) {
			best, bestTick = i, tick
		}
	}
	return best
}

// Select blocks until a case is ready, then runs the one that became
// ready first; with a default case and none ready, it runs the default.
func (s *Selector) Select() {
	i := s.ready()
	if i < 0 && s.dflt != nil {
		s.dflt()
		return
	}
	s.x.d.block(s.wait(), func() bool { i = s.ready(); return i >= 0 })
	s.cases[i].run()
}

// wait is what a Select waits for: the first api.MaxWaits cases.
func (s *Selector) wait() api.Wait {
	w := api.Wait{WaitCase: api.WaitCase{Kind: api.WaitSelector}, Cases: make([]api.WaitCase, 0, min(len(s.cases), api.MaxWaits))}
	for _, c := range s.cases[:min(len(s.cases), api.MaxWaits)] {
		w.Cases = append(w.Cases, c.wait)
	}
	return w
}

// HasPending says whether Select would run a case other than the
// default without blocking.
func (s *Selector) HasPending() bool { return s.ready() >= 0 }
