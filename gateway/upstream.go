// Package gateway holds what Vigil's protocol gateways (gateway/aap, gateway/agentapi,
// gateway/mcp) share: how an upstream is named on the command line.
package gateway

import (
	"fmt"
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
