package callback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// ErrRejected is wrapped by every error that refuses a callback target on
// policy grounds: a malformed or non-http(s) URL, userinfo, a host that
// resolves to a non-public address, a redirect. Such errors are permanent;
// retrying cannot fix them.
var ErrRejected = errors.New("callback target rejected")

// RejectedError is a refused callback target; it wraps ErrRejected.
//
// Its Error text is for the log: when a host name is refused for what it
// resolves to, it names the address and its range. Reason is for whoever
// chose the URL (the API's answer to a start, a delivery's last_error):
// it says what is wrong with the URL itself, and of what a name resolves
// to only the category ("private address", "name does not resolve"),
// never an address the resolver answered, so that a caller cannot map
// internal names through it.
type RejectedError struct {
	// Reason says why, in words that quote nothing but the URL.
	Reason string
	// detail is the log's text when it says more than Reason.
	detail string
}

func (e *RejectedError) Error() string {
	if e.detail != "" {
		return ErrRejected.Error() + ": " + e.detail
	}
	return ErrRejected.Error() + ": " + e.Reason
}

// Unwrap returns ErrRejected.
func (e *RejectedError) Unwrap() error { return ErrRejected }

// maxURLLength bounds the callback URLs accepted; longer ones are rejected.
const maxURLLength = 2048

// Resolver resolves host names to addresses. *net.Resolver implements it;
// tests supply fakes.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Policy decides which callback targets are allowed. The zero value allows
// public addresses only, resolved with net.DefaultResolver.
//
// An address is public unless it is unspecified, loopback, private
// (RFC 1918, IPv6 unique local fc00::/7), link-local (169.254.0.0/16,
// fe80::/10), carrier-grade NAT (100.64.0.0/10), "this network"
// (0.0.0.0/8), broadcast, multicast, reserved (240.0.0.0/4, IPv6 outside
// 2000::/3), documentation, benchmarking, 6to4, Teredo and the other IETF
// special-purpose ranges, or a cloud metadata endpoint (169.254.169.254,
// fd00:ec2::254). IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) and NAT64
// addresses (64:ff9b::/96) are judged by the IPv4 address they embed; scoped
// (zoned) IPv6 addresses are never allowed.
type Policy struct {
	// AllowHosts lists targets that may be used even though they are not
	// public. An entry is either a host name, matched exactly and
	// case-insensitively against the URL's host (every address it
	// resolves to is then trusted but a cloud metadata address), or an
	// IP address or CIDR prefix ("10.0.0.0/8", "fd12::/16", "127.0.0.1")
	// that allows the addresses it contains, whatever name led to them. A
	// cloud metadata address is allowed only by an entry naming exactly
	// that address (a /32 or /128), never by a host name that resolves to
	// it or a wider prefix that happens to contain it. A malformed address
	// or CIDR entry makes Validate and Deliver fail.
	AllowHosts []string

	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
}

