// Package workflows is workflow code with one case of each rule, and the
// cases the analyzer must leave alone.
package workflows

import (
	crand "crypto/rand"
	"fmt"
	"maps"
	"math/rand"
	randv2 "math/rand/v2"
	"slices"
	"time"

	"example.com/helper"
	"github.com/harvest-engine/harvest"
)

var (
	total int
	seen  = map[string]bool{}
)

func register(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, "clock", clock)
	harvest.RegisterWorkflow(w, "literal", func(ctx *harvest.WorkflowContext, in int) (int, error) {
		time.Sleep(time.Second) // want `workflow code calls time.Sleep: use harvest.Sleep\(ctx, d\), a durable timer`
		return in, nil
	})
	// Activity code may do all of this.
	harvest.RegisterActivity(w, "fetch", func(ctx *harvest.ActivityContext, in int) (int, error) {
		time.Sleep(time.Second)
		total++
		go func() {}()
		return rand.Intn(in), nil
	})
}

func clock(ctx *harvest.WorkflowContext, _ struct{}) (time.Duration, error) {
	start := time.Now()          // want `workflow code calls time.Now: use harvest.Now\(ctx\), the workflow task's time`
	_ = time.Since(start)        // want `workflow code calls time.Since: use harvest.Now\(ctx\).Sub\(t\)`
	_ = time.Until(start)        // want `workflow code calls time.Until: use t.Sub\(harvest.Now\(ctx\)\)`
	t := time.NewTimer(0)        // want `workflow code calls time.NewTimer: use harvest.NewTimer\(ctx, d\)`
	tick := time.NewTicker(1)    // want `workflow code calls time.NewTicker: use harvest.NewTimer\(ctx, d\), a durable timer, once per tick`
	_ = time.Tick(1)             // want `workflow code calls time.Tick: use harvest.NewTimer`
	time.AfterFunc(1, func() {}) // want `workflow code calls time.AfterFunc: use harvest.Go\(ctx, ...\) with a goroutine that calls harvest.Sleep\(ctx, d\) first`
	<-time.After(1)              // want `workflow code receives from a Go channel: use harvest.NewChannel` `workflow code calls time.After: use harvest.NewTimer\(ctx, d\), a durable timer \(Wait on it`
	now := time.Now              // want `workflow code uses time.Now: use harvest.Now\(ctx\)`
	_, _, _ = t, tick, now
	// What workflow code uses instead, and time's pure functions.
	harvest.Sleep(ctx, time.Second)
	harvest.NewTimer(ctx, time.Minute).Wait()
	d, _ := time.ParseDuration("1s")
	return harvest.Now(ctx).Sub(harvest.Now(ctx).Add(d)), nil
}

func random(ctx *harvest.WorkflowContext, b []byte) (int, error) {
	n := rand.Intn(10)               // want `workflow code calls math/rand.Intn: use harvest.SideEffect\(ctx, func\(\) T {...}\), which runs once and records its value for every replay`
	n += randv2.IntN(10)             // want `workflow code calls math/rand/v2.IntN: use harvest.SideEffect`
	r := rand.New(rand.NewSource(1)) // want `workflow code calls math/rand.New: use` `workflow code calls math/rand.NewSource: use`
	n += r.Intn(2)                   // want `workflow code calls math/rand.Rand.Intn: use harvest.SideEffect`
	_, _ = crand.Read(b)             // want `workflow code calls crypto/rand.Read: use harvest.SideEffect`
	_ = crand.Reader                 // want `workflow code uses crypto/rand.Reader: use harvest.SideEffect`
	// A SideEffect's function runs once and is recorded: nothing in it is
	// reported, nor a function value given to it.
	n += harvest.SideEffect(ctx, func() int {
		total++
		go func() {}()
		return rand.Intn(10) + int(time.Now().Unix())
	})
	_ = harvest.SideEffect(ctx, time.Now)
	return n, nil
}

