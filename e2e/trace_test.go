package e2e

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// collector is an OTLP/HTTP trace receiver: it keeps, by trace id, the
// names of the spans exported to it, and the service names they came
// with.
type collector struct {
	mu       sync.Mutex
	spans    map[string][]string
	services map[string]bool
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				c.services[a.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				id := hex.EncodeToString(sp.TraceId)
				c.spans[id] = append(c.spans[id], sp.Name)
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// trace returns the span names of the trace that has a span named name.
func (c *collector) trace(name string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, names := range c.spans {
		for _, n := range names {
			if n == name {
				return append([]string(nil), names...)
			}
		}
	}
	return nil
}

// TestHarvestDevExportsTracesOverOTLP runs harvest dev with the standard
// OTEL_EXPORTER_OTLP_ENDPOINT set to a collector of the test's, starts an
// execution, and finds its trace there, from the request to the
// activities; without the variable (every other test here) nothing is
// exported.
func TestHarvestDevExportsTracesOverOTLP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs harvest dev")
	}
	col := &collector{spans: map[string][]string{}, services: map[string]bool{}}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)

	bin := buildHarvest(t)
	addr := freeAddr(t)
	dir := t.TempDir()
	dev := startDevEnv(t, bin, dir, devEnv("OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100"),
		"--addr", addr, "--state-dir", filepath.Join(dir, "state"))
	require.Contains(t, dev.logs.String(), "tracing on", "harvest dev says that it exports traces")

	req, err := http.NewRequest("POST", "http://"+addr+"/api/harvest/workflows/onboarding/start", strings.NewReader(`{"input": {"user_id": 42}}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "traced-evt-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode)

	want := []string{"POST /api/harvest/workflows/{name}/start", "apply start", "workflow task onboarding",
		"activity create_db_user", "activity send_welcome_email", "apply wft_completed"}
	probe.Until(t, 60*time.Second, "the start's trace at the collector", func() bool {
		names := col.trace("POST /api/harvest/workflows/{name}/start")
		for _, w := range want {
			if !containsName(names, w) {
				return false
			}
		}
		return true
	})
	col.mu.Lock()
	require.True(t, col.services["harvest-dev"], "spans carry the service name: %v", col.services)
	col.mu.Unlock()
	dev.stop(t)
}

func containsName(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}
