package harvest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

// TestTheCacheCountsWhatItEvicts: a cache of two keeps the two executions
// put last; each put beyond them ends the least recently used one and
// says so (harvest_worker_workflow_cache_evictions_total), and putting
// an execution it holds again ends nothing for room.
func TestTheCacheCountsWhatItEvicts(t *testing.T) {
	t.Parallel()
	c := newWorkflowCache(2, slog.New(slog.DiscardHandler))
	defer c.close()
	put := func(i int) int {
		id := fmt.Sprint("exec-", i)
		x := newExecution(func(*WorkflowContext, json.RawMessage) (any, error) { return nil, nil }, &wire.WorkflowTask{ExecutionID: id}, nil, nil)
		return c.put(id, x)
	}
	require.Zero(t, put(1))
	require.Zero(t, put(2))
	require.Equal(t, 1, put(3), "exec-1 goes")
	require.Nil(t, c.take("exec-1"))
	require.Zero(t, put(3), "a newer copy of one it holds")
	require.Equal(t, 2, c.len())
}
