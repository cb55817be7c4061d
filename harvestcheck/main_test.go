package harvestcheck_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if the analyzer, or the drivers that
// run it, leave goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
