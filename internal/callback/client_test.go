package callback

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// loopbackPolicy allows the loopback httptest servers.
var loopbackPolicy = Policy{AllowHosts: []string{"127.0.0.0/8", "::1"}, Resolver: testResolver}

const testBody = `{"workflow_id":"wf-1","status":"completed"}`

func newClient(t *testing.T, p Policy, timeout time.Duration) *Client {
	t.Helper()
	c := NewClient(p, timeout)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// countingServer counts the requests it receives and answers 204.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	return srv, &n
}

func requireDeliveryError(t *testing.T, err error) *DeliveryError {
	t.Helper()
	var de *DeliveryError
	require.ErrorAs(t, err, &de)
	return de
}

func TestDeliverHeadersAndBody(t *testing.T) {
	type seen struct {
		method string
		path   string
		header http.Header
		body   string
	}
	reqs := make(chan seen, 2)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reqs <- seen{r.Method, r.URL.RequestURI(), r.Header.Clone(), string(b)}
		w.WriteHeader(http.StatusOK)
	})
	c := newClient(t, loopbackPolicy, 5*time.Second)

	const id = "3f0e8f9a-1c2b-4d5e-9f80-112233445566"
	for range 2 {
		require.NoError(t, c.Deliver(t.Context(), srv.URL+"/hooks/done?tenant=a", id, []byte(testBody)))
	}
	first, second := <-reqs, <-reqs
	for _, s := range []seen{first, second} {
		require.Equal(t, http.MethodPost, s.method)
		require.Equal(t, "/hooks/done?tenant=a", s.path)
		require.Equal(t, testBody, s.body)
		require.Equal(t, "application/json", s.header.Get("Content-Type"))
		require.Equal(t, "harvest-callback/1", s.header.Get("User-Agent"))
		require.Equal(t, id, s.header.Get("Harvest-Delivery-Id"))
	}
	require.Equal(t, first.header.Get("Harvest-Delivery-Id"), second.header.Get("Harvest-Delivery-Id"))
}

func TestDeliverStatus(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusTeapot)
			return
		}
		if ra := r.URL.Query().Get("retry_after"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, strings.Repeat("x", 1<<10))
	})
	c := newClient(t, loopbackPolicy, 5*time.Second)

	tests := []struct {
		code       int
		query      string
		ok         bool
		retryable  bool
		retryAfter time.Duration
	}{
		{code: 200, ok: true},
		{code: 201, ok: true},
		{code: 202, ok: true},
		{code: 204, ok: true},
		{code: 400},
		{code: 401},
		{code: 403},
		{code: 404},
		{code: 410},
		{code: 413},
		{code: 422},
		{code: 408, retryable: true},
		{code: 425, retryable: true},
		{code: 429, retryable: true},
		{code: 429, query: "?retry_after=7", retryable: true, retryAfter: 7 * time.Second},
		{code: 429, query: "?retry_after=999999", retryable: true, retryAfter: 10 * time.Minute},
		{code: 429, query: "?retry_after=soon", retryable: true},
		{code: 400, query: "?retry_after=7"},
		{code: 500, retryable: true},
		{code: 502, retryable: true},
		{code: 503, query: "?retry_after=3", retryable: true, retryAfter: 3 * time.Second},
		{code: 504, retryable: true},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.code)+tt.query, func(t *testing.T) {
			err := c.Deliver(t.Context(), srv.URL+"/status/"+strconv.Itoa(tt.code)+tt.query, "id-1", []byte(testBody))
			if tt.ok {
				require.NoError(t, err)
				return
			}
			de := requireDeliveryError(t, err)
			require.Equal(t, tt.code, de.StatusCode)
			require.Equal(t, tt.retryable, de.Retryable)
			require.Equal(t, tt.retryAfter, de.RetryAfter)
			require.NotErrorIs(t, err, ErrRejected)
			require.ErrorContains(t, err, strconv.Itoa(tt.code))
		})
	}
}

