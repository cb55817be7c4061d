package client

import (
	"testing"

	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// A Client starts no goroutine of its own, and the tests close their
// fake servers and idle connections: none outlives the tests.
// pgtest.Main checks that with goleak, after the tests; the stack tests
// (package client_test) need its PostgreSQL.
func TestMain(m *testing.M) {
	pgtest.Main(m)
}
