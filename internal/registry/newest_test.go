package registry

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTheNewestBuildIsTheOneThatArrivedLast: a build arrives when its
// first live worker started; a later worker of an older build does not
// make it newer, a lapsed registration does not count, registrations of
// workers that say no build are passed over, and equal arrivals go to
// the greater build id, so that every worker agrees.
func TestTheNewestBuildIsTheOneThatArrivedLast(t *testing.T) {
	x := NewIndex(nil, slog.New(slog.DiscardHandler))
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	live, lapsed := now.Add(time.Minute), now.Add(-time.Second)
	prefix := served(KindWorkflow, "order", "default")
	put := func(worker, build string, started time.Duration, expires time.Time) {
		x.set(prefix, worker, Entry{Worker: worker, BuildID: build, StartedAt: now.Add(started), ExpiresAt: expires})
	}
	require.Empty(t, x.NewestBuild("order", "default", now), "no worker")

	put("w1", "v1", -time.Hour, live)
	require.Equal(t, "v1", x.NewestBuild("order", "default", now))
	put("w2", "v2", -10*time.Minute, live)
	require.Equal(t, "v2", x.NewestBuild("order", "default", now))
	// A v1 worker restarted: v1 still arrived with w1.
	put("w3", "v1", -time.Minute, live)
	require.Equal(t, "v2", x.NewestBuild("order", "default", now))
	// v2's only worker lapsed: back to v1.
	put("w2", "v2", -10*time.Minute, lapsed)
	require.Equal(t, "v1", x.NewestBuild("order", "default", now))
	// A worker of an older version says no build.
	put("w4", "", 0, live)
	require.Equal(t, "v1", x.NewestBuild("order", "default", now))
	// Equal arrivals: the greater build id.
	put("w5", "v0", -time.Hour, live)
	require.Equal(t, "v1", x.NewestBuild("order", "default", now))
	put("w6", "v9", -time.Hour, live)
	require.Equal(t, "v9", x.NewestBuild("order", "default", now))
	require.Empty(t, x.NewestBuild("order", "other_queue", now))

	// Every worker of the older build restarted after the newer one
	// arrived, worker by worker: each took the arrival its build's live
	// workers said, and the newer build stays the newest.
	y := NewIndex(nil, slog.New(slog.DiscardHandler))
	set := func(worker, build string, started, arrived time.Duration) {
		y.set(prefix, worker, Entry{Worker: worker, BuildID: build, StartedAt: now.Add(started), Arrived: now.Add(arrived), ExpiresAt: live})
	}
	set("a1", "v1", -time.Minute, -time.Hour)
	set("a2", "v1", -30*time.Second, -time.Hour)
	set("b1", "v2", -10*time.Minute, -10*time.Minute)
	require.Equal(t, "v2", y.NewestBuild("order", "default", now))
}
