package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestReadyzIsDegradedWhilePostgreSQLCannotBeRead: ingest accepts
// commands without PostgreSQL, and every ingest shares it, so /readyz
// answers 200 degraded while it cannot be read, naming PostgreSQL
// without quoting its error (which is logged), and ready again once it
// can; the JetStream side stays ok. An ingest with no database is ready.
// One that cannot reach JetStream cannot accept commands: not ready.
func TestReadyzIsDegradedWhilePostgreSQLCannotBeRead(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 2, MemoryStorage: true})
	require.NoError(t, err)

	proxy := pgtest.NewProxy(t, pgtest.NewDatabase(t))
	u, err := url.Parse(proxy.URL())
	require.NoError(t, err)
	q := u.Query()
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	db, err := store.NewPool(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.NoError(t, store.EnsureShards(ctx, db, 2))

	var logs syncBuffer
	s, err := New(Config{Topology: top, NC: nc, DB: db, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	ready := func() (int, api.ReadinessResponse, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var a api.ReadinessResponse
		require.NoError(t, json.Unmarshal(raw, &a), "%s", raw)
		return resp.StatusCode, a, string(raw)
	}

	status, a, raw := ready()
	require.Equal(t, http.StatusOK, status, raw)
	require.Equal(t, api.ReadinessResponse{Status: "ready", JetStream: "ok", Database: "ok"}, a)

	proxy.Cut()
	status, a, raw = ready()
	require.Equal(t, http.StatusOK, status, raw)
	require.Equal(t, api.ReadinessResponse{Status: "degraded", Message: "PostgreSQL unreachable",
		Reasons: []string{"PostgreSQL unreachable"}, JetStream: "ok", Database: "unavailable"}, a)
	_, port, _ := net.SplitHostPort(u.Host)
	for _, leak := range []string{port, "dial", "connect", "refused", "EOF", "pgx", "SQLSTATE"} {
		require.NotContains(t, raw, leak, "the public answer quotes no PostgreSQL error")
	}
	require.Contains(t, logs.String(), "readiness: PostgreSQL unreachable", "the error is logged")

	// What cannot be read answers 503 too, without the error.
	resp, err := http.Get(srv.URL + "/api/harvest/executions")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	proxy.Restore()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if status, a, _ = ready(); status == http.StatusOK && a.Status == "ready" {
			break
		}
		require.True(t, time.Now().Before(deadline), "ingest did not become ready again within 30s")
		time.Sleep(50 * time.Millisecond) // poll interval, not synchronisation
	}

	// No database configured: ingest reads none, and is ready.
	bare, err := New(Config{Topology: top, NC: nc})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	bare.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.True(t, strings.Contains(rec.Body.String(), `"database":"none"`), rec.Body.String())

	// What ingest cannot serve without: JetStream, to accept commands.
	// Then it is not ready, and says what else is wrong.
	proxy.Cut()
	nc2, js2 := natstest.Connect(t, ns)
	top2, err := broker.Declare(ctx, js2, broker.Config{Shards: 2, MemoryStorage: true})
	require.NoError(t, err)
	cutOff, err := New(Config{Topology: top2, NC: nc2, DB: db})
	require.NoError(t, err)
	nc2.Close()
	rec = httptest.NewRecorder()
	cutOff.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	var off api.ReadinessResponse
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &off))
	require.Equal(t, api.ReadinessResponse{Status: "not_ready", Error: api.CodeNotReady, Message: "JetStream unreachable; PostgreSQL unreachable",
		Reasons: []string{"JetStream unreachable", "PostgreSQL unreachable"}, JetStream: "unreachable", Database: "unavailable"}, off)
}
