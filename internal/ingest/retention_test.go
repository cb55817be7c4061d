package ingest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// TestPruneWithoutASchedulerIs503: with no scheduler running, nothing
// would prune, so a prune request is not answered 202 as if it were
// heard: 503 unavailable says so. Telling what is past retention needs
// PostgreSQL only.
func TestPruneWithoutASchedulerIs503(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	s, err := New(Config{Topology: top, NC: nc, DB: pgtest.NewPool(t)})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })

	serve := func(method, target string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(method, "http://localhost"+target, nil))
		return rec
	}
	rec := serve(http.MethodPost, "/api/harvest/retention/prune")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	var e api.ErrorResponse
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
	require.Equal(t, api.CodeUnavailable, e.Error)
	require.Contains(t, e.Message, "no scheduler is running")

	rec = serve(http.MethodGet, "/api/harvest/retention")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var r api.RetentionResponse
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
	require.Equal(t, []api.WorkflowRetention{}, r.Workflows)
	require.False(t, r.Pending())
}
