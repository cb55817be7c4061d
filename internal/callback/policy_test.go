package callback

import (
	"context"
	"errors"
	"hash/fnv"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// pgtest.Main also fails the run when goroutines leaked (goleak); the
// stack tests (package callback_test) need its PostgreSQL.
func TestMain(m *testing.M) {
	pgtest.Main(m)
}

// fakeResolver maps host names to addresses; unknown names do not exist.
type fakeResolver map[string][]string

func (f fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	addrs, ok := f[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return ipAddrs(addrs...), nil
}

// resolverFunc adapts a function to Resolver.
type resolverFunc func(ctx context.Context, host string) ([]net.IPAddr, error)

func (f resolverFunc) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	return f(ctx, host)
}

func ipAddrs(addrs ...string) []net.IPAddr {
	out := make([]net.IPAddr, 0, len(addrs))
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil {
			panic("bad test address " + a)
		}
		out = append(out, net.IPAddr{IP: ip})
	}
	return out
}

var testResolver = fakeResolver{
	"localhost":     {"127.0.0.1", "::1"},
	"example.com":   {"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"},
	"v4only.test":   {"93.184.216.34"},
	"internal.test": {"10.0.0.5"},
	"mixed.test":    {"93.184.216.34", "10.0.0.1"},
	"metadata.test": {"169.254.169.254"},
	"ula.test":      {"fd12:3456::1"},
	"svc.internal":  {"10.0.0.7"},
	"empty.test":    {},
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		url   string
		allow []string
		// want is "" for acceptance, else a substring of the rejection.
		want string
	}{
		// Accepted public targets.
		{name: "public IPv4 literal", url: "https://93.184.216.34/cb"},
		{name: "public IPv4 literal with port query fragment", url: "http://93.184.216.34:8080/cb?x=1#f"},
		{name: "public IPv6 literal", url: "https://[2606:2800:220:1:248:1893:25c8:1946]/cb"},
		{name: "public host name", url: "https://example.com/cb"},
		{name: "host name case and trailing dot", url: "HTTPS://Example.COM./cb"},
		{name: "IPv4-mapped public", url: "http://[::ffff:93.184.216.34]/"},
		{name: "NAT64 of public", url: "http://[64:ff9b::5db8:d822]/"},

		// Non-public literals.
		{name: "loopback", url: "http://127.0.0.1", want: "loopback"},
		{name: "loopback with port", url: "http://127.0.0.1:8080/cb", want: "loopback"},
		{name: "loopback other", url: "http://127.8.9.10/", want: "loopback"},
		{name: "private 10/8", url: "http://10.1.2.3", want: "private"},
		{name: "private 172.16/12", url: "http://172.16.5.4", want: "private"},
		{name: "private 192.168/16", url: "http://192.168.1.1", want: "private"},
		{name: "IPv6 loopback", url: "http://[::1]", want: "loopback"},
		{name: "IPv6 unspecified", url: "http://[::]/", want: "unspecified"},
		{name: "metadata", url: "http://169.254.169.254/latest/meta-data", want: "metadata"},
		{name: "metadata IPv6", url: "http://[fd00:ec2::254]", want: "metadata"},
		{name: "link-local", url: "http://169.254.1.1/", want: "link-local"},
		{name: "IPv6 link-local", url: "http://[fe80::1]/", want: "link-local"},
		{name: "IPv6 zoned", url: "http://[fe80::1%25eth0]/", want: "zoned"},
		{name: "ULA", url: "http://[fc00::1]/", want: "unique local"},
		{name: "CGNAT", url: "http://100.64.0.1/", want: "carrier-grade NAT"},
		{name: "unspecified", url: "http://0.0.0.0/", want: "unspecified"},
		{name: "this network", url: "http://0.1.2.3/", want: "this network"},
		{name: "broadcast", url: "http://255.255.255.255/", want: "broadcast"},
		{name: "multicast", url: "http://224.0.0.1/", want: "multicast"},
		{name: "IPv6 multicast", url: "http://[ff02::1]/", want: "multicast"},
		{name: "IPv4-mapped loopback", url: "http://[::ffff:127.0.0.1]", want: "IPv4-mapped loopback"},
		{name: "IPv4-mapped loopback hex", url: "http://[::ffff:7f00:1]", want: "IPv4-mapped loopback"},
		{name: "IPv4-mapped metadata", url: "http://[::ffff:169.254.169.254]/", want: "metadata"},
		{name: "IPv4-mapped private", url: "http://[::ffff:10.0.0.1]/", want: "private"},
		{name: "IPv4-compatible", url: "http://[::127.0.0.1]/", want: "IPv4-compatible"},
		{name: "NAT64 of loopback", url: "http://[64:ff9b::7f00:1]/", want: "NAT64"},
		{name: "6to4", url: "http://[2002:7f00:1::1]/", want: "6to4"},
		{name: "teredo", url: "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", want: "IETF"},
		{name: "documentation v6", url: "http://[2001:db8::1]/", want: "documentation"},
		{name: "documentation v4", url: "http://192.0.2.1/", want: "documentation"},

		// Names resolving to non-public addresses.
		{name: "localhost", url: "http://localhost", want: "loopback"},
		{name: "localhost with port", url: "http://localhost:8080/cb", want: "loopback"},
		{name: "internal name", url: "http://internal.test/", want: "private"},
		{name: "one bad address of several", url: "http://mixed.test/", want: "10.0.0.1"},
		{name: "name to metadata", url: "http://metadata.test/", want: "metadata"},
		{name: "name to ULA", url: "http://ula.test/", want: "unique local"},
		{name: "no such host", url: "http://nxdomain.test/", want: "does not resolve"},
		{name: "no addresses", url: "http://empty.test/", want: "no addresses"},

		// Malformed or forbidden URLs.
		{name: "ftp", url: "ftp://x", want: "scheme"},
		{name: "file", url: "file:///etc/passwd", want: "scheme"},
		{name: "gopher", url: "gopher://example.com/", want: "scheme"},
		{name: "javascript", url: "javascript:alert(1)", want: "scheme"},
		{name: "opaque", url: "http:example.com", want: "no host"},
		{name: "no scheme", url: "//example.com/cb", want: "no scheme"},
		{name: "empty", url: "", want: "no scheme"},
		{name: "no host", url: "http://", want: "no host"},
		{name: "empty host with path", url: "http:///cb", want: "no host"},
		{name: "userinfo", url: "http://user:pw@example.com", want: "userinfo"},
		{name: "user only", url: "http://user@example.com/", want: "userinfo"},
		{name: "empty userinfo", url: "http://@example.com/", want: "userinfo"},
		{name: "port zero", url: "http://example.com:0/", want: "port"},
		{name: "port too large", url: "http://example.com:99999/", want: "port"},
		{name: "bad port", url: "http://example.com:http/", want: "invalid URL"},
		{name: "space in host", url: "http://exa mple.com/", want: "invalid URL"},
		{name: "decimal IPv4", url: "http://2130706433/", want: "numeric"},
		{name: "short IPv4", url: "http://127.1/", want: "numeric"},
		{name: "hex IPv4", url: "http://0x7f.0.0.1/", want: "numeric"},
		{name: "hex IPv4 single", url: "http://0x7f000001/", want: "numeric"},
		{name: "octal IPv4", url: "http://0177.0.0.1/", want: "numeric"},
		{name: "bracketed IPv4", url: "http://[127.0.0.1]/", want: "invalid"},
		{name: "bracketed name", url: "http://[example.com]/", want: "invalid"},
		{name: "unicode host", url: "http://exämple.com/", want: "invalid host"},
		{name: "empty label", url: "http://a..example.com/", want: "invalid host"},
		{name: "too long", url: "https://example.com/" + strings.Repeat("a", maxURLLength), want: "longer"},

		// Allow list.
		{name: "allow localhost by name", url: "http://localhost:8080/cb", allow: []string{"localhost"}},
		{name: "allow name case-insensitive", url: "http://LOCALHOST./", allow: []string{" LocalHost "}},
		{name: "allow loopback CIDR", url: "http://127.0.0.1:8080/", allow: []string{"127.0.0.0/8"}},
		{name: "allow CIDR covers mapped", url: "http://[::ffff:127.0.0.1]/", allow: []string{"127.0.0.0/8"}},
		{name: "allow CIDR needs all addresses", url: "http://localhost/", allow: []string{"127.0.0.0/8"}, want: "::1"},
		{name: "allow both families", url: "http://localhost/", allow: []string{"127.0.0.0/8", "::1"}},
		{name: "allow bracketed IPv6 entry", url: "http://[::1]/", allow: []string{"[::1]"}},
		{name: "allow private CIDR", url: "http://10.1.2.3", allow: []string{"10.0.0.0/8"}},
		{name: "allow internal name", url: "http://svc.internal/", allow: []string{"svc.internal"}},
		{name: "allow name by CIDR", url: "http://svc.internal/", allow: []string{"10.0.0.0/24"}},
		{name: "allow does not leak", url: "http://10.1.2.3", allow: []string{"localhost", "192.168.0.0/16"}, want: "private"},
		{name: "metadata exact allow", url: "http://169.254.169.254/", allow: []string{"169.254.169.254"}},
		{name: "allowed name to metadata", url: "http://metadata.test/", allow: []string{"metadata.test"}, want: "169.254.169.254"},
		{name: "allowed name to metadata, metadata allowed", url: "http://metadata.test/", allow: []string{"metadata.test", "169.254.169.254"}},
		{name: "allowed name to metadata via wide CIDR", url: "http://metadata.test/", allow: []string{"metadata.test", "169.254.0.0/16"}, want: "169.254.169.254"},
		{name: "metadata not via wide CIDR", url: "http://169.254.169.254/", allow: []string{"169.254.0.0/16"}, want: "metadata"},
		{name: "metadata v6 not via wide CIDR", url: "http://[fd00:ec2::254]/", allow: []string{"fd00::/8"}, want: "metadata"},
		{name: "other link-local via CIDR", url: "http://169.254.1.1/", allow: []string{"169.254.0.0/16"}},
		{name: "zoned never allowed", url: "http://[fe80::1%25eth0]/", allow: []string{"fe80::/10"}, want: "zoned"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Policy{AllowHosts: tt.allow, Resolver: testResolver}
			err := p.Validate(t.Context(), tt.url)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrRejected)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestRefusalReasonsNameNoResolvedAddress: the reason a caller is given
// for a refused host name says only the category of what it resolves to,
// so that a start cannot map internal names; the error's own text, for
// the log, names the address. A literal address is the caller's own, and
// its reason says which range it is in.
func TestRefusalReasonsNameNoResolvedAddress(t *testing.T) {
	resolver := fakeResolver{
		"vm":            {"127.0.0.1"},
		"db.internal":   {"10.1.2.3"},
		"mixed.test":    {"93.184.216.34", "192.168.7.7"},
		"metadata.test": {"169.254.169.254"},
		"ula.test":      {"fd12:3456::1"},
	}
	tests := []struct {
		url, reason, log string
	}{
		{"http://vm/x", `host "vm" resolves to a private address`, "127.0.0.1"},
		{"http://db.internal:5432/x", `host "db.internal" resolves to a private address`, "10.1.2.3"},
		{"http://mixed.test/x", `host "mixed.test" resolves to a private address`, "192.168.7.7"},
		{"http://metadata.test/x", `host "metadata.test" resolves to a private address`, "169.254.169.254"},
		{"http://ula.test/x", `host "ula.test" resolves to a private address`, "fd12:3456::1"},
		{"http://nowhere.test/x", `host "nowhere.test": name does not resolve`, "no such host"},
		{"http://127.0.0.1:9/x", "127.0.0.1 is not public (loopback address)", "127.0.0.1"},
		{"http://[::ffff:a00:1]/x", "::ffff:10.0.0.1 is not public (IPv4-mapped private address)", "10.0.0.1"},
		{"ftp://vm/x", `scheme "ftp" not allowed; want http or https`, "ftp"},
	}
	p := Policy{Resolver: resolver}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			err := p.Validate(t.Context(), tt.url)
			var rej *RejectedError
			require.ErrorAs(t, err, &rej)
			require.ErrorIs(t, err, ErrRejected)
			require.Equal(t, tt.reason, rej.Reason)
			require.ErrorContains(t, err, tt.log)
		})
	}
}

