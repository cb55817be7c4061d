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

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/natstest"
	"github.com/harvest-engine/harvest/internal/pgtest"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/streams"
)

// cutProxy forwards TCP connections from its address to target until it
// is cut: then its listener and every connection close, and connecting
// is refused until it is restored, on the same address.
type cutProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	p := &cutProxy{t: t, target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns[in], p.conns[out] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
			}
			p.wg.Go(func() { pipe(out, in) })
			p.wg.Go(func() { pipe(in, out) })
		}
	})
}

// cut closes the listener and every connection.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// restore listens on the proxy's address again.
func (p *cutProxy) restore() {
	ln, err := net.Listen("tcp", p.addr)
	require.NoError(p.t, err)
	p.serve(ln)
}

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

// TestReadyzAnswers503WhilePostgreSQLCannotBeRead: ingest reads
// PostgreSQL (its reads, keyed replays, late outcomes), so /readyz
// answers 503 not_ready while it cannot, naming PostgreSQL without
// quoting its error (which is logged), and 200 again once it can; the
// JetStream side stays ok. An ingest with no database is ready.
func TestReadyzAnswers503WhilePostgreSQLCannotBeRead(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := streams.Declare(ctx, js, streams.Config{Shards: 2, MemoryStorage: true})
	require.NoError(t, err)

	u, err := url.Parse(pgtest.NewDatabase(t))
	require.NoError(t, err)
	proxy := newCutProxy(t, u.Host)
	u.Host = proxy.addr
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
	ready := func() (int, client.ReadinessResponse, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var a client.ReadinessResponse
		require.NoError(t, json.Unmarshal(raw, &a), "%s", raw)
		return resp.StatusCode, a, string(raw)
	}

	status, a, raw := ready()
	require.Equal(t, http.StatusOK, status, raw)
	require.Equal(t, client.ReadinessResponse{Status: "ready", JetStream: "ok", Database: "ok"}, a)

	proxy.cut()
	status, a, raw = ready()
	require.Equal(t, http.StatusServiceUnavailable, status, raw)
	require.Equal(t, client.ReadinessResponse{Status: "not_ready", Error: client.CodeNotReady, Message: "PostgreSQL unreachable",
		Reasons: []string{"PostgreSQL unreachable"}, JetStream: "ok", Database: "unavailable"}, a)
	_, port, _ := net.SplitHostPort(proxy.addr)
	for _, leak := range []string{port, "dial", "connect", "refused", "EOF", "pgx", "SQLSTATE"} {
		require.NotContains(t, raw, leak, "the public answer quotes no PostgreSQL error")
	}
	require.Contains(t, logs.String(), "readiness: PostgreSQL unreachable", "the error is logged")

	// What cannot be read answers 503 too, without the error.
	resp, err := http.Get(srv.URL + "/api/harvest/executions")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	proxy.restore()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if status, _, _ = ready(); status == http.StatusOK {
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
}
