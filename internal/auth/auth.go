// Package auth authenticates API callers by bearer token and says what
// each token may do.
//
// A token is configured by its SHA-256 (the plain token never sits in a
// configuration) with a name, the scopes it holds and, optionally, the
// workflows it is limited to. Authenticate hashes the presented token and
// compares the hash with every configured one in constant time.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Scope is a kind of request a token may make.
type Scope string

// The scopes. Admin holds every other.
const (
	// ScopeStart: starts, signal-with-start, POST /v1/runs.
	ScopeStart Scope = "start"
	// ScopeSignal: signals, and ArcFlow external callbacks unless their
	// HMAC is configured.
	ScopeSignal Scope = "signal"
	// ScopeRead: executions, history, commands, lists.
	ScopeRead Scope = "read"
	// ScopeCancel: cancel.
	ScopeCancel Scope = "cancel"
	// ScopeMetrics: GET /metrics on the API's address. The metrics hold
	// every workflow's series, so a token limited to workflows may not
	// hold it (New refuses one that does, and ingest refuses a limited
	// token's scrape even when it holds admin).
	ScopeMetrics Scope = "metrics"
	// ScopeAdmin: admission gates, and every other scope.
	ScopeAdmin Scope = "admin"
)

// Scopes lists every scope, in the order the documentation gives them.
func Scopes() []Scope {
	return []Scope{ScopeStart, ScopeSignal, ScopeRead, ScopeCancel, ScopeMetrics, ScopeAdmin}
}

// ParseScope returns the scope named s.
func ParseScope(s string) (Scope, error) {
	if slices.Contains(Scopes(), Scope(s)) {
		return Scope(s), nil
	}
	names := make([]string, 0, len(Scopes()))
	for _, sc := range Scopes() {
		names = append(names, string(sc))
	}
	return "", fmt.Errorf("unknown scope %q: want one of %s", s, strings.Join(names, ", "))
}

// Token is one configured token.
type Token struct {
	// Name names the token in logs, refusals and the executions it starts.
	Name string
	// SHA256 is the SHA-256 of the token.
	SHA256 [sha256.Size]byte
	Scopes []Scope
	// Workflows, when not empty, limits the token to these workflows, for
	// reads too.
	Workflows []string
}

// Hash is the SHA-256 of a token.
func Hash(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// HashHex is Hash in hex, as a configuration gives it.
func HashHex(token string) string {
	h := Hash(token)
	return hex.EncodeToString(h[:])
}

// ParseHash parses a token's SHA-256 given in hex.
func ParseHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return h, fmt.Errorf("sha256 %q: want the 64 hex digits of a SHA-256", s)
	}
	copy(h[:], b)
	return h, nil
}

// NewToken returns a new random token: 32 bytes from crypto/rand, URL-safe
// base64 without padding, prefixed "hvt_" so that a leaked one is easy to
// recognise.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

const tokenPrefix = "hvt_"

// Principal is an authenticated caller.
type Principal struct {
	name      string
	scopes    map[Scope]bool
	workflows map[string]bool // nil: every workflow
}

// Name is the token's name.
func (p *Principal) Name() string { return p.name }

// Has says whether the caller holds scope (admin holds every scope).
func (p *Principal) Has(scope Scope) bool { return p.scopes[scope] || p.scopes[ScopeAdmin] }

// Sees says whether the caller may act on, and read, the workflow named
// workflow.
func (p *Principal) Sees(workflow string) bool { return p.workflows == nil || p.workflows[workflow] }

// Workflows is the workflows the caller is limited to, sorted; nil when it
// is not limited.
func (p *Principal) Workflows() []string {
	if p.workflows == nil {
		return nil
	}
	out := make([]string, 0, len(p.workflows))
	for w := range p.workflows {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// Errors of Authenticate.
var (
	// ErrNoCredentials: no Authorization header.
	ErrNoCredentials = errors.New("no Authorization header: send Authorization: Bearer <token>")
	// ErrMalformed: an Authorization header that is not a bearer token.
	ErrMalformed = errors.New("malformed Authorization header: want Authorization: Bearer <token>")
	// ErrUnknownToken: a bearer token no configured hash matches.
	ErrUnknownToken = errors.New("unknown token")
)

// Authenticator holds the configured tokens.
type Authenticator struct {
	tokens     []Token
	principals []*Principal
}

// New checks tokens and returns their Authenticator: each token needs a
// unique name, a unique hash and at least one known scope.
func New(tokens []Token) (*Authenticator, error) {
	a := &Authenticator{}
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]string{}
	for i, t := range tokens {
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("token %d: name is required", i)
		case names[t.Name]:
			return nil, fmt.Errorf("token %q: name used twice", t.Name)
		case len(t.Scopes) == 0:
			return nil, fmt.Errorf("token %q: scopes are required", t.Name)
		case t.SHA256 == [sha256.Size]byte{}:
			return nil, fmt.Errorf("token %q: its sha256 is required", t.Name)
		}
		if other, dup := hashes[t.SHA256]; dup {
			return nil, fmt.Errorf("token %q: same token as %q", t.Name, other)
		}
		names[t.Name], hashes[t.SHA256] = true, t.Name
		p := &Principal{name: t.Name, scopes: map[Scope]bool{}}
		for _, s := range t.Scopes {
			if _, err := ParseScope(string(s)); err != nil {
				return nil, fmt.Errorf("token %q: %w", t.Name, err)
			}
			if s == ScopeMetrics && len(t.Workflows) > 0 {
				return nil, fmt.Errorf("token %q: scope metrics reads every workflow's series, and the token is limited to workflows", t.Name)
			}
			p.scopes[s] = true
		}
		if len(t.Workflows) > 0 {
			p.workflows = map[string]bool{}
			for _, w := range t.Workflows {
				p.workflows[w] = true
			}
		}
		a.tokens = append(a.tokens, t)
		a.principals = append(a.principals, p)
	}
	return a, nil
}

// Authenticate returns the caller an Authorization header value names.
// The presented token's hash is compared with every configured hash, in
// constant time, whichever matches.
func (a *Authenticator) Authenticate(header string) (*Principal, error) {
	if header == "" {
		return nil, ErrNoCredentials
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil, ErrMalformed
	}
	token = strings.TrimSpace(token)
	if token == "" || strings.ContainsAny(token, " \t") {
		return nil, ErrMalformed
	}
	h := Hash(token)
	found := -1
	for i, t := range a.tokens {
		if subtle.ConstantTimeCompare(h[:], t.SHA256[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, ErrUnknownToken
	}
	return a.principals[found], nil
}
