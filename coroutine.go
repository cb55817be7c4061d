package harvest

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Workflow code runs as coroutines: the workflow function and each
// goroutine it starts with Go run on goroutines of their own, but one at
// a time, each until it blocks on something the history has not given
// it yet (a result, a signal, a timer, a condition). A dispatcher runs
// them in the order they were started, again and again, until none can
// move; the decisions they took are the workflow task's. Between tasks
// they stay parked where they blocked, and the next task, given what the
// history added, lets them go on. So workflow code is never unwound
// while it runs: a deferred function runs when its function returns.
//
// Only when an execution leaves the worker (evicted from its cache, its
// task taken by another worker, the worker stopping) are its parked
// coroutines ended, with runtime.Goexit: their deferred functions run
// then, with every workflow call inert (it decides nothing and never
// blocks). The next task of the execution replays the history into new
// coroutines.

// coroutine is one goroutine of workflow code.
type coroutine struct {
	name string
	// resume wakes the parked goroutine: true to go on, false to end.
	resume chan bool
	// cond is what the coroutine waits for while it is parked; the
	// dispatcher calls it (the coroutine being parked) to know whether
	// to resume it.
	cond func() bool
	// wait says what cond waits for, for the execution's Waiting.
	wait     api.Wait
	started  bool
	finished bool
}

// dispatcher runs an execution's coroutines one at a time.
type dispatcher struct {
	coros []*coroutine
	// yield is how the running coroutine hands control back: it blocked,
	// or ended.
	yield chan struct{}
	// current is the coroutine running now, nil between.
	current *coroutine
	// closing says the coroutines are being ended: workflow calls are
	// inert.
	closing bool
	// panicked is the first panic of workflow code: the workflow task
	// fails with it.
	panicked *wire.Failure
	// done says the workflow function returned: nothing else runs.
	done bool
	// steps counts the times a coroutine was resumed to go on.
	steps int
}

func newDispatcher() *dispatcher {
	return &dispatcher{yield: make(chan struct{})}
}

// spawn adds a coroutine running fn; it first runs in the dispatcher's
// next pass.
func (d *dispatcher) spawn(name string, fn func()) {
	c := &coroutine{name: name, resume: make(chan bool)}
	d.coros = append(d.coros, c)
	go func() {
		defer func() {
			if p := recover(); p != nil && d.panicked == nil && !d.closing {
				typ := "panic"
				if t, ok := p.(interface{ failureType() string }); ok {
					typ = t.failureType()
				}
				d.panicked = &wire.Failure{Message: fmt.Sprintf("%s: %v", c.name, p), Type: typ, Stack: string(debug.Stack())}
			}
			c.finished = true
			d.yield <- struct{}{}
		}()
		if !<-c.resume {
			runtime.Goexit()
		}
		c.started = true
		fn()
	}()
}

// run resumes every coroutine that can move, in the order they were
// started, until none can, a panic stopped workflow code, or the
// workflow function returned.
func (d *dispatcher) run() {
	for {
		moved := false
		for i := 0; i < len(d.coros); i++ { // coroutines spawned meanwhile run in this pass
			c := d.coros[i]
			if c.finished || (c.started && !d.ready(c)) {
				if d.panicked != nil {
					return
				}
				continue
			}
			d.step(c, true)
			moved = true
			if d.panicked != nil || d.done {
				return
			}
		}
		d.coros = compact(d.coros)
		if !moved {
			return
		}
	}
}

// ready says whether c's condition holds. A condition that panics (one
// that makes a blocking workflow call, say) fails the workflow task as
// a panic of workflow code does.
func (d *dispatcher) ready(c *coroutine) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			d.panicked = &wire.Failure{Message: fmt.Sprintf("%s: a wait's condition panicked: %v", c.name, p), Type: "panic", Stack: string(debug.Stack())}
			ok = false
		}
	}()
	return c.cond()
}

// step hands control to c until it blocks or ends.
func (d *dispatcher) step(c *coroutine, goOn bool) {
	if goOn {
		d.steps++
	}
	d.current = c
	c.resume <- goOn
	<-d.yield
	d.current = nil
}

// block parks the running coroutine until cond holds. While the
// dispatcher is closing it ends the coroutine instead: its deferred
// functions run, and the workflow calls they make decide nothing.
func (d *dispatcher) block(wait api.Wait, cond func() bool) {
	c := d.current
	if c == nil {
		panic("harvest: a blocking workflow call outside the workflow's goroutines: in a condition of Await, or in a goroutine started with go rather than harvest.Go")
	}
	for !cond() {
		if d.closing {
			runtime.Goexit()
		}
		c.cond, c.wait = cond, wait
		d.yield <- struct{}{}
		if !<-c.resume {
			runtime.Goexit()
		}
	}
	c.cond, c.wait = nil, api.Wait{}
}

// waits are what the parked coroutines wait for, in the order they were
// started: the first api.MaxWaits.
func (d *dispatcher) waits() []api.Wait {
	out := []api.Wait{}
	for _, c := range d.coros {
		if c.finished || c.cond == nil {
			continue
		}
		if len(out) == api.MaxWaits {
			break
		}
		w := c.wait
		w.Goroutine = c.name
		out = append(out, w)
	}
	return out
}

// close ends every coroutine that has not ended, in the order they were
// started, and returns once their goroutines are gone.
func (d *dispatcher) close() {
	d.closing = true
	for _, c := range d.coros {
		if !c.finished {
			d.step(c, false)
		}
	}
	d.coros = nil
}

func compact(cs []*coroutine) []*coroutine {
	out := cs[:0]
	for _, c := range cs {
		if !c.finished {
			out = append(out, c)
		}
	}
	clear(cs[len(out):])
	return out
}
