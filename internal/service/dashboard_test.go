package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// dashboardPath is the Grafana dashboard the repository ships.
const dashboardPath = "../../deploy/grafana/harvest.json"

// dashboardExprs returns every PromQL expression of the dashboard at
// path: its panels' targets (rows' panels included) and its query
// variables.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	type panel struct {
		Title   string  `json:"title"`
		Type    string  `json:"type"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		SchemaVersion int     `json:"schemaVersion"`
		UID           string  `json:"uid"`
		Panels        []panel `json:"panels"`
		Templating    struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	require.GreaterOrEqual(t, d.SchemaVersion, 36, "a dashboard of current Grafana")
	require.NotEmpty(t, d.UID)
	var exprs []string
	hasDatasource := false
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			hasDatasource = hasDatasource || v.Query == "prometheus"
		case "query":
			if q, ok := v.Query.(string); ok {
				exprs = append(exprs, q)
			}
		}
	}
	require.True(t, hasDatasource, "the dashboard picks its Prometheus data source with a variable")
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q has an empty query", p.Title)
				exprs = append(exprs, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	return exprs
}

// families reads the metric families a /metrics answer holds, name to
// type (counter, gauge, histogram, ...); a family is exposed only with
// at least one series.
func families(t *testing.T, url string) (map[string]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		return nil, fmt.Errorf("GET %s: %d %s", url, res.StatusCode, body)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out, sc.Err()
}

// resolves says whether metric, as a query names it, is a series of one
// of fams: a family's name, or a histogram's _bucket, _sum or _count
// (a summary's _sum or _count).
func resolves(fams map[string]string, metric string) bool {
	if _, ok := fams[metric]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(metric, suffix)
		if !ok {
			continue
		}
		switch fams[base] {
		case "histogram":
			return true
		case "summary":
			return suffix != "_bucket"
		}
	}
	return false
}

// TestDashboardQueriesResolve runs a scheduler (metrics on metrics_addr),
// a worker (on admin_addr) and ingest (on its API address) as the service
// binaries do, in this process, runs a workflow through them, and checks
// that every metric every query of deploy/grafana/harvest.json names is
// served by one of them; and that each serves the Go runtime's and the
// process's metrics.
func TestDashboardQueriesResolve(t *testing.T) {
	t.Parallel()
	var metrics []string
	for _, expr := range dashboardExprs(t, dashboardPath) {
		names, err := promMetrics(expr)
		require.NoError(t, err)
		require.NotEmpty(t, names, "query %q names no metric", expr)
		metrics = append(metrics, names...)
	}
	slices.Sort(metrics)
	metrics = slices.Compact(metrics)

	ns := natstest.RunServer(t, natstest.Options{})
	base := config.Config{NATSURL: ns.ClientURL(), DatabaseURL: pgtest.NewDatabase(t), Shards: 2}
	sched, worker, api := base, base, base
	sched.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	worker.AdminAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	api.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	runService(t, sched, service.RunScheduler)
	runService(t, api, service.RunIngest)
	runService(t, worker, func(ctx context.Context, cfg config.Config, log *slog.Logger) error {
		return service.RunWorker(ctx, cfg, log, func(w *harvest.Worker) { examples.Register(w, examples.NewServices()) })
	})
	endpoints := map[string]string{
		"scheduler (metrics_addr)": "http://" + sched.MetricsAddr + "/metrics",
		"worker (admin_addr)":      "http://" + worker.AdminAddr + "/metrics",
		"ingest (http_addr)":       "http://" + api.HTTPAddr + "/metrics",
	}
	waitReady(t, "http://"+worker.AdminAddr, 60*time.Second)
	waitReady(t, "http://"+api.HTTPAddr, 60*time.Second)
	status, _ := get(t, "http://"+sched.MetricsAddr+"/healthz")
	require.Equal(t, http.StatusNotFound, status, "metrics_addr serves /metrics alone")

	// A workflow, run to its end, so that every histogram and counter has
	// its series.
	start := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+api.HTTPAddr+"/api/harvest/workflows/onboarding/start",
			strings.NewReader(`{"input": {"user_id": 7}}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "dashboard-1")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, res.StatusCode, body)
		return body["execution_id"].(string)
	}
	id := start()
	require.Equal(t, id, start(), "a retry is answered with the same execution")
	require.Eventually(t, func() bool {
		_, body := get(t, "http://"+api.HTTPAddr+"/api/harvest/executions/"+id)
		return strings.Contains(body, `"status":"Completed"`)
	}, 60*time.Second, 50*time.Millisecond, "the workflow to complete")

	var missing []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		all := map[string]string{}
		missing = missing[:0]
		for name, url := range endpoints {
			fams, err := families(t, url)
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			for _, m := range []string{"go_goroutines", "go_gc_duration_seconds", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
				if _, ok := fams[m]; !ok {
					missing = append(missing, fmt.Sprintf("%s: %s", name, m))
				}
			}
			for f, typ := range fams {
				all[f] = typ
			}
		}
		for _, m := range metrics {
			if !resolves(all, m) {
				missing = append(missing, m)
			}
		}
		// The shards' backlog is read at scrape time: a scrape while a
		// shard's session starts lacks it.
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
	require.Empty(t, missing, "metrics the dashboard's queries name that no process serves")
}

func TestResolves(t *testing.T) {
	fams := map[string]string{"a_total": "counter", "b_seconds": "histogram", "c": "summary", "d_bucket": "gauge"}
	for metric, want := range map[string]bool{
		"a_total": true, "a": false, "a_total_count": false,
		"b_seconds_bucket": true, "b_seconds_sum": true, "b_seconds_count": true, "b_seconds": true, "b_bucket": false,
		"c_sum": true, "c_count": true, "c_bucket": false,
		"d_bucket": true, "d": false,
	} {
		require.Equal(t, want, resolves(fams, metric), metric)
	}
}
