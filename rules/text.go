package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// urlSchemes are the schemes findURLs recognises before "://".
var urlSchemes = map[string]bool{
	"http": true, "https": true, "ftp": true, "ftps": true, "ws": true, "wss": true,
	"file": true, "s3": true, "gs": true, "sftp": true,
}

func isURLStop(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\f', '\v', '<', '>', '"', '\'', '`', '{', '}', '|', '\\', '^':
		return true
	}
	return false
}

// findURLs returns URL spans: scheme://… up to whitespace, without trailing punctuation.
func findURLs(s string) []span {
	var out []span
	for from := 0; ; {
		k := strings.Index(s[from:], "://")
		if k < 0 {
			break
		}
		i := from + k
		from = i + 3
		a := i
		for a > 0 && (isAlnum(s[a-1]) || s[a-1] == '+' || s[a-1] == '-' || s[a-1] == '.') {
			a--
		}
		if a == i || !urlSchemes[strings.ToLower(s[a:i])] {
			continue
		}
		b := i + 3
		for b < len(s) && !isURLStop(s[b]) {
			b++
		}
		for b > i+3 {
			c := s[b-1]
			if strings.IndexByte(".,;:!?", c) >= 0 {
				b--
				continue
			}
			// A closing bracket belongs to the URL only when the URL opened one.
			if c == ')' && strings.Count(s[a:b], "(") < strings.Count(s[a:b], ")") ||
				c == ']' && strings.Count(s[a:b], "[") < strings.Count(s[a:b], "]") {
				b--
				continue
			}
			break
		}
		if b > i+3 {
			out = append(out, span{a, b, "url"})
			from = b
		}
	}
	return out
}

// domainOf returns the lower-case host of a URL, an email address or a bare host name,
// without port or trailing dot; "" when there is none.
func domainOf(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	var host string
	switch {
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		if err != nil {
			return ""
		}
		host = u.Hostname()
	case strings.HasPrefix(strings.ToLower(s), "mailto:"):
		return domainOf(s[len("mailto:"):])
	case strings.Contains(s, "@"):
		host = s[strings.LastIndexByte(s, '@')+1:]
		host = strings.TrimRight(host, ">)]};,. ")
		if i := strings.IndexAny(host, "/?# "); i >= 0 {
			host = host[:i]
		}
	default:
		host = s
		if i := strings.IndexAny(host, "/?#"); i >= 0 {
			host = host[:i]
		}
		if h, _, ok := strings.Cut(host, ":"); ok && !strings.Contains(h, "[") {
			host = h
		}
	}
	host = strings.Trim(host, "[]")
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if strings.ContainsAny(host, " \t\r\n<>\"'") {
		return ""
	}
	return host
}

// errBadGlob is returned for a malformed glob pattern (an unterminated [ class).
var errBadGlob = errors.New("malformed glob pattern: unterminated [")

// globRegexp translates a glob into an anchored regular expression, so matching is linear
// in the input whatever the pattern: `*` matches any run of characters except '/', `**` any
// run including '/', `?` one character except '/', `[abc]`, `[a-z]`, `[!abc]` one character
// of (or not of) a class, and `\x` the character x.
func globRegexp(pattern string) (string, error) {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for i := 0; i < len(pattern); {
		c := pattern[i]
		switch c {
		case '*':
			j := i
			for j < len(pattern) && pattern[j] == '*' {
				j++
			}
			if j-i >= 2 {
				b.WriteString(`.*`)
			} else {
				b.WriteString(`[^/]*`)
			}
			i = j
		case '?':
			b.WriteString(`[^/]`)
			i++
		case '\\':
			if i+1 < len(pattern) {
				r, w := utf8.DecodeRuneInString(pattern[i+1:])
				b.WriteString(regexp.QuoteMeta(string(r)))
				i += 1 + w
			} else {
				b.WriteString(`\\`)
				i++
			}
		case '[':
			j := i + 1
			b.WriteByte('[')
			if j < len(pattern) && (pattern[j] == '!' || pattern[j] == '^') {
				b.WriteByte('^')
				j++
			}
			first := true
			for {
				if j >= len(pattern) {
					return "", errBadGlob
				}
				if pattern[j] == ']' && !first {
					j++
					break
				}
				first = false
				r, w := utf8.DecodeRuneInString(pattern[j:])
				escaped := false
				if r == '\\' && j+1 < len(pattern) {
					j++
					r, w = utf8.DecodeRuneInString(pattern[j:])
					escaped = true
				}
				j += w
				if r == '-' && !escaped && j < len(pattern) && pattern[j] != ']' {
					b.WriteByte('-')
					continue
				}
				b.WriteString(classEscape(r))
			}
			b.WriteByte(']')
			i = j
		default:
			r, w := utf8.DecodeRuneInString(pattern[i:])
			b.WriteString(regexp.QuoteMeta(string(r)))
			i += w
		}
	}
	b.WriteByte('$')
	return b.String(), nil
}

// classEscape escapes a rune for use inside a regexp character class.
func classEscape(r rune) string {
	switch r {
	case '\\', ']', '[', '^', '-':
		return "\\" + string(r)
	}
	return string(r)
}

// toText converts a value from the Env (often an `any` from inputs or params) to the text a
// string helper scans: strings as they are, nil as "", numbers and booleans formatted, and
// anything else as its JSON.
func toText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		return x.String()
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case fmt.Stringer:
		return x.String()
	}
	// Without HTML escaping: json.Marshal writes <, > and & as \u003c, \u003e and
	// \u0026, so `containsAny(inputs, ["&&"])` would never see the && of an input.
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