// Validate checks a callback URL when a workflow is started. The URL must
// use the http or https scheme, name a host, carry no userinfo and have at
// most a valid port. A literal IP host must be a public address; a host name
// must resolve, and every address it resolves to must be public. Hosts and
// addresses on AllowHosts are exempt from the public-address rule, but for
// the metadata addresses: an allow-listed name that resolves to one is
// refused (it need not resolve here at all, since delivery checks it again).
//
// A refusal is a *RejectedError, wrapping ErrRejected, that says why. Other
// errors, such as a temporary DNS failure, a cancelled ctx or a malformed
// AllowHosts entry, do not wrap ErrRejected.
//
// Validate is a start-time courtesy to the client; Client re-checks every
// address when it connects, since DNS answers can change in between.
func (p Policy) Validate(ctx context.Context, rawURL string) error {
	allow, err := compileAllow(p.AllowHosts)
	if err != nil {
		return err
	}
	t, err := parseTarget(rawURL)
	if err != nil {
		return err
	}
	if t.literal.IsValid() {
		return allow.checkLiteral(t.literal)
	}
	byName := allow.hostAllowed(t.host)
	addrs, err := lookup(ctx, p.resolver(), t.host)
	if err != nil {
		if byName {
			// An allow-listed name may be one only the schedulers
			// resolve; delivery checks what it resolves to there.
			return nil
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound || errors.Is(err, errNoAddresses) {
			// Not the resolver's own error: it names the resolver's
			// address, and this error is the caller's answer.
			return &RejectedError{Reason: fmt.Sprintf("host %q: name does not resolve", t.host),
				detail: fmt.Sprintf("host %q does not resolve: %v", t.host, err)}
		}
		return err
	}
	return allow.checkAddrs(t.host, addrs, byName)
}

func (p Policy) resolver() Resolver {
	if p.Resolver == nil {
		return net.DefaultResolver
	}
	return p.Resolver
}

// rejectf is a refusal whose text quotes nothing but the URL, and so is
// the caller's answer as it is.
func rejectf(format string, args ...any) error {
	return &RejectedError{Reason: fmt.Sprintf(format, args...)}
}

// target is a syntactically acceptable callback URL.
type target struct {
	u       *url.URL
	host    string     // lower case, without brackets or a trailing dot
	literal netip.Addr // valid when host is an IP literal
}

// parseTarget performs the checks that need no DNS.
func parseTarget(rawURL string) (target, error) {
	if len(rawURL) > maxURLLength {
		return target{}, rejectf("URL longer than %d bytes", maxURLLength)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return target{}, rejectf("invalid URL: %v", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return target{}, rejectf("URL has no scheme; want http or https")
	default:
		return target{}, rejectf("scheme %q not allowed; want http or https", u.Scheme)
	}
	if u.Opaque != "" {
		return target{}, rejectf("URL has no host")
	}
	if u.User != nil {
		return target{}, rejectf("URL must not contain userinfo")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return target{}, rejectf("invalid port %q", p)
		}
	}
	raw := u.Hostname()
	if raw == "" {
		return target{}, rejectf("URL has no host")
	}
	bracketed := strings.HasPrefix(u.Host, "[")
	if addr, err := netip.ParseAddr(raw); err == nil {
		if bracketed != addr.Is6() {
			return target{}, rejectf("malformed IP literal %q", u.Host)
		}
		return target{u: u, host: strings.ToLower(raw), literal: addr}, nil
	}
	if bracketed {
		return target{}, rejectf("malformed IP literal %q", u.Host)
	}
	host := normalizeHost(raw)
	if err := checkHostname(host); err != nil {
		return target{}, err
	}
	return target{u: u, host: host}, nil
}

func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// checkHostname accepts ASCII DNS names (letters, digits, '-' and '_';
// internationalised names must be punycode). Names whose last label is
// numeric or hexadecimal are rejected: no top-level domain looks like that,
// and resolvers built on inet_aton read them as IPv4 addresses
// ("2130706433", "127.1", "0x7f.1" are all 127.0.0.1).
func checkHostname(host string) error {
	if host == "" || len(host) > 253 {
		return rejectf("invalid host name %q", host)
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return rejectf("invalid host name %q", host)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return rejectf("invalid host name %q", host)
			}
		}
	}
	if last := labels[len(labels)-1]; isNumericLabel(last) {
		return rejectf("ambiguous numeric host %q", host)
	}
	return nil
}

func isNumericLabel(l string) bool {
	digits := l
	hex := false
	if strings.HasPrefix(l, "0x") {
		digits, hex = l[2:], true
	}
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if '0' <= c && c <= '9' || hex && 'a' <= c && c <= 'f' {
			continue
		}
		return false
	}
	return true
}

var errNoAddresses = errors.New("host resolves to no addresses")