func TestDeliverRefusesForbiddenTargets(t *testing.T) {
	srv, hits := countingServer(t)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hostPort := func(host string) string { return "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/cb" }

	// Every address is public at validation time; afterwards the name
	// points at loopback.
	var rebindCalls atomic.Int64
	rebinding := resolverFunc(func(_ context.Context, host string) ([]net.IPAddr, error) {
		if rebindCalls.Add(1) == 1 {
			return ipAddrs("93.184.216.34"), nil
		}
		return ipAddrs("127.0.0.1"), nil
	})

	tests := []struct {
		name     string
		policy   Policy
		url      string
		validate bool // Validate must accept the URL before Deliver
	}{
		{name: "loopback literal without allow list", policy: Policy{Resolver: testResolver}, url: srv.URL + "/cb"},
		{name: "localhost without allow list", policy: Policy{Resolver: testResolver}, url: hostPort("localhost")},
		{name: "mapped loopback literal", policy: Policy{Resolver: testResolver}, url: hostPort("::ffff:127.0.0.1")},
		{name: "allow list for another host", policy: Policy{AllowHosts: []string{"10.0.0.0/8", "hook.internal"}, Resolver: testResolver}, url: srv.URL + "/cb"},
		{name: "DNS rebinding", policy: Policy{Resolver: rebinding}, url: hostPort("rebind.test"), validate: true},
		{name: "one bad address of several", policy: Policy{Resolver: fakeResolver{"multi.test": {"93.184.216.34", "127.0.0.1"}}}, url: hostPort("multi.test")},
		{name: "bad scheme", policy: loopbackPolicy, url: "ftp://127.0.0.1/"},
		{name: "userinfo", policy: loopbackPolicy, url: "http://u:p@" + srv.Listener.Addr().String() + "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.validate {
				require.NoError(t, tt.policy.Validate(t.Context(), tt.url))
			}
			c := newClient(t, tt.policy, 5*time.Second)
			err := c.Deliver(t.Context(), tt.url, "id-1", []byte(testBody))
			require.ErrorIs(t, err, ErrRejected)
			de := requireDeliveryError(t, err)
			require.False(t, de.Retryable)
			require.Zero(t, de.StatusCode)
		})
	}
	require.Zero(t, hits.Load(), "a forbidden target was contacted")
}

func TestDeliverRedirects(t *testing.T) {
	inner, innerHits := countingServer(t)
	redirector := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		http.Redirect(w, r, r.URL.Query().Get("to"), code)
	})
	c := newClient(t, loopbackPolicy, 5*time.Second)

	tests := []struct {
		name string
		code int
		to   string
	}{
		{name: "302 to metadata", code: http.StatusFound, to: "http://169.254.169.254/latest/meta-data"},
		{name: "307 to metadata", code: http.StatusTemporaryRedirect, to: "http://169.254.169.254/latest/meta-data"},
		{name: "308 to private", code: http.StatusPermanentRedirect, to: "http://10.0.0.1/"},
		{name: "301 to loopback server", code: http.StatusMovedPermanently, to: inner.URL + "/cb"},
		{name: "307 to allowed loopback server", code: http.StatusTemporaryRedirect, to: inner.URL + "/cb"},
		{name: "303 to file", code: http.StatusSeeOther, to: "file:///etc/passwd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := redirector.URL + "/?" + url.Values{"code": {strconv.Itoa(tt.code)}, "to": {tt.to}}.Encode()
			err := c.Deliver(t.Context(), u, "id-1", []byte(testBody))
			require.ErrorIs(t, err, ErrRejected)
			require.ErrorContains(t, err, "redirect")
			de := requireDeliveryError(t, err)
			require.Equal(t, tt.code, de.StatusCode)
			require.False(t, de.Retryable)
		})
	}
	require.Zero(t, innerHits.Load(), "a redirect was followed")
}

