// Package helper holds plain functions that the workflows package calls
// from workflow code: the analyzer follows them through facts.
package helper

import (
	"math/rand"
	"sort"
	"time"

	"github.com/harvest-engine/harvest"
)

var counter int

func Stamp() time.Time { // want Stamp:`not deterministic: calls time.Now \(use harvest.Now\(ctx\)`
	return time.Now()
}

// Format is deterministic: formatting a time reads no clock.
func Format(t time.Time) string { return t.Format(time.RFC3339) }

func Deeper() string { // want Deeper:`not deterministic: calls helper.Stamp, which calls time.Now \(`
	return Format(Stamp())
}

// Indirect reads the clock through an unexported function declared after
// it: the summary is found within the package, then exported.
func Indirect() time.Time { // want Indirect:`not deterministic: calls helper.stamp, which calls time.Now`
	return stamp()
}

func stamp() time.Time { return time.Now() }

func Roll() int { // want Roll:`not deterministic: calls math/rand.Intn \(use harvest.SideEffect`
	return rand.Intn(6)
}

func Jitter[T any](v T) T { // want Jitter:`not deterministic: calls math/rand.Int `
	_ = rand.Int()
	return v
}

func Spawn(f func()) { // want Spawn:`not deterministic: starts a goroutine with the go statement \(use harvest.Go`
	go f()
}

func Count() int { // want Count:`not deterministic: writes package-level variable helper.counter \(a package-level variable is shared by every execution in the process and keeps its value across replays: call it inside harvest.SideEffect or an activity`
	counter++
	return counter
}

func First(m map[string]int) string { // want First:`not deterministic: ranges over a map whose loop returns \(range over sorted keys`
	for k := range m {
		return k
	}
	return ""
}

// Keys collects the keys and sorts them: the usual way to iterate over a
// map in order, not reported.
func Keys(m map[string]int) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Tick both counts and reads the clock: its fact names the clock, the
// clearer fault.
func Tick() time.Time { // want Tick:`not deterministic: calls time.Now \(use harvest.Now`
	counter++
	return time.Now()
}

// Box's method is followed from its instances to the generic origin.
type Box[T any] struct{ v T }

func (b Box[T]) Stamped() (T, time.Time) { // want Stamped:`not deterministic: calls time.Now`
	return b.v, time.Now()
}

type Clock struct{}

func (Clock) Now() time.Time { // want Now:`not deterministic: calls time.Now`
	return time.Now()
}

// Await is plain code that reaches into package harvest: only a map
// range that calls it is reported.
func Await(f *harvest.Future) error { // want Await:`reaches harvest: calls harvest.Future.Get`
	return f.Get(nil)
}

// Step is workflow code: its fact says only how it reaches harvest.
func Step(ctx *harvest.WorkflowContext, name string) error { // want Step:`^reaches harvest: calls harvest.ExecuteActivity$`
	return harvest.ExecuteActivity(ctx, name, nil).Get(nil)
}

// Late is workflow code that reads the clock: it is reported here, and
// not again where workflow code calls it. Time.After is a comparison.
func Late(ctx *harvest.WorkflowContext) bool {
	return time.Now().After(harvest.Now(ctx)) // want `workflow code calls time.Now: use harvest.Now\(ctx\)`
}
