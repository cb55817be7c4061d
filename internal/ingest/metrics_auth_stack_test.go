package ingest_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestMetricsNeedTheMetricsScopeAndAnUnlimitedToken: /metrics holds every
// workflow's series, so it needs the metrics scope (which admin holds) and
// is refused to a token limited to some workflows, even an admin one; read
// alone no longer reads it.
func TestMetricsNeedTheMetricsScopeAndAnUnlimitedToken(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Token{
		{Name: "collect-reader", SHA256: auth.Hash("t-collect"), Scopes: []auth.Scope{auth.ScopeRead}, Workflows: []string{"collect"}},
		{Name: "charge-admin", SHA256: auth.Hash("t-charge-admin"), Scopes: []auth.Scope{auth.ScopeAdmin}, Workflows: []string{"charge"}},
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}},
		{Name: "prometheus", SHA256: auth.Hash("t-prometheus"), Scopes: []auth.Scope{auth.ScopeMetrics}},
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}},
	})
	require.NoError(t, err)
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Auth: a}})
	ctx := natstest.Context(t)
	scrape := func(token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/metrics", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	for token, want := range map[string]string{
		"t-collect":      `{"error": "forbidden", "message": "token \"collect-reader\" lacks scope metrics"}`,
		"t-charge-admin": `{"error": "forbidden", "message": "token \"charge-admin\" is limited to the workflows charge, and /metrics holds every workflow's series"}`,
		"t-reader":       `{"error": "forbidden", "message": "token \"reader\" lacks scope metrics"}`,
	} {
		status, body := scrape(token)
		require.Equal(t, http.StatusForbidden, status, "%s: %s", token, body)
		require.JSONEq(t, want, body, token)
		require.NotContains(t, body, "harvest_")
	}
	for _, token := range []string{"t-prometheus", "t-ops"} {
		status, body := scrape(token)
		require.Equal(t, http.StatusOK, status, "%s: %s", token, body)
		require.Contains(t, body, `harvest_ingest_requests_refused_total{reason="forbidden"} 3`, token)
	}
}