func goroutines(ctx *harvest.WorkflowContext, _ struct{}) (int, error) {
	go fmt.Println("hello") // want `workflow code starts a goroutine with the go statement: use harvest.Go\(ctx, func\(ctx \*harvest.WorkflowContext\) {...}\), which a replay schedules in the same order`
	ch := make(chan int, 1)
	ch <- 1             // want `workflow code sends on a Go channel: use harvest.NewChannel\[T\]\(ctx\) \(Send, Receive\) and harvest.NewSelector\(ctx\)`
	n := <-ch           // want `workflow code receives from a Go channel: use harvest.NewChannel`
	for v := range ch { // want `workflow code ranges over a Go channel: use harvest.NewChannel`
		n += v
	}
	select { // want `workflow code uses a select statement: use harvest.NewChannel\[T\]\(ctx\) \(Send, Receive\) and harvest.NewSelector\(ctx\)`
	case v := <-ch:
		n += v
	case ch <- 2:
	default:
	}
	// A workflow goroutine is workflow code of its own, checked once.
	harvest.Go(ctx, func(ctx *harvest.WorkflowContext) {
		time.Sleep(time.Second) // want `workflow code calls time.Sleep: use harvest.Sleep`
	})
	c := harvest.NewChannel[int](ctx)
	harvest.Go(ctx, func(ctx *harvest.WorkflowContext) { c.Send(ctx, 1) })
	v, _ := c.Receive(ctx)
	return n + v, nil
}

func globals(ctx *harvest.WorkflowContext, in int) (int, error) {
	total++          // want `workflow code writes package-level variable workflows.total: keep workflow state in local variables: a package-level variable is shared by every execution in the process and keeps its value across replays`
	total += in      // want `workflow code writes package-level variable workflows.total`
	seen["x"] = true // want `workflow code writes package-level variable workflows.seen`
	a, total := 1, 2 // a new total, local: not reported
	var b int
	b, total = 3, 4 // the local one again
	_ = seen["y"]   // reading is not writing
	return a + b + total, nil
}

func writesGlobal(ctx *harvest.WorkflowContext, in int) (int, error) {
	var a int
	a, total = in, in // want `workflow code writes package-level variable workflows.total`
	return a, nil
}

func maps_(ctx *harvest.WorkflowContext, m map[string]int) ([]string, error) {
	for k := range m { // want `workflow code ranges over a map whose loop calls harvest.ExecuteActivity: range over sorted keys instead, for _, k := range slices.Sorted\(maps.Keys\(m\)\): map order changes from run to run`
		harvest.ExecuteActivity(ctx, k, nil)
	}
	for k := range m { // want `workflow code ranges over a map whose loop calls helper.Step, which calls harvest.ExecuteActivity: range over sorted keys`
		_ = helper.Step(ctx, k)
	}
	for k := range m { // want `workflow code ranges over a map whose loop calls workflows.notify, which calls harvest.Sleep`
		notify(ctx, k)
	}
	for k := range maps.Keys(m) { // want `workflow code ranges over a map whose loop calls harvest.Signal.Receive`
		_, _ = harvest.NewSignal[int](k).Receive(ctx)
	}
	for k, v := range m { // want `workflow code ranges over a map whose loop returns`
		if v > 1 {
			return []string{k}, nil
		}
	}
	var first string
	for k, v := range m { // want `workflow code ranges over a map whose loop leaves the loop on a condition`
		if v > 0 {
			first = k
			break
		}
	}
	var names []string
	for k := range m { // want `workflow code ranges over a map whose loop appends to names, declared outside the loop`
		names = append(names, k)
	}
	futures := map[string]*harvest.Future{}
	for _, f := range futures { // want `workflow code ranges over a map whose loop calls helper.Await, which calls harvest.Future.Get`
		_ = helper.Await(f)
	}

outer:
	for range 2 {
		for _, v := range m { // want `workflow code ranges over a map whose loop leaves the loop on a condition`
			if v > 0 {
				continue outer
			}
		}
	}

	// Loops whose result is the same in any order.
	sum, count, copied := 0, 0, map[string]int{}
	for k, v := range m {
		sum += v
		count++
		copied[k] = v
		ctx.Logger().Info("item", "key", k, "now", harvest.Now(ctx))
	}
	nonEmpty := false
	for range m {
		nonEmpty = true
		break
	}
	for k, v := range m {
		switch {
		case v < 0:
			break // leaves the switch, not the loop
		}
		for i := range v {
			if i > 2 {
				break // leaves the inner loop
			}
		}
		if v == 0 {
			continue
		}
		copied[k] = v + 1
	}
inner:
	for k, v := range m {
		if v > 0 {
			continue inner // the next element, not out of the loop
		}
		copied[k] = v
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		harvest.ExecuteActivity(ctx, k, nil)
	}
	_, _, _, _ = sum, count, nonEmpty, first
	return keys, nil
}

