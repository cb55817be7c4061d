package probe_test

import (
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest/internal/testing/probe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestUntilWaitsForTheCondition: Until returns once the condition holds,
// having asked it again every Interval meanwhile.
func TestUntilWaitsForTheCondition(t *testing.T) {
	t.Parallel()
	var asked atomic.Int32
	probe.Until(t, 10*time.Second, "the third time", func() bool { return asked.Add(1) == 3 })
	require.EqualValues(t, 3, asked.Load())
}

// TestValueSumsTheSeriesThatMatch: Value adds up the series whose labels
// include those asked for, a histogram counting its samples; Count says
// how many matched; Read of a series that does not exist is 0, 0.
func TestValueSumsTheSeriesThatMatch(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "things_total", Help: "Things."}, []string{"kind", "result"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "thing_seconds", Help: "Time."})
	reg.MustRegister(c, h)
	c.WithLabelValues("a", "ok").Add(2)
	c.WithLabelValues("a", "failed").Add(1)
	c.WithLabelValues("b", "ok").Add(5)
	h.Observe(1)
	h.Observe(2)

	require.Equal(t, 3.0, probe.Value(t, reg, "things_total", "kind", "a"))
	require.Equal(t, 5.0, probe.Value(t, reg, "things_total", "kind", "b", "result", "ok"))
	require.Equal(t, 8.0, probe.Value(t, reg, "things_total"))
	require.Equal(t, 2.0, probe.Value(t, reg, "thing_seconds"))
	require.Equal(t, 2, probe.Count(t, reg, "things_total", "result", "ok"))
	v, n := probe.Read(t, reg, "things_total", "kind", "z")
	require.Zero(t, v)
	require.Zero(t, n)

	// A snapshot keeps the moment it was taken.
	snap := probe.Snapshot(t, reg)
	c.WithLabelValues("b", "ok").Inc()
	require.Equal(t, 5.0, probe.Value(t, snap, "things_total", "kind", "b"))
	require.Equal(t, 6.0, probe.Value(t, reg, "things_total", "kind", "b"))

	// A scrape reads what a /metrics page serves.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	scraped := probe.Scrape(t, srv.URL)
	require.Equal(t, 6.0, probe.Value(t, scraped, "things_total", "kind", "b", "result", "ok"))
	require.Equal(t, 2.0, probe.Value(t, scraped, "thing_seconds"))
}
