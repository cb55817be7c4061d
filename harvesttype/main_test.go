package harvesttype

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts no goroutine; its tests leave none behind either.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
