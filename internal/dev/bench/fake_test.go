package bench_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/bench"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// fakeAPI answers starts with fresh executions that never close, or with
// an error status when failStatus is set.
type fakeAPI struct {
	failStatus int
	mu         sync.Mutex
	ids        []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/start"):
		if f.failStatus != 0 {
			w.WriteHeader(f.failStatus)
			fmt.Fprint(w, `{"error": "unavailable", "message": "down"}`)
			return
		}
		f.mu.Lock()
		id := fmt.Sprintf("00000000-0000-0000-0000-%012d", len(f.ids))
		f.ids = append(f.ids, id)
		f.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"execution_id": %q, "started_fresh": true, "deduplicated": false}`, id)
	case r.Method == http.MethodGet && r.URL.Path == "/api/harvest/executions":
		f.mu.Lock()
		var execs []map[string]string
		for _, id := range f.ids {
			execs = append(execs, map[string]string{"execution_id": id, "status": "Running"})
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"executions": execs})
	default:
		http.NotFound(w, r)
	}
}

func TestStalledRunFails(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&fakeAPI{})
	defer srv.Close()
	_, err := bench.Run(natstest.Context(t), bench.Config{Workload: bench.W1, N: 5, Concurrency: 2, BaseURL: srv.URL,
		StallTimeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, bench.ErrStalled)
}

func TestErrorsAreCountedAndFailTheChecks(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&fakeAPI{failStatus: http.StatusServiceUnavailable})
	defer srv.Close()
	res, err := bench.Run(natstest.Context(t), bench.Config{Workload: bench.W2, N: 10, Concurrency: 2, BaseURL: srv.URL})
	require.NoError(t, err)
	require.False(t, res.OK)
	require.Equal(t, 13, res.Submissions)
	require.Equal(t, 13, res.Errors)
	require.Zero(t, res.DistinctExecutions)
	require.NotEmpty(t, res.ErrorSamples)
	require.Contains(t, res.ErrorSamples[0], "503")
}
