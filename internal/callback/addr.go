package callback

import (
	"net/netip"
)

// addrRange is a block of addresses that callbacks may not target unless the
// operator allow-lists it, with the reason reported to the caller.
type addrRange struct {
	prefix netip.Prefix
	reason string
}

func mustRanges(pairs ...string) []addrRange {
	out := make([]addrRange, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, addrRange{prefix: netip.MustParsePrefix(pairs[i]), reason: pairs[i+1]})
	}
	return out
}

// Blocked IPv4 ranges, from the IANA IPv4 Special-Purpose Address Registry
// plus multicast and the reserved class E block. More specific entries come
// first so the reported reason is the most precise one.
var blockedV4 = mustRanges(
	"169.254.169.254/32", "cloud metadata endpoint",
	"255.255.255.255/32", "broadcast address",
	"0.0.0.0/32", "unspecified address",
	"0.0.0.0/8", "\"this network\" address",
	"10.0.0.0/8", "private address",
	"100.64.0.0/10", "carrier-grade NAT address",
	"127.0.0.0/8", "loopback address",
	"169.254.0.0/16", "link-local address",
	"172.16.0.0/12", "private address",
	"192.0.0.0/24", "IETF protocol assignment address",
	"192.0.2.0/24", "documentation address",
	"192.88.99.0/24", "6to4 relay anycast address",
	"192.168.0.0/16", "private address",
	"198.18.0.0/15", "benchmarking address",
	"198.51.100.0/24", "documentation address",
	"203.0.113.0/24", "documentation address",
	"224.0.0.0/4", "multicast address",
	"240.0.0.0/4", "reserved address",
)

// Blocked IPv6 ranges. Only global unicast (2000::/3) is allowed at all; the
// entries outside it exist to give a precise reason. Ranges that embed an
// IPv4 address (IPv4-mapped, NAT64) are handled in blockReason.
var blockedV6 = mustRanges(
	"fd00:ec2::254/128", "cloud metadata endpoint",
	"::/128", "unspecified address",
	"::1/128", "loopback address",
	"::/96", "IPv4-compatible address",
	"64:ff9b:1::/48", "local-use NAT64 address",
	"100::/64", "discard-only address",
	"fc00::/7", "unique local address",
	"fe80::/10", "link-local address",
	"fec0::/10", "site-local address",
	"ff00::/8", "multicast address",
	"2001:db8::/32", "documentation address",
	"2001::/23", "IETF protocol assignment address",
	"2002::/16", "6to4 address",
	"3fff::/20", "documentation address",
	"5f00::/16", "segment routing address",
)

var (
	globalUnicastV6 = netip.MustParsePrefix("2000::/3")
	nat64WellKnown  = netip.MustParsePrefix("64:ff9b::/96")
)

// blockReason reports why addr may not be targeted, or "" if it is a public
// address. It does not consult any allow list.
func blockReason(addr netip.Addr) string {
	if !addr.IsValid() {
		return "invalid address"
	}
	if addr.Zone() != "" {
		return "scoped (zoned) address"
	}
	if addr.Is4In6() {
		if r := blockReason(addr.Unmap()); r != "" {
			return "IPv4-mapped " + r
		}
		return ""
	}
	if addr.Is4() {
		for _, r := range blockedV4 {
			if r.prefix.Contains(addr) {
				return r.reason
			}
		}
		return ""
	}
	if nat64WellKnown.Contains(addr) {
		// The NAT64 gateway forwards to the embedded IPv4 address, which
		// must itself be public (RFC 6052 forbids translating to
		// non-global addresses, but gateways are not trusted to enforce it).
		b := addr.As16()
		if r := blockReason(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); r != "" {
			return "NAT64 address embedding " + r
		}
		return ""
	}
	for _, r := range blockedV6 {
		if r.prefix.Contains(addr) {
			return r.reason
		}
	}
	if !globalUnicastV6.Contains(addr) {
		return "reserved address"
	}
	return ""
}
