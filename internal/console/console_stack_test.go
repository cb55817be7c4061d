package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestConsoleIsOneMoreClientOfTheAPI: on an API with tokens the console
// asks for one, refuses a token the API does not know, and shows and does
// only what the token's scopes and workflows allow; a form posted from
// another site changes nothing.
func TestConsoleIsOneMoreClientOfTheAPI(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Token{
		{Name: "billing-service", SHA256: auth.Hash("t-billing"), Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeCancel}, Workflows: []string{"charge"}},
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}},
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}},
	})
	require.NoError(t, err)
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Auth: a}})
	ops, err := client.New(client.Config{BaseURL: s.URL(), Token: "t-ops"})
	require.NoError(t, err)
	ctx := t.Context()
	waiting, err := ops.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 2}, client.StartOptions{IdempotencyKey: "console-auth-1"})
	require.NoError(t, err)

	// A browser of its own: cookies kept, redirects shown, not followed.
	type page struct {
		status   int
		location string
		body     string
		csp      string
	}
	newBrowser := func() func(method, path string, form url.Values, header ...string) page {
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		return func(method, path string, form url.Values, header ...string) page {
			t.Helper()
			var body io.Reader
			if form != nil {
				body = strings.NewReader(form.Encode())
			}
			req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, body)
			require.NoError(t, err)
			if form != nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := hc.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return page{resp.StatusCode, resp.Header.Get("Location"), string(data), resp.Header.Get("Content-Security-Policy")}
		}
	}

	// No token: every page leads to the sign-in form, and back.
	anon := newBrowser()
	p := anon(http.MethodGet, "/ui/executions?status=Running", nil)
	require.Equal(t, http.StatusSeeOther, p.status)
	require.Equal(t, "/ui/login?next="+url.QueryEscape("/ui/executions?status=Running"), p.location)
	p = anon(http.MethodGet, p.location, nil)
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, `type="password" name="token"`)
	// A token the API does not know is refused at sign-in.
	p = anon(http.MethodPost, "/ui/login", url.Values{"token": {"t-nobody"}, "next": {"/ui/executions"}})
	require.Equal(t, http.StatusUnauthorized, p.status)
	require.Contains(t, p.body, "The API does not know this token.")
	// A redirect target outside the console is not followed.
	p = anon(http.MethodPost, "/ui/login", url.Values{"token": {"t-reader"}, "next": {"//evil.example/"}})
	require.Equal(t, "/ui/executions", p.location)

	// The reader sees everything and may change nothing.
	reader := newBrowser()
	p = reader(http.MethodPost, "/ui/login", url.Values{"token": {"t-reader"}, "next": {"/ui/executions/" + waiting.ExecutionID}})
	require.Equal(t, http.StatusSeeOther, p.status)
	p = reader(http.MethodGet, p.location, nil)
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, "console-auth-1")
	p = reader(http.MethodPost, "/ui/executions/"+waiting.ExecutionID+"/cancel", url.Values{"reason": {"no"}})
	require.Equal(t, http.StatusForbidden, p.status)
	require.Contains(t, p.body, "token &#34;reader&#34; lacks scope cancel")
	p = reader(http.MethodPost, "/ui/workflows/collect/admission", url.Values{"state": {"closed"}, "reason": {"no"}})
	require.Equal(t, http.StatusForbidden, p.status)

	// A token limited to charge: the collect execution does not exist for
	// it, and the list shows none of it.
	billing := newBrowser()
	billing(http.MethodPost, "/ui/login", url.Values{"token": {"t-billing"}})
	p = billing(http.MethodGet, "/ui/executions/"+waiting.ExecutionID, nil)
	require.Equal(t, http.StatusNotFound, p.status)
	p = billing(http.MethodPost, "/ui/executions/"+waiting.ExecutionID+"/cancel", url.Values{})
	require.Equal(t, http.StatusNotFound, p.status)
	p = billing(http.MethodGet, "/ui/executions", nil)
	require.Equal(t, http.StatusOK, p.status)
	require.NotContains(t, p.body, "console-auth-1")

	// A form posted from another site is refused before the API is called,
	// whatever cookie the browser sends along.
	opsUI := newBrowser()
	opsUI(http.MethodPost, "/ui/login", url.Values{"token": {"t-ops"}})
	p = opsUI(http.MethodPost, "/ui/executions/"+waiting.ExecutionID+"/cancel", url.Values{}, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, p.status)
	e, err := ops.Describe(ctx, waiting.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, e.Status)

	// From the console itself, ops cancels; signing out forgets the token.
	p = opsUI(http.MethodPost, "/ui/executions/"+waiting.ExecutionID+"/cancel", url.Values{"reason": {"console test"}}, "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusSeeOther, p.status)
	require.Equal(t, "/ui/executions/"+waiting.ExecutionID+"?done=cancel", p.location)
	cancelled, err := ops.WaitResult(ctx, waiting.ExecutionID, nil)
	require.Error(t, err)
	require.Equal(t, client.StatusCancelled, cancelled.Status)
	opsUI(http.MethodPost, "/ui/logout", url.Values{}, "Sec-Fetch-Site", "same-origin")
	p = opsUI(http.MethodGet, "/ui/workflows", nil)
	require.Equal(t, http.StatusSeeOther, p.status)

	// Every page forbids framing and scripts.
	p = reader(http.MethodGet, "/ui/nosuch", nil)
	require.Equal(t, http.StatusNotFound, p.status)
	require.Contains(t, p.csp, "default-src 'none'")
	require.Contains(t, p.csp, "frame-ancestors 'none'")
}
