package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
)

// tokenAPI is an API that answers GET /api/harvest/workers for the
// tokens it knows, 401 for any other, and remembers the Authorization
// headers it was sent.
type tokenAPI struct {
	mu    sync.Mutex
	known map[string]bool
	seen  []string
}

func (a *tokenAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := r.Header.Get("Authorization")
	a.seen = append(a.seen, h)
	w.Header().Set("Content-Type", "application/json")
	if !a.known[strings.TrimPrefix(h, "Bearer ")] {
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.CodeUnauthenticated, Message: "unknown token"})
		return
	}
	_ = json.NewEncoder(w).Encode(api.ListWorkersResponse{})
}

func (a *tokenAPI) forget(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.known, token)
}

func (a *tokenAPI) lastAuthorization() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen[len(a.seen)-1]
}

// sessionConsole is a console on an API with tokens, its clock moved by
// the test, trusting the proxies of 10.0.0.0/8.
func sessionConsole(t *testing.T) (*Console, *tokenAPI, *time.Time) {
	t.Helper()
	a, err := auth.New([]auth.Token{
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}},
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}},
	})
	require.NoError(t, err)
	api := &tokenAPI{known: map[string]bool{"t-reader": true, "t-ops": true}}
	now := time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)
	c, err := New(Config{API: api, Auth: a, TrustedProxies: []string{"10.0.0.0/8"}, Now: func() time.Time { return now }})
	require.NoError(t, err)
	return c, api, &now
}

// visit sends a request to the console with cookies (and, in header,
// name-value pairs; "RemoteAddr" sets the peer) and returns its answer.
func visit(t *testing.T, c *Console, method, target string, form url.Values, cookies []*http.Cookie, header ...string) *http.Response {
	t.Helper()
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, target, nil)
	}
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "RemoteAddr" {
			req.RemoteAddr = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	return rec.Result()
}

func signIn(t *testing.T, c *Console, token string, header ...string) *http.Cookie {
	t.Helper()
	resp := visit(t, c, http.MethodPost, "/ui/login", url.Values{"token": {token}, "next": {"/ui/workers"}}, nil, header...)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	return resp.Cookies()[0]
}

// TestSignInKeepsTheTokenOnTheServer: signing in gives the browser an
// opaque session id, never the token, in an HttpOnly, SameSite=Strict
// cookie on /ui/; the pages call the API with the session's token. A
// cookie holding a token (what earlier versions kept, and what a stolen
// cookie would have been) signs no one in, and is cleared.
func TestSignInKeepsTheTokenOnTheServer(t *testing.T) {
	t.Parallel()
	c, api, _ := sessionConsole(t)

	ck := signIn(t, c, "t-reader")
	require.Equal(t, sessionCookie, ck.Name)
	require.NotContains(t, ck.Value, "t-reader")
	require.GreaterOrEqual(t, len(ck.Value), 43, "32 random bytes")
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.Equal(t, "/ui/", ck.Path)
	require.False(t, ck.Secure, "plain HTTP, from no trusted proxy")
	require.Equal(t, int(DefaultSessionTTL.Seconds()), ck.MaxAge)
	require.NotEqual(t, ck.Value, signIn(t, c, "t-reader").Value, "each sign-in is a session of its own")

	resp := visit(t, c, http.MethodGet, "/ui/workers", nil, []*http.Cookie{ck})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "Bearer t-reader", api.lastAuthorization())

	// A token in a cookie is no session.
	for _, forged := range []*http.Cookie{{Name: legacyTokenCookie, Value: "t-ops"}, {Name: sessionCookie, Value: "t-ops"}} {
		resp = visit(t, c, http.MethodGet, "/ui/workers", nil, []*http.Cookie{forged})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, forged.Name)
		require.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/ui/login"), forged.Name)
		cleared := false
		for _, set := range resp.Cookies() {
			cleared = cleared || set.Name == forged.Name && set.MaxAge < 0
		}
		require.True(t, cleared, "the browser is told to forget %s", forged.Name)
	}

	// A token the API does not know starts no session.
	resp = visit(t, c, http.MethodPost, "/ui/login", url.Values{"token": {"t-nobody"}}, nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Empty(t, resp.Cookies())
}

// TestASessionEndsAtSignOutExpiryAndRevocation: a session id kept after
// signing out, past its expiry, or after the API stopped knowing its
// token signs no one in.
func TestASessionEndsAtSignOutExpiryAndRevocation(t *testing.T) {
	t.Parallel()
	c, api, now := sessionConsole(t)

	// Signed out: the id, replayed, leads to the sign-in form.
	ck := signIn(t, c, "t-ops")
	require.Equal(t, http.StatusOK, visit(t, c, http.MethodGet, "/ui/workers", nil, []*http.Cookie{ck}).StatusCode)
	resp := visit(t, c, http.MethodPost, "/ui/logout", url.Values{}, []*http.Cookie{ck})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	require.Negative(t, resp.Cookies()[0].MaxAge)
	resp = visit(t, c, http.MethodGet, "/ui/workers", nil, []*http.Cookie{ck})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/ui/login"))

	// Expired: valid a second before its 12 hours, not at them.
	ck = signIn(t, c, "t-ops")
	*now = now.Add(DefaultSessionTTL - time.Second)
	require.Equal(t, http.StatusOK, visit(t, c, http.MethodGet, "/ui/workers", nil, []*http.Cookie{ck}).StatusCode)
	*now = now.Add(time.Second)
	require.Equal(t, http.StatusSeeOther, visit(t, c, http.MethodGet, "/ui/workers", nil, []*http.Cookie{ck}).StatusCode)

	// The API no longer knows the token: the session ends with the 401.
	ck = signIn(t, c, "t-reader")
	api.forget("t-reader")
	require.Equal(t, http.StatusSeeOther, visit(t, c, http.MethodGet, "/ui/workers", nil, []*http.Cookie{ck}).StatusCode)
	api.mu.Lock()
	api.known["t-reader"] = true
	api.mu.Unlock()
	require.Equal(t, http.StatusSeeOther, visit(t, c, http.MethodGet, "/ui/workers", nil, []*http.Cookie{ck}).StatusCode,
		"the session was revoked, not merely refused once")
}

// TestTheSessionCookieIsSecureBehindTLS: the cookie is Secure on a TLS
// connection, and behind a trusted proxy that says X-Forwarded-Proto:
// https; the same header from anyone else is not believed.
func TestTheSessionCookieIsSecureBehindTLS(t *testing.T) {
	t.Parallel()
	c, _, _ := sessionConsole(t)

	resp := visit(t, c, http.MethodPost, "https://harvest.example/ui/login", url.Values{"token": {"t-reader"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, resp.Cookies()[0].Secure, "over TLS")
	require.True(t, signIn(t, c, "t-reader", "RemoteAddr", "10.1.2.3:5555", "X-Forwarded-Proto", "https").Secure, "from a trusted proxy")
	require.True(t, signIn(t, c, "t-reader", "RemoteAddr", "[::ffff:10.9.9.9]:5555", "X-Forwarded-Proto", "HTTPS, http").Secure)
	require.False(t, signIn(t, c, "t-reader", "RemoteAddr", "192.0.2.1:5555", "X-Forwarded-Proto", "https").Secure, "from anyone else")
	require.False(t, signIn(t, c, "t-reader", "RemoteAddr", "10.1.2.3:5555", "X-Forwarded-Proto", "http").Secure)

	_, err := New(Config{API: http.NotFoundHandler(), TrustedProxies: []string{"proxy.internal"}})
	require.ErrorContains(t, err, `trusted proxy "proxy.internal"`)
}