func TestValidateNonRejectionErrors(t *testing.T) {
	t.Run("malformed allow entry", func(t *testing.T) {
		p := Policy{AllowHosts: []string{"10.0.0.0/33"}, Resolver: testResolver}
		err := p.Validate(t.Context(), "https://example.com/")
		require.ErrorContains(t, err, "AllowHosts")
		require.NotErrorIs(t, err, ErrRejected)
	})
	t.Run("temporary DNS failure", func(t *testing.T) {
		dnsErr := &net.DNSError{Err: "server misbehaving", Name: "example.com", IsTemporary: true}
		p := Policy{Resolver: resolverFunc(func(context.Context, string) ([]net.IPAddr, error) {
			return nil, dnsErr
		})}
		err := p.Validate(t.Context(), "https://example.com/")
		require.ErrorIs(t, err, dnsErr)
		require.NotErrorIs(t, err, ErrRejected)
	})
	t.Run("cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		p := Policy{Resolver: resolverFunc(func(ctx context.Context, _ string) ([]net.IPAddr, error) {
			return nil, ctx.Err()
		})}
		err := p.Validate(ctx, "https://example.com/")
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrRejected)
	})
	t.Run("allow-listed name need not resolve", func(t *testing.T) {
		// Only the schedulers may resolve it; delivery checks it there.
		p := Policy{AllowHosts: []string{"hook.internal"}, Resolver: resolverFunc(func(context.Context, string) ([]net.IPAddr, error) {
			return nil, errors.New("cannot resolve here")
		})}
		require.NoError(t, p.Validate(t.Context(), "https://hook.internal/cb"))
	})
}