// notify is workflow code in this package that reaches harvest.
func notify(ctx *harvest.WorkflowContext, k string) { harvest.Sleep(ctx, time.Second) }

func helpers(ctx *harvest.WorkflowContext, m map[string]int) (string, error) {
	_ = helper.Stamp()                 // want `workflow code calls helper.Stamp, which calls time.Now: use harvest.Now\(ctx\)`
	_ = helper.Deeper()                // want `workflow code calls helper.Deeper, which calls helper.Stamp, which calls time.Now: use harvest.Now\(ctx\)`
	_ = helper.Indirect()              // want `workflow code calls helper.Indirect, which calls helper.stamp, which calls time.Now`
	_ = helper.Roll()                  // want `workflow code calls helper.Roll, which calls math/rand.Intn: use harvest.SideEffect`
	_ = helper.Jitter(3)               // want `workflow code calls helper.Jitter, which calls math/rand.Int: use harvest.SideEffect`
	helper.Spawn(nil)                  // want `workflow code calls helper.Spawn, which starts a goroutine with the go statement: use harvest.Go`
	_ = helper.Count()                 // want `workflow code calls helper.Count, which writes package-level variable helper.counter: a package-level variable is shared by every execution in the process and keeps its value across replays: call it inside harvest.SideEffect or an activity, or keep its state in local variables`
	_ = helper.Tick()                  // want `workflow code calls helper.Tick, which calls time.Now: use harvest.Now\(ctx\)`
	_, _ = helper.Box[int]{}.Stamped() // want `workflow code calls helper.Box.Stamped, which calls time.Now`
	_ = helper.First(m)                // want `workflow code calls helper.First, which ranges over a map whose loop returns: range over sorted keys`
	_ = helper.Clock{}.Now()           // want `workflow code calls helper.Clock.Now, which calls time.Now`
	_ = stampLocal()                   // want `workflow code calls workflows.stampLocal, which calls time.Now`
	// Not followed: deterministic helpers, workflow functions (reported
	// where declared), function values, interface methods, the standard
	// library.
	_ = helper.Keys(m)
	_ = helper.Format(harvest.Now(ctx))
	_ = helper.Late(ctx)
	clockFn := helper.Stamp
	_ = clockFn()
	var c interface{ Now() time.Time } = helper.Clock{}
	_ = c.Now()
	return fmt.Sprintf("%v", m), nil
}

func stampLocal() time.Time { return time.Now() }

// Order's Run is a workflow method: its first parameter is the context.
type Order struct{ n int }

func (o *Order) Run(ctx *harvest.WorkflowContext, in int) (int, error) {
	o.n = rand.Intn(in) // want `workflow code calls math/rand.Intn: use harvest.SideEffect`
	return o.n, nil
}

// Charge is exported workflow code: its fact tells importers it reaches
// harvest, so that a map range calling it is reported.
func Charge(ctx *harvest.WorkflowContext, in int) (int, error) { // want Charge:`reaches harvest: calls harvest.ExecuteActivity`
	var out int
	err := harvest.ExecuteActivity(ctx, "charge", in).Get(&out)
	return out, err
}
