package probe

import (
	"testing"
	"time"
)

// Interval is how often Until asks its condition again: short, so that a
// test goes on soon after what it waits for has happened.
const Interval = 20 * time.Millisecond

// Until polls cond every Interval until it holds, and fails t ("timed
// out after <within> waiting for <what>") once within has passed without
// it holding. cond runs on the test's goroutine, so it may use t (require
// in cond stops the test at once).
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(Interval) // the poll interval, not synchronisation
	}
}
