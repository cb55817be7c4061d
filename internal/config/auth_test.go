package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/config"
)

// The example configuration: a token by its hash, limited to two
// workflows, and one read from a file.
func TestLoadAuthTokens(t *testing.T) {
	dir := t.TempDir()
	opsFile := filepath.Join(dir, "ops-token")
	require.NoError(t, os.WriteFile(opsFile, []byte("hvt_ops-token\n"), 0o600))
	path := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
auth:
  tokens:
    - name: billing-service
      sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
      scopes: [start, signal, read]
      workflows: [charge, refund]
    - name: ops
      token_file: `+opsFile+`
      scopes: [admin]
`), 0o600))
	c, err := config.Load(path)
	require.NoError(t, err)
	require.True(t, c.Auth.Enabled())
	a, err := c.Auth.Authenticator()
	require.NoError(t, err)

	billing, err := a.Authenticate("Bearer test") // "test" hashes to the sha256 above
	require.NoError(t, err)
	require.Equal(t, "billing-service", billing.Name())
	require.True(t, billing.Has(auth.ScopeSignal))
	require.False(t, billing.Has(auth.ScopeCancel))
	require.Equal(t, []string{"charge", "refund"}, billing.Workflows())
	ops, err := a.Authenticate("Bearer hvt_ops-token") // the file's line, without its newline
	require.NoError(t, err)
	require.True(t, ops.Has(auth.ScopeCancel))

	// No tokens: the API is open.
	open, err := config.Load("")
	require.NoError(t, err)
	require.False(t, open.Auth.Enabled())
	none, err := open.Auth.Authenticator()
	require.NoError(t, err)
	require.Nil(t, none)

	// A token file that cannot be read fails when the authenticator is
	// built, naming the token.
	require.NoError(t, os.Remove(opsFile))
	_, err = c.Auth.Authenticator()
	require.ErrorContains(t, err, `config: auth token "ops": open `)
}

func TestAuthConfigRefusesWhatItCannotUse(t *testing.T) {
	hash := auth.HashHex("x")
	for yaml, want := range map[string]string{
		"auth: {tokens: [{sha256: " + hash + ", scopes: [read]}]}":                                                                        "config: auth.tokens[0]: name is required",
		"auth: {tokens: [{name: a, scopes: [read]}]}":                                                                                     `config: auth token "a": set one of sha256 and token_file`,
		"auth: {tokens: [{name: a, sha256: " + hash + ", token_file: /x, scopes: [read]}]}":                                               `config: auth token "a": set one of sha256 and token_file`,
		"auth: {tokens: [{name: a, sha256: " + hash + "}]}":                                                                               `config: auth token "a": scopes are required (start, signal, read, cancel, metrics, admin)`,
		"auth: {tokens: [{name: a, sha256: abc, scopes: [read]}]}":                                                                        `config: auth token "a": sha256 "abc": want the 64 hex digits of a SHA-256`,
		"auth: {tokens: [{name: a, sha256: " + hash + ", scopes: [write]}]}":                                                              `config: auth token "a": unknown scope "write": want one of start, signal, read, cancel, metrics, admin`,
		"auth: {tokens: [{name: a, sha256: " + hash + ", scopes: [read], workflows: ['bad name']}]}":                                      `config: auth token "a": workflows: `,
		"auth: {tokens: [{name: a, sha256: " + hash + ", scopes: [read]}, {name: a, sha256: " + auth.HashHex("y") + ", scopes: [read]}]}": `config: auth token "a": name used twice`,
		"auth: {disabled: true, tokens: [{name: a, sha256: " + hash + ", scopes: [read]}]}":                                               "config: auth: disabled with tokens: remove one",
		"auth: {tokens: [{name: a, sha256: " + hash + ", scope: [read]}]}":                                                                "field scope not found",
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
		_, err := config.Load(path)
		require.ErrorContains(t, err, want, yaml)
	}
}
