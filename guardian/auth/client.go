package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ParseTrustedProxies reads a comma-separated list of CIDR prefixes or single addresses
// (10.0.0.0/8, 192.0.2.7, ::1) naming the reverse proxies whose X-Forwarded-For is believed.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if p, err := netip.ParsePrefix(part); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("%w: %q is neither an address nor a CIDR prefix", ErrInvalid, part)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// trusted reports whether ip is one of the configured proxies.
func (a *Auth) trusted(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.cfg.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// TrustedProxy reports whether a connection from ip comes from a configured reverse proxy.
func (a *Auth) TrustedProxy(ip netip.Addr) bool { return a.trusted(ip) }

// realClient returns r with RemoteAddr naming the client a trusted proxy relayed it for:
// X-Forwarded-For is read from the right, skipping trusted proxies, and the first address
// that is not one is the client. From any other peer the header is ignored, since anyone
// can send it. The original request is returned unchanged when nothing applies.
func (a *Auth) realClient(r *http.Request) *http.Request {
	if len(a.cfg.TrustedProxies) == 0 {
		return r
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !a.trusted(peer.Addr()) {
		return r
	}
	hops := r.Header.Values("X-Forwarded-For")
	if len(hops) == 0 {
		return r
	}
	client := peer.Addr().Unmap()
	found := false
walk:
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			ip, ok := parseHop(parts[j])
			if !ok {
				// Whatever lies left of a malformed entry came from the client itself.
				break walk
			}
			client, found = ip, true
			if !a.trusted(ip) {
				break walk
			}
		}
	}
	if !found {
		return r
	}
	r2 := r.Clone(r.Context())
	r2.RemoteAddr = netip.AddrPortFrom(client, 0).String()
	return r2
}

// parseHop reads one X-Forwarded-For entry: an address, optionally with a port.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// clientHost is the request's client IP without the port (the real client's, once Wrap has
// applied the trusted proxies).
func clientHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// logName is how a failed sign-in's name appears in the log. Operators type passwords into
// the name field by mistake: a name that is no account is logged only as a short hash, which
// still lets repeated attempts be matched up without writing the text down.
func logName(name string, known bool) string {
	if known {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "unknown:" + hex.EncodeToString(sum[:4])
}