// lookup resolves host and returns its distinct addresses, IPv4 ones in
// their 4-byte form.
func lookup(ctx context.Context, r Resolver, host string) ([]netip.Addr, error) {
	ips, err := r.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("callback: resolve %q: %w", host, err)
	}
	addrs := make([]netip.Addr, 0, len(ips))
	seen := make(map[netip.Addr]bool, len(ips))
	for _, ip := range ips {
		a, ok := netip.AddrFromSlice(ip.IP)
		if !ok {
			return nil, &RejectedError{Reason: fmt.Sprintf("host %q resolves to a malformed address", host),
				detail: fmt.Sprintf("host %q resolves to malformed address %v", host, ip.IP)}
		}
		// net.IP stores IPv4 in 16-byte mapped form; the checks treat
		// both forms alike, but dial and report the plain IPv4 form.
		a = a.Unmap().WithZone(ip.Zone)
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("callback: %q: %w", host, errNoAddresses)
	}
	return addrs, nil
}

// allowList is the compiled form of Policy.AllowHosts.
type allowList struct {
	hosts    map[string]bool
	prefixes []netip.Prefix
}

func compileAllow(entries []string) (allowList, error) {
	var a allowList
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if strings.Contains(e, "/") {
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return allowList{}, fmt.Errorf("callback: invalid AllowHosts entry %q: %w", e, err)
			}
			a.prefixes = append(a.prefixes, p.Masked())
			continue
		}
		bare := strings.TrimSuffix(strings.TrimPrefix(e, "["), "]")
		if addr, err := netip.ParseAddr(bare); err == nil {
			if addr.Zone() != "" {
				return allowList{}, fmt.Errorf("callback: invalid AllowHosts entry %q: zoned address", e)
			}
			a.prefixes = append(a.prefixes, netip.PrefixFrom(addr, addr.BitLen()))
			continue
		}
		if a.hosts == nil {
			a.hosts = make(map[string]bool)
		}
		a.hosts[normalizeHost(e)] = true
	}
	return a, nil
}

func (a allowList) hostAllowed(host string) bool {
	return a.hosts[normalizeHost(host)]
}

var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
}

// isMetadata reports whether addr is a cloud metadata address, or an
// IPv4-mapped or NAT64 address that leads to one.
func isMetadata(addr netip.Addr) bool {
	u := addr.Unmap()
	if nat64WellKnown.Contains(u) {
		b := u.As16()
		u = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	for _, m := range metadataAddrs {
		if u == m {
			return true
		}
	}
	return false
}

// addrAllowed reports whether an allow-listed prefix contains addr (or the
// IPv4 address it maps).
func (a allowList) addrAllowed(addr netip.Addr) bool {
	if addr.Zone() != "" {
		return false
	}
	meta := isMetadata(addr)
	for _, p := range a.prefixes {
		if meta && !p.IsSingleIP() {
			continue
		}
		if p.Contains(addr) || p.Contains(addr.Unmap()) {
			return true
		}
	}
	return false
}

// refusal says why addr may not be dialled, or "" if it may: it is public
// or allow-listed. byName says that the URL's host is allow-listed by name,
// which trusts every address but a metadata one.
func (a allowList) refusal(addr netip.Addr, byName bool) string {
	if a.addrAllowed(addr) {
		return ""
	}
	reason := blockReason(addr)
	if byName && !isMetadata(addr) {
		return ""
	}
	return reason
}

// checkLiteral refuses a URL's literal IP host unless it may be dialled.
// The caller wrote the address, so the answer may name it and its range.
func (a allowList) checkLiteral(addr netip.Addr) error {
	if r := a.refusal(addr, false); r != "" {
		return rejectf("%s is not public (%s)", addr, r)
	}
	return nil
}

// checkAddrs refuses host unless every address it resolves to may be
// dialled. The refusal's Reason gives only the category: the addresses
// are what the resolver answered, for the log alone.
func (a allowList) checkAddrs(host string, addrs []netip.Addr, byName bool) error {
	for _, addr := range addrs {
		r := a.refusal(addr, byName)
		if r == "" {
			continue
		}
		detail := fmt.Sprintf("host %q resolves to %s, which is not public (%s)", host, addr, r)
		if byName {
			detail = fmt.Sprintf("host %q is allow-listed by name but resolves to %s (%s), which only an entry naming exactly that address allows", host, addr, r)
		}
		return &RejectedError{Reason: fmt.Sprintf("host %q resolves to a private address", host), detail: detail}
	}
	return nil
}
