package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dedup"
)

// AuthConfig is the API's authentication: the bearer tokens ingest
// accepts on /api/harvest/... and /v1/runs... . Without tokens the API is
// open, which a process listening beyond loopback refuses unless Disabled
// says so.
type AuthConfig struct {
	// Disabled serves the API without authentication even on a
	// non-loopback address.
	Disabled bool `yaml:"disabled"`
	// Tokens are the accepted tokens; several at once, for rotation.
	Tokens []TokenConfig `yaml:"tokens"`
}

// TokenConfig is one accepted token, by its hash or a file holding it.
type TokenConfig struct {
	// Name names the token in logs, refusals and the executions it starts.
	Name string `yaml:"name"`
	// SHA256 is the hex SHA-256 of the token (harvest token hash).
	SHA256 string `yaml:"sha256"`
	// TokenFile is a file holding the token itself, instead of SHA256.
	TokenFile string `yaml:"token_file"`
	// Scopes: start, signal, read, cancel, metrics, admin.
	Scopes []string `yaml:"scopes"`
	// Workflows, when set, limits the token to these workflows, for reads
	// too.
	Workflows []string `yaml:"workflows"`
}

// Enabled says whether the API requires a token.
func (a AuthConfig) Enabled() bool { return len(a.Tokens) > 0 }

// validate checks what it can without reading the token files.
func (a AuthConfig) validate() error {
	if a.Disabled && len(a.Tokens) > 0 {
		return errors.New("config: auth: disabled with tokens: remove one")
	}
	_, err := a.tokens(func(TokenConfig) (string, error) { return "", nil })
	return err
}

// Authenticator reads the token files and returns the tokens'
// authenticator, nil when the API is open.
func (a AuthConfig) Authenticator() (*auth.Authenticator, error) {
	if !a.Enabled() {
		return nil, nil
	}
	tokens, err := a.tokens(func(t TokenConfig) (string, error) {
		data, err := os.ReadFile(t.TokenFile)
		if err != nil {
			return "", fmt.Errorf("config: auth token %q: %w", t.Name, err)
		}
		token := strings.TrimSpace(string(data))
		if token == "" {
			return "", fmt.Errorf("config: auth token %q: %s is empty", t.Name, t.TokenFile)
		}
		return token, nil
	})
	if err != nil {
		return nil, err
	}
	a2, err := auth.New(tokens)
	if err != nil {
		return nil, fmt.Errorf("config: auth: %w", err)
	}
	return a2, nil
}

// tokens converts the configured tokens, reading a token_file with read.
func (a AuthConfig) tokens(read func(TokenConfig) (string, error)) ([]auth.Token, error) {
	out := make([]auth.Token, 0, len(a.Tokens))
	names := map[string]bool{}
	for i, t := range a.Tokens {
		what := fmt.Sprintf("config: auth.tokens[%d]", i)
		if t.Name != "" {
			what = fmt.Sprintf("config: auth token %q", t.Name)
		}
		tok := auth.Token{Name: t.Name, Workflows: t.Workflows}
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("%s: name is required", what)
		case names[t.Name]:
			return nil, fmt.Errorf("%s: name used twice", what)
		case (t.SHA256 == "") == (t.TokenFile == ""):
			return nil, fmt.Errorf("%s: set one of sha256 and token_file", what)
		case len(t.Scopes) == 0:
			return nil, fmt.Errorf("%s: scopes are required (start, signal, read, cancel, metrics, admin)", what)
		case t.SHA256 != "":
			h, err := auth.ParseHash(t.SHA256)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			tok.SHA256 = h
		default:
			token, err := read(t)
			if err != nil {
				return nil, err
			}
			tok.SHA256 = auth.Hash(token)
		}
		for _, s := range t.Scopes {
			sc, err := auth.ParseScope(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			tok.Scopes = append(tok.Scopes, sc)
		}
		names[t.Name] = true
		for _, w := range t.Workflows {
			if err := dedup.ValidateName(w); err != nil {
				return nil, fmt.Errorf("%s: workflows: %w", what, err)
			}
		}
		out = append(out, tok)
	}
	return out, nil
}
