// Package gateway holds what Vigil's protocol gateways (gateway/aap, gateway/agentapi,
// gateway/mcp) share: how an upstream is named on the command line, and a deadline for each
// write to a client.
package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// name is an upstream's name: it is a path segment (/aap/NAME/) and part of session ids.
var name = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidName reports whether s may name an upstream: letters, digits, '.', '_' and '-', at
// most 64, starting with a letter or digit.
func ValidName(s string) bool { return name.MatchString(s) }

// ParseUpstream reads a NAME=URL flag value (--agentapi, --mcp).
func ParseUpstream(s string) (upstream, rawURL string, err error) {
	upstream, rawURL, ok := strings.Cut(s, "=")
	if !ok || !ValidName(upstream) {
		return "", "", fmt.Errorf("want NAME=URL with NAME of letters, digits, '.', '_' or '-' (at most 64), got %q", s)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("%s: want an absolute http(s) URL, got %q", upstream, rawURL)
	}
	return upstream, rawURL, nil
}

// hopHeaders are not forwarded either way (RFC 9110 §7.6.1), nor are Vigil's own headers
// or the body framing and encoding the proxy redoes (the transport asks for gzip itself
// and decompresses, so the gateway reads the events it judges as they are).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length",
	"Host", "X-Vigil-Key", "X-Vigil-Session", "X-Vigil-Gateway", "Accept-Encoding", "Content-Encoding"}

// CopyHeaders copies src into dst, for a request going to an upstream or an answer coming
// back, leaving out hop-by-hop headers (those listed and those its Connection header names)
// and Vigil's own.
func CopyHeaders(dst, src http.Header) {
	for k, v := range src {
		dst[k] = append([]string(nil), v...)
	}
	for _, c := range src.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			dst.Del(strings.TrimSpace(f))
		}
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
}
