package client

import (
	"testing"

	"go.uber.org/goleak"
)

// A Client starts no goroutine of its own, and the tests close their
// fake servers and idle connections: none outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
