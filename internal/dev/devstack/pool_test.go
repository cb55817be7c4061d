package devstack_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestDatabaseMaxConnsSizesTheStacksPool: harvest dev and bench size their
// pool from database_max_conns, as the services do.
func TestDatabaseMaxConnsSizesTheStacksPool(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{DatabaseMaxConns: 3})
	require.EqualValues(t, 3, s.DB.Config().MaxConns)
}
