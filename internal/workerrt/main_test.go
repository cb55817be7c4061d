package workerrt

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a Runtime starts (its consumers, the keeper of held
// tasks, the attempts it runs) ends when it is stopped: none outlives the
// tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
