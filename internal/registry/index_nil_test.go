package registry

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAnIndexWithoutItsBucketCountsEverythingServed: ingest bound to a
// topology no scheduler of this version declared yet (no HARVEST_WORKERS)
// starts, and lets starts go on as before workers registered.
func TestAnIndexWithoutItsBucketCountsEverythingServed(t *testing.T) {
	x := NewIndex(nil, slog.New(slog.DiscardHandler))
	require.NoError(t, x.Start(t.Context()))
	defer x.Close()
	ok, err := x.Serves(t.Context(), KindWorkflow, "anything", "default", time.Now())
	require.NoError(t, err)
	require.True(t, ok)
}
