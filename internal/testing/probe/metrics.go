package probe

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// Read gathers g and returns the sum of the values of the series of
// family name whose labels include labels (name, value pairs; a series
// may have others too), and how many series matched. A counter's or a
// gauge's value is its value, a histogram's or a summary's its sample
// count. No match is 0, 0: use it where a series may not exist yet (in
// an Until's condition); Value where it must.
func Read(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (float64, int) {
	t.Helper()
	require.Zero(t, len(labels)%2, "labels are name, value pairs: %q", labels)
	fams, err := g.Gather()
	require.NoError(t, err)
	var sum float64
	var n int
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if has(m, labels) {
				n++
				sum += sample(m)
			}
		}
	}
	return sum, n
}

// Value is Read's sum; it fails t when no series of family name has
// labels.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, n := Read(t, g, name, labels...)
	require.Positive(t, n, "no series %s%q", name, labels)
	return v
}

// Count is how many series of family name have labels; none is 0.
func Count(t testing.TB, g prometheus.Gatherer, name string, labels ...string) int {
	t.Helper()
	_, n := Read(t, g, name, labels...)
	return n
}

// Family is the family name of what g gathers, or nil if there is none,
// for what Read does not tell (a histogram's sum, its buckets).
func Family(t testing.TB, g prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// Snapshot gathers g once and returns what it gathered as a Gatherer:
// several reads of the snapshot see the same moment, as a scrape does.
func Snapshot(t testing.TB, g prometheus.Gatherer) prometheus.Gatherer {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return fams, nil })
}

// Scrape gets url, a /metrics page in Prometheus's text format, and
// returns what it serves as a Gatherer, to read a running server's
// metrics as a scraper sees them.
func Scrape(t testing.TB, url string) prometheus.Gatherer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s", url)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "GET %s", url)
	fams := make([]*dto.MetricFamily, 0, len(parsed))
	for _, f := range parsed {
		fams = append(fams, f)
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return fams, nil })
}

// has is whether m carries every name, value pair of labels.
func has(m *dto.Metric, labels []string) bool {
	have := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(labels); i += 2 {
		// An absent label is an empty one, as Prometheus has it.
		if have[labels[i]] != labels[i+1] {
			return false
		}
	}
	return true
}

// sample is a series' value: a histogram's or a summary's is its sample
// count.
func sample(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.GetSummary() != nil:
		return float64(m.GetSummary().GetSampleCount())
	}
	return 0
}