func TestDeliverAllowedTargets(t *testing.T) {
	srv, hits := countingServer(t)
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)

	tests := []struct {
		name   string
		policy Policy
		url    string
	}{
		{name: "loopback CIDR", policy: loopbackPolicy, url: srv.URL + "/cb"},
		{name: "name resolving into allowed CIDR", policy: Policy{
			AllowHosts: []string{"127.0.0.0/8"},
			Resolver:   fakeResolver{"hook.test": {"127.0.0.1"}},
		}, url: "http://hook.test:" + port + "/cb"},
		{name: "allow-listed name", policy: Policy{
			AllowHosts: []string{"Hook.Internal"},
			Resolver:   fakeResolver{"hook.internal": {"127.0.0.1"}},
		}, url: "http://hook.internal:" + port + "/cb"},
		{name: "first address unreachable", policy: Policy{
			AllowHosts: []string{"127.0.0.0/8"},
			// 127.0.0.2 has no listener on this port on Linux; the
			// dialer falls through to the next address.
			Resolver: fakeResolver{"two.test": {"127.0.0.2", "127.0.0.1"}},
		}, url: "http://two.test:" + port + "/cb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.policy, 5*time.Second)
			require.NoError(t, c.Deliver(t.Context(), tt.url, "id-1", []byte(testBody)))
		})
	}
	require.EqualValues(t, len(tests), hits.Load())
}

func TestDeliverHTTPSWithHostName(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.TLS == nil || r.TLS.ServerName != "example.com" {
			http.Error(w, "wrong SNI", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)

	p := Policy{AllowHosts: []string{"127.0.0.0/8"}, Resolver: fakeResolver{"example.com": {"127.0.0.1"}}}
	c := newClient(t, p, 5*time.Second)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c.tr.TLSClientConfig.RootCAs = pool

	// The dialer connects to the checked IP, but TLS still verifies the
	// URL's host name.
	require.NoError(t, c.Deliver(t.Context(), "https://example.com:"+port+"/cb", "id-1", []byte(testBody)))
	require.EqualValues(t, 1, hits.Load())
}

func TestDeliverNetworkErrorsAreRetryable(t *testing.T) {
	hangup := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	release := make(chan struct{})
	slow := newServer(t, func(_ http.ResponseWriter, r *http.Request) {
		// Reading the body to EOF lets the server notice the client
		// hanging up, which cancels r.Context().
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done(): // the client gave up
		case <-release: // test over
		}
	})
	t.Cleanup(func() { close(release) }) // runs before slow.Close
	tempDNS := Policy{AllowHosts: loopbackPolicy.AllowHosts, Resolver: resolverFunc(func(_ context.Context, host string) ([]net.IPAddr, error) {
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	})}
	nxDNS := Policy{AllowHosts: loopbackPolicy.AllowHosts, Resolver: fakeResolver{}}

	tests := []struct {
		name    string
		policy  Policy
		timeout time.Duration
		url     string
	}{
		{name: "connection closed", policy: loopbackPolicy, timeout: 5 * time.Second, url: hangup.URL},
		{name: "timeout", policy: loopbackPolicy, timeout: 100 * time.Millisecond, url: slow.URL},
		{name: "temporary DNS failure", policy: tempDNS, timeout: 5 * time.Second, url: "http://hook.test/"},
		{name: "host vanished from DNS", policy: nxDNS, timeout: 5 * time.Second, url: "http://hook.test/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.policy, tt.timeout)
			err := c.Deliver(t.Context(), tt.url, "id-1", []byte(testBody))
			de := requireDeliveryError(t, err)
			require.True(t, de.Retryable, "%v", err)
			require.Zero(t, de.StatusCode)
			require.NotErrorIs(t, err, ErrRejected)
		})
	}

	t.Run("cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		c := newClient(t, loopbackPolicy, 5*time.Second)
		err := c.Deliver(ctx, slow.URL, "id-1", []byte(testBody))
		require.ErrorIs(t, err, context.Canceled)
		require.True(t, requireDeliveryError(t, err).Retryable)
	})
}

