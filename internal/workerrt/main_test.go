package workerrt

import (
	"testing"

	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// Every goroutine a Runtime starts (its consumers, the keeper of held
// tasks, the attempts it runs) ends when it is stopped: none outlives the
// tests. pgtest.Main checks so with goleak once they have run; the stack
// tests (package workerrt_test) need its PostgreSQL.
func TestMain(m *testing.M) {
	pgtest.Main(m)
}
