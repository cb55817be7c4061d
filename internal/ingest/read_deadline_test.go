package ingest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// TestEveryReadAnswers503WithinItsDeadlineWhilePostgreSQLIsFrozen:
// PostgreSQL stops answering (its connections stay open, nothing comes
// back, new ones are never greeted). Every API read, and a limited
// token's cancel, which reads the execution's workflow first, answers
// 503 unavailable with Retry-After within db_read_timeout, rather than
// hold its request (and its slot) for as long as the database takes; and
// all of them answer again once it is back.
func TestEveryReadAnswers503WithinItsDeadlineWhilePostgreSQLIsFrozen(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 2, MemoryStorage: true})
	require.NoError(t, err)

	proxy := pgtest.NewProxy(t, pgtest.NewDatabase(t))
	db, err := store.NewPool(ctx, proxy.URL())
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.NoError(t, store.EnsureShards(ctx, db, 2))

	a, err := auth.New([]auth.Token{
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}},
		{Name: "charge-ops", SHA256: auth.Hash("t-charge-ops"), Scopes: []auth.Scope{auth.ScopeCancel, auth.ScopeRead}, Workflows: []string{"charge"}},
	})
	require.NoError(t, err)
	const deadline = time.Second
	s, err := New(Config{Topology: top, NC: nc, DB: db, Auth: a, DBReadTimeout: deadline})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	// Before the server closes, which waits for the requests it serves.
	t.Cleanup(proxy.Restore)
	// A request the server holds longer than this has no deadline.
	hc := &http.Client{Timeout: 15 * time.Second}

	const id = "0192f4c1-0000-7000-8000-000000000000"
	requests := []struct{ method, path, token string }{
		{"GET", "/api/harvest/executions", "t-ops"},
		{"GET", "/api/harvest/executions?status=Running", "t-charge-ops"},
		{"GET", "/api/harvest/executions/" + id, "t-ops"},
		{"GET", "/api/harvest/executions/" + id + "/history", "t-ops"},
		{"GET", "/api/harvest/executions/" + id + "/state", "t-ops"},
		// Not under the route's deadline, since it waits: its reads are.
		{"GET", "/api/harvest/executions/" + id + "/state/progress?after_seq=1&wait=30s", "t-charge-ops"},
		{"GET", "/api/harvest/commands/" + id, "t-ops"},
		{"GET", "/api/harvest/commands/dead", "t-ops"},
		{"GET", "/api/harvest/commands/dead/1", "t-ops"},
		{"GET", "/api/harvest/workflows", "t-ops"},
		{"GET", "/api/harvest/retention", "t-ops"},
		{"GET", "/v1/runs/" + id, "t-ops"},
		{"POST", "/api/harvest/executions/" + id + "/cancel", "t-charge-ops"},
	}
	send := func(method, path, token string) (int, http.Header, string, time.Duration) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(`{"reason": "test"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		began := time.Now()
		resp, err := hc.Do(req)
		require.NoError(t, err, "%s %s: no answer while PostgreSQL is frozen", method, path)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header, string(body), time.Since(began)
	}

	// Before: each is answered from the database (connections are open).
	for _, rq := range requests {
		status, _, body, _ := send(rq.method, rq.path, rq.token)
		require.NotEqual(t, http.StatusServiceUnavailable, status, "%s %s: %s", rq.method, rq.path, body)
	}

	proxy.Freeze()
	for _, rq := range requests {
		status, h, body, took := send(rq.method, rq.path, rq.token)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s %s: %s", rq.method, rq.path, body)
		require.NotEmpty(t, h.Get("Retry-After"), "%s %s", rq.method, rq.path)
		var e api.ErrorResponse
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		require.Equal(t, api.CodeUnavailable, e.Error, body)
		require.Less(t, took, deadline+2*time.Second, "%s %s answered after %s", rq.method, rq.path, took)
		u, err := url.Parse(proxy.URL())
		require.NoError(t, err)
		for _, leak := range []string{u.Port(), "dial", "pgx", "SQLSTATE", "context deadline"} {
			require.NotContains(t, body, leak, "%s %s quotes no internal error", rq.method, rq.path)
		}
	}

	proxy.Restore()
	for _, rq := range requests {
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, _, _, _ := send(rq.method, rq.path, rq.token)
			if status != http.StatusServiceUnavailable {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s %s: still 503 30s after PostgreSQL came back", rq.method, rq.path)
			time.Sleep(50 * time.Millisecond) // poll interval, not synchronisation
		}
	}
}