func TestDeliverInvalidArguments(t *testing.T) {
	srv, hits := countingServer(t)
	tests := []struct {
		name   string
		policy Policy
		id     string
		body   string
	}{
		{name: "empty delivery id", policy: loopbackPolicy, id: "", body: testBody},
		{name: "delivery id with CRLF", policy: loopbackPolicy, id: "a\r\nX-Evil: 1", body: testBody},
		{name: "delivery id with space", policy: loopbackPolicy, id: "a b", body: testBody},
		{name: "delivery id too long", policy: loopbackPolicy, id: strings.Repeat("a", maxDeliveryIDLen+1), body: testBody},
		{name: "body not JSON", policy: loopbackPolicy, id: "id-1", body: "{not json"},
		{name: "empty body", policy: loopbackPolicy, id: "id-1", body: ""},
		{name: "malformed allow list", policy: Policy{AllowHosts: []string{"127.0.0.0/99"}}, id: "id-1", body: testBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.policy, 5*time.Second)
			err := c.Deliver(t.Context(), srv.URL, tt.id, []byte(tt.body))
			de := requireDeliveryError(t, err)
			require.False(t, de.Retryable)
			require.Zero(t, de.StatusCode)
		})
	}
	require.Zero(t, hits.Load())
}

func TestControlRechecksDialledAddress(t *testing.T) {
	c := NewClient(Policy{AllowHosts: []string{"10.0.0.0/8", "hook.internal", "meta.internal", "fd00:ec2::254"}}, 0)
	tests := []struct {
		addr   string
		byName bool // the URL's host is allow-listed by name
		ok     bool
	}{
		{addr: "93.184.216.34:443", ok: true},
		{addr: "[2606:4700:4700::1111]:443", ok: true},
		{addr: "10.1.2.3:80", ok: true},
		{addr: "127.0.0.1:80"},
		{addr: "[::1]:80"},
		{addr: "[::ffff:127.0.0.1]:80"},
		{addr: "169.254.169.254:80"},
		{addr: "not-an-address"},
		// A name on the allow list trusts every address but a metadata
		// one, which only an entry naming exactly it allows.
		{addr: "127.0.0.1:80", byName: true, ok: true},
		{addr: "192.168.1.1:80", byName: true, ok: true},
		{addr: "169.254.169.254:80", byName: true},
		{addr: "[::ffff:169.254.169.254]:80", byName: true},
		{addr: "[64:ff9b::a9fe:a9fe]:80", byName: true},
		{addr: "[fd00:ec2::254]:80", byName: true, ok: true},
		{addr: "[fd00:ec2::254]:80", ok: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s by name %t", tt.addr, tt.byName), func(t *testing.T) {
			err := c.control(tt.byName)("tcp", tt.addr, nil)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrRejected)
			var rej *RejectedError
			require.ErrorAs(t, err, &rej)
			require.NotContains(t, rej.Reason, strings.Trim(strings.Split(tt.addr, "]")[0], "["), "the reason names the address")
		})
	}
}

// TestDeliverRefusesAnAllowListedNameThatResolvesToMetadata: a host name
// on the allow list trusts what it resolves to, but a cloud metadata
// address only when an entry names exactly it. Delivery checks what the
// name resolves to when it connects, and refuses before dialling.
func TestDeliverRefusesAnAllowListedNameThatResolvesToMetadata(t *testing.T) {
	srv, hits := countingServer(t)
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	for _, addr := range []string{"169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe"} {
		t.Run(addr, func(t *testing.T) {
			// The name resolves to the loopback receiver and to the
			// metadata address: delivery must not pick the one that
			// works and ignore the other, nor dial the metadata one.
			p := Policy{AllowHosts: []string{"hook.internal", "169.254.0.0/16", "fd00::/8"},
				Resolver: fakeResolver{"hook.internal": {"127.0.0.1", addr}}}
			c := newClient(t, p, 5*time.Second)
			err := c.Deliver(t.Context(), "http://hook.internal:"+port+"/cb", "id-1", []byte(testBody))
			require.ErrorIs(t, err, ErrRejected)
			de := requireDeliveryError(t, err)
			require.False(t, de.Retryable)
			require.Equal(t, `host "hook.internal" resolves to a private address`, de.Reason())
			require.ErrorContains(t, err, netip.MustParseAddr(addr).Unmap().String(), "the log names the address")

			// Validate refuses it at the start too.
			require.ErrorIs(t, p.Validate(t.Context(), "http://hook.internal/cb"), ErrRejected)
		})
	}
	require.Zero(t, hits.Load(), "a name resolving to a metadata address was delivered to")

	// An entry naming exactly the address allows it.
	p := Policy{AllowHosts: []string{"hook.internal", "169.254.169.254"}, Resolver: fakeResolver{"hook.internal": {"169.254.169.254"}}}
	require.NoError(t, p.Validate(t.Context(), "http://hook.internal/cb"))
	require.NoError(t, NewClient(p, 0).control(true)("tcp", "169.254.169.254:80", nil))
}

