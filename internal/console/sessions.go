package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/harvest-engine/harvest/internal/auth"
)

// A console sign-in is a session kept in this process's memory: the
// browser holds only its id, an opaque random value, in an HttpOnly,
// SameSite=Strict cookie, marked Secure when the user came over TLS. The
// token stays on the server, with the token's name and scopes and the
// session's expiry; signing out deletes the session, so its id is of no
// use to anyone afterwards, and a restart of the process forgets every
// session.

const (
	// sessionCookie holds the id of the console user's session.
	sessionCookie = "harvest_console_session"
	// legacyTokenCookie is where earlier versions kept the token itself;
	// it is cleared wherever it is still sent.
	legacyTokenCookie = "harvest_console_token"
	// DefaultSessionTTL is how long a sign-in lasts.
	DefaultSessionTTL = 12 * time.Hour
	// maxSessions bounds the sessions kept: past it, signing in forgets
	// the session nearest its expiry.
	maxSessions = 10000
)

// session is one signed-in console user.
type session struct {
	token   string
	name    string
	scopes  []auth.Scope
	expires time.Time
}

// sessions are the console's sign-ins, by the SHA-256 of their ids. Safe
// for concurrent use.
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex
	byID map[[sha256.Size]byte]session
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, now: now, byID: map[[sha256.Size]byte]session{}}
}

// create starts a session for the token p authenticated and returns its
// id: 32 bytes from crypto/rand, base64url.
func (s *sessions) create(token string, p *auth.Principal) (string, session) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (Go 1.24+)
	id := base64.RawURLEncoding.EncodeToString(b)
	var scopes []auth.Scope
	for _, sc := range auth.Scopes() {
		if p.Has(sc) {
			scopes = append(scopes, sc)
		}
	}
	now := s.now()
	sess := session{token: token, name: p.Name(), scopes: scopes, expires: now.Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.byID {
		if !now.Before(v.expires) {
			delete(s.byID, k)
		}
	}
	if len(s.byID) >= maxSessions {
		var oldest [sha256.Size]byte
		first := true
		for k, v := range s.byID {
			if first || v.expires.Before(s.byID[oldest].expires) {
				oldest, first = k, false
			}
		}
		delete(s.byID, oldest)
	}
	s.byID[sha256.Sum256([]byte(id))] = sess
	return id, sess
}

// get is the live session of id; an expired one is forgotten.
func (s *sessions) get(id string) (session, bool) {
	if id == "" {
		return session{}, false
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.byID[k]
	if !ok {
		return session{}, false
	}
	if !s.now().Before(sess.expires) {
		delete(s.byID, k)
		return session{}, false
	}
	return sess, true
}

// revoke forgets the session of id.
func (s *sessions) revoke(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sha256.Sum256([]byte(id)))
}

// sessionID is the session id r's cookie carries, "" for none.
func sessionID(r *http.Request) string {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		return ck.Value
	}
	return ""
}

// parseProxies parses trusted proxies: CIDRs or addresses.
func parseProxies(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil {
			return nil, fmt.Errorf("console config: trusted proxy %q: want an IP address or a CIDR", e)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// overTLS says whether the user's browser reached the console over TLS:
// the connection is TLS, or it comes from a trusted proxy that says
// X-Forwarded-Proto: https (the first of the list, the client's side).
func (c *Console) overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	if !strings.EqualFold(strings.TrimSpace(proto), "https") {
		return false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range c.proxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// setSession gives the browser the session's id.
func (c *Console) setSession(w http.ResponseWriter, r *http.Request, id string) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.overTLS(r), MaxAge: int(c.sessions.ttl.Seconds())})
}

// clearSession makes the browser forget its session id.
func clearSession(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}
