package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/config"
)

// ErrOpenAPI is returned by APIAuth for an API that would be open to the
// network: it listens beyond loopback and no token is configured.
var ErrOpenAPI = errors.New("the API would be open to the network")

// APIAuth is the authenticator of an API served on addr: the configured
// tokens (their files read), or nil for an open API. An open API is
// refused on an address beyond loopback unless auth.disabled says so;
// either way the log says whether a token is needed.
func APIAuth(cfg config.Config, addr string, log *slog.Logger) (*auth.Authenticator, error) {
	a, err := cfg.Auth.Authenticator()
	if err != nil {
		return nil, err
	}
	switch {
	case a != nil:
		log.Info("the API requires a bearer token", "tokens", len(cfg.Auth.Tokens))
		return a, nil
	case cfg.Auth.Disabled:
		log.Warn("the API is open to anyone who can reach it: auth.disabled is set", "addr", addr)
	case !isLoopback(addr):
		return nil, fmt.Errorf("%w: it listens on %s, beyond loopback, and the configuration has no auth tokens; "+
			"add auth.tokens (each a name, the token's sha256 or a token_file, and scopes; `harvest token new` makes a token, "+
			"`harvest token hash` its sha256; see docs/security.md), or `auth: {disabled: true}` to serve an open API on purpose", ErrOpenAPI, addr)
	default:
		log.Info("the API needs no token: no auth tokens are configured, and it listens on loopback only", "addr", addr)
	}
	return nil, nil
}

// isLoopback says whether a listen address (host:port) accepts only
// loopback connections: a loopback IP, or localhost. An empty host, an
// unspecified address or any other name listens beyond.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