func TestDeliveryErrorMessage(t *testing.T) {
	cause := errors.New("boom")
	require.Equal(t, "callback delivery failed (retryable, status 503): boom",
		(&DeliveryError{StatusCode: 503, Retryable: true, Err: cause}).Error())
	require.Equal(t, "callback delivery failed (permanent): boom",
		(&DeliveryError{Err: cause}).Error())
	require.ErrorIs(t, &DeliveryError{Err: cause}, cause)
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-5", 0},
		{"42", 42 * time.Second},
		{" 42 ", 42 * time.Second},
		{"600", 10 * time.Minute},
		{"601", 10 * time.Minute},
		{"99999999999999999999", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), 10 * time.Minute},
		{"tomorrow", 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			require.Equal(t, tt.want, parseRetryAfter(tt.in, now))
		})
	}
}

// TestDeliveryReasonsQuoteNoNetworkDetail: what a delivery's last_error
// records says what went wrong by category; the resolver's address, the
// addresses a name resolved to and Go's dial errors stay in Error, for the
// log.
func TestDeliveryReasonsQuoteNoNetworkDetail(t *testing.T) {
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())

	release := make(chan struct{})
	slow := newServer(t, func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	untrusted := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)
	failing := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	redirect := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://10.9.9.9/secret", http.StatusFound)
	})
	resolver := resolverFunc(func(_ context.Context, host string) ([]net.IPAddr, error) {
		switch host {
		case "down.test":
			return ipAddrs("127.0.0.1"), nil
		case "internal.test":
			return ipAddrs("10.7.7.7"), nil
		case "flaky.test":
			return nil, &net.DNSError{Err: "server misbehaving", Name: host, Server: "10.53.0.1:53", IsTemporary: true}
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, Server: "10.53.0.1:53", IsNotFound: true}
	})
	p := Policy{AllowHosts: []string{"127.0.0.0/8"}, Resolver: resolver}

	tests := []struct {
		name    string
		url     string
		timeout time.Duration
		reason  string
	}{
		{name: "connection refused", url: "http://down.test:" + closedPort + "/cb", reason: "connection refused"},
		{name: "timeout", url: slow.URL, timeout: 100 * time.Millisecond, reason: "timed out"},
		{name: "untrusted certificate", url: untrusted.URL, reason: "TLS failure"},
		{name: "name does not resolve", url: "http://gone.test/cb", reason: "name does not resolve"},
		{name: "resolver failure", url: "http://flaky.test/cb", reason: "name lookup failed"},
		{name: "private address", url: "http://internal.test/cb", reason: `host "internal.test" resolves to a private address`},
		{name: "receiver error", url: failing.URL, reason: "receiver answered 500 Internal Server Error"},
		{name: "redirect", url: redirect.URL, reason: "redirect (status 302) not followed: callback receivers must answer directly"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, p, cmp.Or(tt.timeout, 5*time.Second))
			err := c.Deliver(t.Context(), tt.url, "id-1", []byte(testBody))
			de := requireDeliveryError(t, err)
			require.Equal(t, tt.reason, de.Reason(), "error: %v", err)
			for _, leak := range []string{"10.53.0.1", "10.7.7.7", "10.9.9.9", "127.0.0.1", "dial", "lookup gone", "lookup flaky", "x509"} {
				require.NotContains(t, de.Reason(), leak)
			}
		})
	}
}
