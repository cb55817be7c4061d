package ingest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// browserAPI is an ingest served over HTTP on loopback, as harvest dev
// serves it, with cfg's Auth and AllowedHosts, a signed and an unsigned
// webhook source, and a declared workflow; no scheduler applies what it
// publishes.
type browserAPI struct {
	t   *testing.T
	url string
	top *broker.Topology
}

func newBrowserAPI(t *testing.T, cfg Config) *browserAPI {
	t.Helper()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	cfg.Topology, cfg.NC, cfg.OutcomeWait = top, nc, 50*time.Millisecond
	cfg.DeclaredWorkflows = []string{"charge"}
	cfg.Webhooks = []webhook.Endpoint{
		{Source: webhook.Source{Name: "signed", Kind: webhook.KindHMAC, Secrets: []string{testHookSecret}, Header: "X-Signature", Prefix: "sha256="},
			Rules: []webhook.Rule{{Event: "order.created", Workflow: "charge"}}},
		{Source: webhook.Source{Name: "unsigned", Kind: webhook.KindNone, AllowUnsigned: true},
			Rules: []webhook.Rule{{Event: "order.created", Workflow: "charge"}}},
	}
	s, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &browserAPI{t: t, url: srv.URL, top: top}
}

// send sends method path with body and header (name, value pairs; "Host"
// sets the Host header) and returns the status and the error code.
func (a *browserAPI) send(method, path, body string, header ...string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequestWithContext(a.t.Context(), method, a.url+path, strings.NewReader(body))
	require.NoError(a.t, err)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	var e api.ErrorResponse
	if resp.StatusCode >= 400 {
		require.NoError(a.t, json.Unmarshal(raw, &e), "%d %s", resp.StatusCode, raw)
	}
	return resp.StatusCode, e.Error
}

// published is how many commands the command stream holds.
func (a *browserAPI) published() uint64 {
	a.t.Helper()
	st, err := a.top.JS.Stream(a.t.Context(), broker.CommandStream)
	require.NoError(a.t, err)
	info, err := st.Info(a.t.Context())
	require.NoError(a.t, err)
	return info.State.Msgs
}

const chargeBody = `{"input": {"amount_cents": 500, "customer_id": "cus_1"}}`

