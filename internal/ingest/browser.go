package ingest

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// What a web page in the user's browser may not make the API do. A page
// on another site can send a POST without asking first (a form, or fetch
// with mode no-cors) when its body is one of the types a form sends:
// text/plain, application/x-www-form-urlencoded, multipart/form-data, or
// none. Such a request is refused when the browser says it comes from
// another origin. And a page on a name that its owner later points at
// 127.0.0.1 (DNS rebinding) reaches the API as the same origin, but with
// its own name in Host: while the API needs no token, only loopback names
// and addresses, and those allowed_hosts lists, are answered.

// Reasons of harvest_ingest_requests_refused_total for what the browser
// guard refuses.
const (
	refusedHost      = "host_not_allowed"
	refusedCrossSite = "cross_site"
)

// hostRule is one allowed_hosts entry: a host name, or an address or CIDR.
type hostRule struct {
	name   string
	prefix netip.Prefix
}

// parseHostRule parses an allowed_hosts entry: a host name (matched
// whole, without its port), an IP address or a CIDR.
func parseHostRule(entry string) (hostRule, error) {
	e := strings.ToLower(strings.TrimSpace(entry))
	if strings.Contains(e, "/") {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return hostRule{}, fmt.Errorf("allowed host %q: not a CIDR: %w", entry, err)
		}
		return hostRule{prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
		return hostRule{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}, nil
	}
	e = strings.TrimSuffix(e, ".")
	if e == "" || len(e) > 253 {
		return hostRule{}, fmt.Errorf("allowed host %q: want a host name, an IP address or a CIDR", entry)
	}
	for _, c := range []byte(e) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return hostRule{}, fmt.Errorf("allowed host %q: want a host name (no scheme, port or path), an IP address or a CIDR", entry)
		}
	}
	return hostRule{name: e}, nil
}

// hostGuard says which Host values ingest answers.
type hostGuard struct {
	// check is false when any Host is answered: the API needs a token
	// and no allowed_hosts are configured.
	check bool
	rules []hostRule
}

func newHostGuard(open bool, allowed []string) (hostGuard, error) {
	g := hostGuard{check: open || len(allowed) > 0}
	for _, e := range allowed {
		r, err := parseHostRule(e)
		if err != nil {
			return hostGuard{}, err
		}
		g.rules = append(g.rules, r)
	}
	return g, nil
}

// hostOf is the host a Host header names, without its port or brackets,
// in lower case, without a trailing dot.
func hostOf(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}

// allows says whether a request naming Host h is answered: a loopback
// name or address, or one allowed_hosts lists.
func (g hostGuard) allows(h string) bool {
	if !g.check {
		return true
	}
	host := hostOf(h)
	if host == "" {
		return false
	}
	addr, err := netip.ParseAddr(host)
	isAddr := err == nil
	if isAddr {
		addr = addr.Unmap()
	}
	if host == "localhost" || isAddr && addr.IsLoopback() {
		return true
	}
	for _, r := range g.rules {
		if r.name != "" && r.name == host || isAddr && r.prefix.IsValid() && r.prefix.Contains(addr) {
			return true
		}
	}
	return false
}

// needsNoPreflight says whether a web page may have sent a body of this
// content type to another origin without asking first (a CORS
// preflight): text/plain, a form's types, or none, and every type but
// JSON is taken as such. A JSON body needs a preflight, which ingest
// never grants.
func needsNoPreflight(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err != nil || mt != "application/json"
}

// browserGuard refuses, before anything is read, a request whose Host
// the API does not answer (421 host_not_allowed), and a state-changing
// request (POST, PUT, PATCH, DELETE) that a browser says comes from
// another origin (Sec-Fetch-Site cross-site or same-site, or an Origin
// that is not the request's Host) whose body is not JSON
// (403 cross_site_request). Health checks are answered whatever their
// Host, and so are webhook deliveries to a source whose provider signs
// them and, when arcflow.secrets are set, ArcFlow callbacks: a signature
// authenticates them, not anything a browser holds, and they may come
// through a tunnel under another name.
func (s *Server) browserGuard(next http.Handler) http.Handler {
	hosts, _ := newHostGuard(s.cfg.Auth == nil, s.cfg.AllowedHosts) // Validate checked them
	hostsAnswered := "it answers only loopback names and addresses (localhost, 127.0.0.1, ::1) and those allowed_hosts lists"
	if s.cfg.Auth == nil {
		hostsAnswered = "while it needs no token " + hostsAnswered
	}
	cross := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts.allows(r.Host) && !s.signedOrProbe(r) {
			s.metrics.refused.WithLabelValues(refusedHost).Inc()
			s.log.Info("request refused", "method", r.Method, "path", r.URL.Path, "reason", refusedHost, "host", r.Host)
			writeError(w, http.StatusMisdirectedRequest, api.CodeHostNotAllowed,
				fmt.Sprintf("this API does not answer requests for host %q: %s", r.Host, hostsAnswered))
			return
		}
		if err := cross.Check(r); err != nil && needsNoPreflight(r.Header.Get("Content-Type")) {
			s.metrics.refused.WithLabelValues(refusedCrossSite).Inc()
			s.log.Info("request refused", "method", r.Method, "path", r.URL.Path, "reason", refusedCrossSite,
				"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "origin", r.Header.Get("Origin"))
			writeError(w, http.StatusForbidden, api.CodeCrossSiteRequest,
				"a browser sent this request from another site (Sec-Fetch-Site or Origin says so) with a body that is not "+
					"Content-Type: application/json; the API acts only on such requests from its own origin")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// signedOrProbe says whether r is answered whatever its Host: a health
// check, a delivery to a webhook source with a signature, or an ArcFlow
// callback when their signatures are required.
func (s *Server) signedOrProbe(r *http.Request) bool {
	switch p := r.URL.Path; {
	case p == "/healthz" || p == "/readyz":
		return true
	case strings.HasPrefix(p, "/hooks/"):
		e, ok := s.hooks[strings.TrimPrefix(p, "/hooks/")]
		return ok && e.Kind != webhook.KindNone
	case strings.HasPrefix(p, "/v1/runs/") && strings.Contains(p, "/external/"):
		return len(s.cfg.ArcFlowSecrets) > 0
	}
	return false
}