func TestBlockReason(t *testing.T) {
	tests := []struct {
		addr string
		want string // "" means public
	}{
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.216.34", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"223.255.255.255", ""},
		{"2001:4860:4860::8888", ""},
		{"2606:4700:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},
		{"0.0.0.0", "unspecified"},
		{"0.255.255.255", "this network"},
		{"10.255.255.255", "private"},
		{"100.64.0.0", "carrier-grade NAT"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"127.0.0.1", "loopback"},
		{"169.254.169.254", "metadata"},
		{"169.254.0.1", "link-local"},
		{"172.31.255.255", "private"},
		{"192.0.0.170", "IETF"},
		{"192.88.99.1", "6to4 relay"},
		{"192.168.0.1", "private"},
		{"198.18.0.1", "benchmarking"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "IPv4-mapped loopback"},
		{"::ffff:0.0.0.0", "IPv4-mapped unspecified"},
		{"::ffff:169.254.169.254", "IPv4-mapped cloud metadata"},
		{"::ffff:100.64.1.1", "IPv4-mapped carrier-grade NAT"},
		{"::ffff:255.255.255.255", "IPv4-mapped broadcast"},
		{"::10.0.0.1", "IPv4-compatible"},
		{"64:ff9b::a00:1", "NAT64 address embedding private"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"100::1", "discard"},
		{"fc00::1", "unique local"},
		{"fd00:ec2::254", "metadata"},
		{"fd00:ec2::253", "unique local"},
		{"fe80::1", "link-local"},
		{"fec0::1", "site-local"},
		{"ff05::2", "multicast"},
		{"2001::1", "IETF"},
		{"2001:db8::1", "documentation"},
		{"2002:c000:204::1", "6to4"},
		{"3fff::1", "documentation"},
		{"5f00::1", "segment routing"},
		{"4000::1", "reserved"},
		{"fe80::1%eth0", "zoned"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			got := blockReason(netip.MustParseAddr(tt.addr))
			if tt.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tt.want)
		})
	}
	require.Equal(t, "invalid address", blockReason(netip.Addr{}))
}

