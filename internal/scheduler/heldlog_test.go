package scheduler

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeldLogLogsOnlyWhenReleased(t *testing.T) {
	var out bytes.Buffer
	inner := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})

	log, held := newHeldLog(inner)
	log.With("shard", 3).Warn("dropping stale result", "execution_id", "e1")
	log.Debug("below the level")
	require.Empty(t, out.String(), "nothing is logged before release")
	require.Len(t, *held, 1, "a disabled level is not held")
	release(context.Background(), *held)
	require.Contains(t, out.String(), `msg="dropping stale result" shard=3 execution_id=e1`)

	out.Reset()
	log, _ = newHeldLog(inner)
	log.Warn("given up")
	require.Empty(t, out.String(), "an attempt given up logs nothing")
}
