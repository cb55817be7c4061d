package service

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/config"
)

func TestAnOpenAPIIsRefusedBeyondLoopback(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	open := config.Config{}
	for _, addr := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080", "127.0.0.2:80"} {
		a, err := APIAuth(open, addr, log)
		require.NoError(t, err, addr)
		require.Nil(t, a, addr)
	}
	require.Contains(t, logs.String(), "the API needs no token: no auth tokens are configured, and it listens on loopback only")

	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "10.1.2.3:8080", "ingest:8080", "nonsense"} {
		_, err := APIAuth(open, addr, log)
		require.ErrorIs(t, err, ErrOpenAPI, addr)
		require.ErrorContains(t, err, "add auth.tokens", addr)
		require.ErrorContains(t, err, "auth: {disabled: true}", addr)
	}

	logs.Reset()
	a, err := APIAuth(config.Config{Auth: config.AuthConfig{Disabled: true}}, "0.0.0.0:8080", log)
	require.NoError(t, err)
	require.Nil(t, a)
	require.Contains(t, logs.String(), "the API is open to anyone who can reach it: auth.disabled is set")

	withTokens := config.Config{Auth: config.AuthConfig{Tokens: []config.TokenConfig{{Name: "ops", SHA256: auth.HashHex("t"), Scopes: []string{"admin"}}}}}
	a, err = APIAuth(withTokens, "0.0.0.0:8080", log)
	require.NoError(t, err)
	p, err := a.Authenticate("Bearer t")
	require.NoError(t, err)
	require.Equal(t, "ops", p.Name())
}