func TestCompileAllow(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		wantErr bool
	}{
		{name: "empty", entries: nil},
		{name: "blank entries skipped", entries: []string{"", "  "}},
		{name: "mixed", entries: []string{"localhost", "10.0.0.0/8", "::1", "[fd00::1]", "192.168.1.7"}},
		{name: "unmasked CIDR", entries: []string{"10.1.2.3/8"}},
		{name: "bad CIDR bits", entries: []string{"10.0.0.0/33"}, wantErr: true},
		{name: "bad CIDR address", entries: []string{"example.com/8"}, wantErr: true},
		{name: "zoned address", entries: []string{"fe80::1%eth0"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compileAllow(tt.entries)
			if tt.wantErr {
				require.Error(t, err)
				require.NotErrorIs(t, err, ErrRejected)
				return
			}
			require.NoError(t, err)
		})
	}
	a, err := compileAllow([]string{"10.1.2.3/8"})
	require.NoError(t, err)
	require.True(t, a.addrAllowed(netip.MustParseAddr("10.200.0.1")), "prefix must be masked")
}

// FuzzBlockReasonMapped checks that an IPv4 address and its IPv4-mapped IPv6
// form are judged alike.
func FuzzBlockReasonMapped(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "8.8.8.8", "169.254.169.254", "10.0.0.1", "255.255.255.255"} {
		f.Add(netip.MustParseAddr(s).AsSlice())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 4 {
			return
		}
		v4 := netip.AddrFrom4([4]byte(b[:4]))
		mapped := netip.AddrFrom16(v4.As16())
		require.Equal(t, blockReason(v4) == "", blockReason(mapped) == "", "v4 %s vs mapped %s", v4, mapped)
	})
}

