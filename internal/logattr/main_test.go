package logattr_test

import (
	"testing"

	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// pgtest.Main runs the tests, the stack tests on its PostgreSQL, then
// fails the run when goroutines leaked (goleak).
func TestMain(m *testing.M) { pgtest.Main(m) }
