package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
)

func TestTokenNewAndHash(t *testing.T) {
	t.Parallel()
	token, _, err := runCLI(t, "token", "new")
	require.NoError(t, err)
	token = strings.TrimSpace(token)
	require.True(t, strings.HasPrefix(token, "hvt_"), token)

	hash := func(stdin string) (string, error) {
		var out bytes.Buffer
		root := newRoot()
		root.SetIn(strings.NewReader(stdin))
		root.SetOut(&out)
		root.SetArgs([]string{"token", "hash"})
		err := root.Execute()
		return out.String(), err
	}
	out, err := hash(token + "\n")
	require.NoError(t, err)
	require.Equal(t, "sha256: "+auth.HashHex(token)+"\n", out)
	out, err = hash("test")
	require.NoError(t, err)
	require.Equal(t, "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n", out, "the issue's example")
	_, err = hash("\n")
	require.ErrorContains(t, err, "no token on stdin")
	_, err = hash("two words\n")
	require.ErrorContains(t, err, "holds a space")
}

// The CLI sends --token, or HARVEST_TOKEN, to an API that requires one.
func TestTheCLISendsTheToken(t *testing.T) {
	a, err := auth.New([]auth.Token{
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}},
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}},
	})
	require.NoError(t, err)
	s := startStack(t, devstack.Config{Ingest: ingest.Config{Auth: a}})

	_, _, err = runCLI(t, "workflow", "list", "--addr", s.URL())
	require.ErrorContains(t, err, "no Authorization header")
	_, _, err = runCLI(t, "workflow", "start", "onboarding", "--input", `{"user_id": 7}`, "--addr", s.URL(), "--token", "t-reader")
	require.ErrorContains(t, err, `token "reader" lacks scope start`)
	out, _, err := runCLI(t, "workflow", "start", "onboarding", "--input", `{"user_id": 7}`, "--addr", s.URL(), "--token", "t-ops", "--json")
	require.NoError(t, err)
	require.Contains(t, out, `"execution_id"`)
	_, _, err = runCLI(t, "admission", "close", "onboarding", "--reason", "test", "--addr", s.URL(), "--token", "t-reader")
	require.ErrorContains(t, err, `forbidden: token "reader" lacks scope admin`)
	_, _, err = runCLI(t, "commands", "dead", "--addr", s.URL())
	require.ErrorContains(t, err, "unauthenticated")

	t.Setenv("HARVEST_TOKEN", "t-reader")
	out, _, err = runCLI(t, "workflow", "list", "--addr", s.URL(), "--json")
	require.NoError(t, err)
	require.Contains(t, out, "onboarding")
	_, _, err = runCLI(t, "commands", "dead", "--addr", s.URL())
	require.NoError(t, err)
}