// fuzzResolver answers deterministically from the host name: a public or a
// non-public address set, no addresses, or "not found". It never returns a
// temporary error, so every Validate error must be a rejection.
var fuzzAddrs = [][]string{
	{"93.184.216.34"},
	{"127.0.0.1"},
	{"10.0.0.1", "93.184.216.34"},
	{"::1"},
	{"2606:4700:4700::1111"},
	{"169.254.169.254"},
	{"::ffff:192.168.0.1"},
	{},
}

type fuzzResolver struct{}

func (fuzzResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(host))
	n := int(h.Sum32() % uint32(len(fuzzAddrs)+1))
	if n == len(fuzzAddrs) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return ipAddrs(fuzzAddrs[n]...), nil
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		"https://93.184.216.34/cb", "http://127.0.0.1", "http://localhost", "http://10.1.2.3",
		"http://[::1]", "http://169.254.169.254/latest/meta-data", "http://[fd00:ec2::254]",
		"ftp://x", "http://user:pw@example.com", "http://[::ffff:127.0.0.1]",
		"https://example.com:8443/a?b=c#d", "http://[fe80::1%25en0]:80/", "http://0x7f.1/",
		"http://allowed.example/", "http://10.9.9.9/", "HTTP://[::FFFF:7F00:1]:65535",
		"http://[64:ff9b::7f00:1]/", "http://a.b.c.d.e.f/", "http:/x", "http://%41/",
	} {
		f.Add(s)
	}
	p := Policy{AllowHosts: []string{"allowed.example", "10.0.0.0/8"}, Resolver: fuzzResolver{}}
	allow, err := compileAllow(p.AllowHosts)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, raw string) {
		err := p.Validate(t.Context(), raw)
		if err != nil {
			require.ErrorIs(t, err, ErrRejected)
			// The caller's answer quotes no address the resolver gave
			// (the URL's own literal address, or one its text holds,
			// may be quoted).
			var rej *RejectedError
			require.ErrorAs(t, err, &rej)
			if u, err := url.Parse(raw); err == nil {
				if _, err := netip.ParseAddr(u.Hostname()); err == nil {
					return
				}
			}
			for _, set := range fuzzAddrs {
				for _, a := range set {
					if !strings.Contains(strings.ToLower(raw), a) {
						require.NotContains(t, rej.Reason, a)
					}
				}
			}
			return
		}
		u, perr := url.Parse(raw)
		require.NoError(t, perr)
		require.Contains(t, []string{"http", "https"}, strings.ToLower(u.Scheme))
		require.Nil(t, u.User)
		host := u.Hostname()
		require.NotEmpty(t, host)
		if addr, err := netip.ParseAddr(host); err == nil {
			require.True(t, blockReason(addr) == "" || allow.addrAllowed(addr),
				"accepted non-public literal %s", addr)
		}
	})
}
