package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// TestTheAPIBudgetIsTokenHoldersAlone: with max_in_flight 1 taken by a
// token holder's start whose body never ends, /readyz answers 503
// not_ready naming the api budget, another token holder's request is
// answered 503 at once, and a request without a token is still answered
// (401, from a budget of its own, its body unread): it neither waits for
// nor takes the API's slot. Once the slot is free /readyz is ready.
func TestTheAPIBudgetIsTokenHoldersAlone(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	a, err := auth.New([]auth.Token{{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}}})
	require.NoError(t, err)
	s, err := New(Config{Topology: top, NC: nc, Auth: a, MaxInFlight: 1, DeclaredWorkflows: []string{"charge"}})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := s.HTTPServer(ln.Addr().String())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	send := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}
	ready := func() (int, api.ReadinessResponse) {
		t.Helper()
		status, raw := send(http.MethodGet, "/readyz", "", "")
		var r api.ReadinessResponse
		require.NoError(t, json.Unmarshal([]byte(raw), &r), raw)
		return status, r
	}
	status, r := ready()
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, r.Saturated)

	// The token holder's start that never finishes its body.
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /api/harvest/workflows/charge/start HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer t-ops\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if status, r = ready(); status == http.StatusServiceUnavailable {
			break
		}
		require.True(t, time.Now().Before(deadline), "/readyz did not say the API is saturated within 30s")
		time.Sleep(20 * time.Millisecond) // poll interval, not synchronisation
	}
	require.Equal(t, api.ReadyStatusNotReady, r.Status)
	require.Equal(t, []string{budgetAPI}, r.Saturated)
	require.Contains(t, r.Message, "max_in_flight")

	status, body := send(http.MethodGet, "/api/harvest/admission", "t-ops", "")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Contains(t, body, "ingest is serving 1 API requests already (max_in_flight)")
	status, body = send(http.MethodPost, "/api/harvest/workflows/charge/start", "", `{"input": {}}`)
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, body = send(http.MethodPost, "/api/harvest/workflows/charge/start", "t-nobody", `{"input": {}}`)
	require.Equal(t, http.StatusUnauthorized, status, body)

	require.NoError(t, conn.Close())
	deadline = time.Now().Add(30 * time.Second)
	for {
		if status, r = ready(); status == http.StatusOK {
			break
		}
		require.True(t, time.Now().Before(deadline), "/readyz did not say ready within 30s of the slot's release")
		time.Sleep(20 * time.Millisecond) // poll interval, not synchronisation
	}
	require.Empty(t, r.Saturated)
}
