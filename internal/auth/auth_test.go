package auth_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/auth"
)

func TestAuthenticateFindsTheTokenByItsHash(t *testing.T) {
	a, err := auth.New([]auth.Token{
		{Name: "billing-service", SHA256: auth.Hash("t-billing"), Scopes: []auth.Scope{auth.ScopeStart, auth.ScopeRead}, Workflows: []string{"charge", "refund"}},
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}},
	})
	require.NoError(t, err)

	p, err := a.Authenticate("Bearer t-billing")
	require.NoError(t, err)
	require.Equal(t, "billing-service", p.Name())
	require.True(t, p.Has(auth.ScopeStart))
	require.True(t, p.Has(auth.ScopeRead))
	require.False(t, p.Has(auth.ScopeCancel))
	require.False(t, p.Has(auth.ScopeAdmin))
	require.False(t, p.Has(auth.ScopeMetrics), "read does not hold metrics")
	require.True(t, p.Sees("charge"))
	require.False(t, p.Sees("onboarding"))
	require.Equal(t, []string{"charge", "refund"}, p.Workflows())

	ops, err := a.Authenticate("bearer t-ops") // the scheme is case-insensitive
	require.NoError(t, err)
	for _, s := range auth.Scopes() {
		require.True(t, ops.Has(s), "admin holds %s", s)
	}
	require.True(t, ops.Sees("anything"))
	require.Nil(t, ops.Workflows())

	for header, want := range map[string]error{
		"":                                auth.ErrNoCredentials,
		"t-ops":                           auth.ErrMalformed,
		"Basic dXNlcjpwdw":                auth.ErrMalformed,
		"Bearer ":                         auth.ErrMalformed,
		"Bearer a b":                      auth.ErrMalformed,
		"Bearer t-opsx":                   auth.ErrUnknownToken,
		"Bearer " + auth.HashHex("t-ops"): auth.ErrUnknownToken, // the hash is not the token
	} {
		_, err := a.Authenticate(header)
		require.ErrorIs(t, err, want, "%q", header)
	}
}

func TestNewRefusesATokenItCannotUse(t *testing.T) {
	h := auth.Hash("x")
	for _, c := range []struct {
		tokens []auth.Token
		want   string
	}{
		{[]auth.Token{{SHA256: h, Scopes: []auth.Scope{auth.ScopeRead}}}, "token 0: name is required"},
		{[]auth.Token{{Name: "a", SHA256: h}}, `token "a": scopes are required`},
		{[]auth.Token{{Name: "a", Scopes: []auth.Scope{auth.ScopeRead}}}, `token "a": its sha256 is required`},
		{[]auth.Token{{Name: "a", SHA256: h, Scopes: []auth.Scope{"write"}}}, `token "a": unknown scope "write": want one of start, signal, read, cancel, metrics, admin`},
		{[]auth.Token{{Name: "a", SHA256: h, Scopes: []auth.Scope{auth.ScopeMetrics}, Workflows: []string{"charge"}}}, `token "a": scope metrics reads every workflow's series, and the token is limited to workflows`},
		{[]auth.Token{{Name: "a", SHA256: h, Scopes: []auth.Scope{auth.ScopeRead}}, {Name: "a", SHA256: auth.Hash("y"), Scopes: []auth.Scope{auth.ScopeRead}}}, `token "a": name used twice`},
		{[]auth.Token{{Name: "a", SHA256: h, Scopes: []auth.Scope{auth.ScopeRead}}, {Name: "b", SHA256: h, Scopes: []auth.Scope{auth.ScopeRead}}}, `token "b": same token as "a"`},
	} {
		_, err := auth.New(c.tokens)
		require.EqualError(t, err, c.want)
	}
}

func TestHashesAndNewTokens(t *testing.T) {
	// The SHA-256 of "test", as sha256sum prints it.
	require.Equal(t, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", auth.HashHex("test"))
	h, err := auth.ParseHash("9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08")
	require.NoError(t, err)
	require.Equal(t, auth.Hash("test"), h)
	for _, bad := range []string{"", "9f86", strings.Repeat("z", 64), auth.HashHex("test") + "00"} {
		_, err := auth.ParseHash(bad)
		require.ErrorContains(t, err, "want the 64 hex digits of a SHA-256")
	}

	a, err := auth.NewToken()
	require.NoError(t, err)
	b, err := auth.NewToken()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "hvt_"))
	require.Len(t, a, len("hvt_")+43, "32 random bytes in unpadded base64")
	require.NotContains(t, a, " ")
}