// TestTheOpenAPIRefusesWhatAPageOnAnotherSiteSends: on an API that needs
// no token, what a web page on another site can send without a CORS
// preflight (a form's body types, text/plain, no body), with the
// Sec-Fetch-Site or Origin headers a browser adds, is refused with 403
// cross_site_request and publishes nothing: a start, a cancel, an
// admission gate closed. The same request from the API's own origin, one
// with a JSON body (which a browser would have asked about first), and
// one from a client that is not a browser are served.
func TestTheOpenAPIRefusesWhatAPageOnAnotherSiteSends(t *testing.T) {
	t.Parallel()
	a := newBrowserAPI(t, Config{})
	start := "/api/harvest/workflows/charge/start"
	cancel := "/api/harvest/executions/" + testExecutionID + "/cancel"

	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
	}{
		{"a form posted cross-site", "POST", start, chargeBody, []string{"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}},
		{"text/plain fetched cross-site", "POST", start, chargeBody, []string{"Content-Type", "text/plain;charset=UTF-8", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}},
		{"a multipart form", "POST", start, chargeBody, []string{"Content-Type", "multipart/form-data; boundary=x", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}},
		{"from another port of localhost (same-site)", "POST", start, chargeBody, []string{"Content-Type", "text/plain", "Sec-Fetch-Site", "same-site", "Origin", "http://127.0.0.1:3000"}},
		{"a browser that sends Origin only", "POST", start, chargeBody, []string{"Content-Type", "text/plain", "Origin", "https://evil.example"}},
		{"a sandboxed page (Origin null)", "POST", start, chargeBody, []string{"Content-Type", "text/plain", "Origin", "null"}},
		{"a cancel without a body", "POST", cancel, "", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}},
		{"an admission gate closed", "POST", "/api/harvest/admission/charge/close", `{"reason": "x"}`, []string{"Content-Type", "text/plain", "Sec-Fetch-Site", "cross-site"}},
		{"an unsigned webhook source", "POST", "/hooks/unsigned", `{"type": "order.created", "id": "evt_1"}`, []string{"Content-Type", "text/plain", "Sec-Fetch-Site", "cross-site"}},
	} {
		status, code := a.send(tc.method, tc.path, tc.body, tc.header...)
		require.Equal(t, http.StatusForbidden, status, tc.name)
		require.Equal(t, api.CodeCrossSiteRequest, code, tc.name)
	}
	require.Zero(t, a.published(), "nothing refused was published")

	// Served: from the API's own origin, a JSON body, the user's own
	// navigation, and a client that is no browser (curl -d sends a form's
	// content type).
	for _, header := range [][]string{
		{"Content-Type", "text/plain", "Sec-Fetch-Site", "same-origin", "Origin", a.url},
		{"Content-Type", "text/plain", "Origin", a.url},
		{"Content-Type", "application/json", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"},
		{"Content-Type", "text/plain", "Sec-Fetch-Site", "none"},
		{"Content-Type", "application/x-www-form-urlencoded"},
	} {
		status, code := a.send("POST", start, chargeBody, header...)
		require.Equal(t, http.StatusAccepted, status, "%v: %s", header, code)
	}
	require.EqualValues(t, 5, a.published())
	// Reads are not refused for their origin: a page cannot read the
	// answer of another origin.
	status, _ := a.send("GET", "/openapi.json", "", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	require.Equal(t, http.StatusOK, status)
}

// TestTheOpenAPIAnswersOnlyLoopbackHosts: while the API needs no token,
// a request naming a Host that is not a loopback name or address (a page
// whose name now resolves to 127.0.0.1: DNS rebinding) is answered 421
// host_not_allowed and publishes nothing, even from the page's own
// origin with a JSON body; allowed_hosts adds names, addresses and CIDRs.
// Health checks and signed webhook deliveries are answered whatever their
// Host; an unsigned source is not. With tokens, any Host is answered
// unless allowed_hosts is set.
func TestTheOpenAPIAnswersOnlyLoopbackHosts(t *testing.T) {
	t.Parallel()
	a := newBrowserAPI(t, Config{})
	rebound := []string{"Host", "evil.example:8080", "Content-Type", "application/json", "Sec-Fetch-Site", "same-origin", "Origin", "http://evil.example:8080"}
	for _, req := range [][2]string{{"POST", "/api/harvest/workflows/charge/start"}, {"GET", "/api/harvest/executions"}, {"GET", "/ui/executions"},
		{"POST", "/ui/executions/" + testExecutionID + "/cancel"}, {"GET", "/metrics"}, {"POST", "/hooks/unsigned"}} {
		status, code := a.send(req[0], req[1], chargeBody, rebound...)
		require.Equal(t, http.StatusMisdirectedRequest, status, req)
		require.Equal(t, api.CodeHostNotAllowed, code, req)
	}
	for _, host := range []string{"127.0.0.1.evil.example", "localhost.evil.example", "10.0.0.1", "0.0.0.0:8080", "[::]:8080"} {
		status, code := a.send("POST", "/api/harvest/workflows/charge/start", chargeBody, "Host", host, "Content-Type", "application/json")
		require.Equal(t, http.StatusMisdirectedRequest, status, host)
		require.Equal(t, api.CodeHostNotAllowed, code, host)
	}
	require.Zero(t, a.published())
	for _, host := range []string{"localhost:8080", "LOCALHOST", "127.0.0.1", "127.1.2.3:9", "[::1]:8080", "[::ffff:127.0.0.1]:80"} {
		status, code := a.send("POST", "/api/harvest/workflows/charge/start", chargeBody, "Host", host, "Content-Type", "application/json")
		require.Equal(t, http.StatusAccepted, status, "%s: %s", host, code)
	}
	// Health checks, and a signed source's deliveries (through a tunnel,
	// say), whatever the Host: a bad signature is refused for itself.
	status, _ := a.send("GET", "/readyz", "", "Host", "10.0.0.7:8080")
	require.NotEqual(t, http.StatusMisdirectedRequest, status)
	status, _ = a.send("GET", "/healthz", "", "Host", "10.0.0.7:8080")
	require.Equal(t, http.StatusOK, status)
	status, code := a.send("POST", "/hooks/signed", `{"type": "order.created"}`, "Host", "abc.tunnel.example", "Content-Type", "application/json", "X-Signature", "sha256=00")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, api.CodeInvalidSignature, code)

	// allowed_hosts for a real deployment.
	d := newBrowserAPI(t, Config{AllowedHosts: []string{"harvest.internal", "10.0.0.0/8", "fd00::1"}})
	for _, host := range []string{"harvest.internal:8080", "HARVEST.internal.", "10.1.2.3", "[fd00::1]:8080", "localhost"} {
		status, code := d.send("GET", "/openapi.json", "", "Host", host)
		require.Equal(t, http.StatusOK, status, "%s: %s", host, code)
	}
	for _, host := range []string{"evil.internal", "11.0.0.1", "x.harvest.internal"} {
		status, code := d.send("GET", "/openapi.json", "", "Host", host)
		require.Equal(t, http.StatusMisdirectedRequest, status, host)
		require.Equal(t, api.CodeHostNotAllowed, code, host)
	}

	// With tokens the Host does not matter, unless allowed_hosts is set.
	authn, err := auth.New([]auth.Token{{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}}})
	require.NoError(t, err)
	withTokens := newBrowserAPI(t, Config{Auth: authn})
	status, _ = withTokens.send("GET", "/api/harvest/workflows", "", "Host", "harvest.example.com", "Authorization", "Bearer t-ops")
	require.NotEqual(t, http.StatusMisdirectedRequest, status)
	pinned := newBrowserAPI(t, Config{Auth: authn, AllowedHosts: []string{"harvest.example.com"}})
	status, _ = pinned.send("GET", "/openapi.json", "", "Host", "harvest.example.com")
	require.Equal(t, http.StatusOK, status)
	status, code = pinned.send("GET", "/openapi.json", "", "Host", "other.example.com")
	require.Equal(t, http.StatusMisdirectedRequest, status)
	require.Equal(t, api.CodeHostNotAllowed, code)
}

// TestAllowedHostsAreChecked: an allowed_hosts entry that is no host name,
// address or CIDR is refused by name.
func TestAllowedHostsAreChecked(t *testing.T) {
	t.Parallel()
	for _, entry := range []string{"", "http://harvest.internal", "harvest.internal:8080", "10.0.0.0/33", "a b", "harvest.internal/x"} {
		_, err := parseHostRule(entry)
		require.Error(t, err, entry)
	}
	for _, entry := range []string{"harvest.internal", "10.0.0.0/8", "::1", "[fd00::1]", "Harvest.Internal."} {
		_, err := parseHostRule(entry)
		require.NoError(t, err, entry)
	}
}
