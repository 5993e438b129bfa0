package rules

import (
	"math"
	"regexp"
	"strings"
)

// secretPattern is one kind of credential. Matching starts only where one of prefixes
// occurs (case-insensitively when fold), and the anchored regular expression then runs on
// a window from there: scanning a whole step's text with a dozen patterns costs too much.
// group > 0 selects the submatch that is the secret itself (the value of key=value).
type secretPattern struct {
	kind     string
	prefixes []string
	fold     bool
	// wordStart requires a non-word character (or the start) before the prefix.
	wordStart bool
	re        *regexp.Regexp
	window    int
	group     int
	// minEntropy rejects low-entropy values (placeholders like xxxxxxxx) when > 0.
	minEntropy float64
}

// secretPatterns are checked in order; an earlier pattern wins an overlap.
var secretPatterns = []secretPattern{
	{kind: "privateKey", prefixes: []string{"-----BEGIN "}, window: 128,
		re: regexp.MustCompile(`^-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----`)},
	{kind: "awsAccessKey", prefixes: []string{"AKIA", "ASIA", "ABIA", "ACCA"}, wordStart: true, window: 64,
		re: regexp.MustCompile(`^(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b`)},
	{kind: "githubToken", prefixes: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"}, wordStart: true, window: 300,
		re: regexp.MustCompile(`^(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})\b`)},
	{kind: "slackToken", prefixes: []string{"xox"}, wordStart: true, window: 300,
		re: regexp.MustCompile(`^xox[abposr]-[A-Za-z0-9-]{10,250}`)},
	{kind: "slackWebhook", prefixes: []string{"https://hooks.slack.com/services/"}, window: 300,
		re: regexp.MustCompile(`^https://hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]+`)},
	{kind: "stripeKey", prefixes: []string{"sk_live_", "sk_test_", "rk_live_", "rk_test_", "pk_live_", "pk_test_"}, wordStart: true, window: 300,
		re: regexp.MustCompile(`^(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,247}\b`)},
	{kind: "openaiKey", prefixes: []string{"sk-"}, wordStart: true, window: 300,
		re: regexp.MustCompile(`^sk-(?:proj-|svcacct-|admin-|ant-(?:api\d\d-)?)?[A-Za-z0-9_-]{20,250}`)},
	{kind: "googleApiKey", prefixes: []string{"AIza"}, wordStart: true, window: 64,
		re: regexp.MustCompile(`^AIza[0-9A-Za-z_-]{35}\b`)},
	{kind: "jwt", prefixes: []string{"eyJ"}, wordStart: true},
	{kind: "genericSecret", prefixes: []string{"api", "access", "secret", "token", "passw", "pwd", "credential", "auth"},
		fold: true, window: 300, group: 1, minEntropy: 3.0,
		re: regexp.MustCompile(`(?i)^(?:api[_-]?key|apikey|access[_-]?key|secret|token|passw(?:or)?d|pwd|credentials?|auth)[\w.-]{0,24}["']?\s*[:=]\s*["']?([A-Za-z0-9/+_.=~@#%^&*!?-]{12,200})`)},
}

// secretKindOrder is the order secretKinds() reports kinds in.
var secretKindOrder = func() []string {
	out := make([]string, len(secretPatterns))
	for i, p := range secretPatterns {
		out[i] = p.kind
	}
	return out
}()

func isWordChar(c byte) bool { return isAlnum(c) || c == '_' }

// asciiLower lower-cases ASCII letters only, so byte offsets stay those of s.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			var b strings.Builder
			b.Grow(len(s))
			b.WriteString(s[:i])
			for j := i; j < len(s); j++ {
				c := s[j]
				if c >= 'A' && c <= 'Z' {
					c += 'a' - 'A'
				}
				b.WriteByte(c)
			}
			return b.String()
		}
	}
	return s
}

// findSecrets returns the credential spans of s in order, without overlaps. Every attempt
// either matches and skips past the match or fails within a bounded window, so hostile
// text full of prefixes costs time linear in its length.
//
// Where the prefixes occur is found in one pass over s (prefixOccurrences) rather than one
// strings.Index scan per prefix (33 of them): the patterns then take their attempts in the
// same order as a scan per prefix would, from the occurrences at or after their position.
func findSecrets(s string) []span {
	var out []span
	var keys keyBlocks
	var buf [16]prefixAt
	occ := prefixOccurrences(s, buf[:0])
	for pi := range secretPatterns {
		p := &secretPatterns[pi]
		var found []span
		for ri := range p.prefixes {
			from := 0
			for _, o := range occ {
				if int(o.pattern) != pi || int(o.prefix) != ri || o.pos < from {
					continue
				}
				i := o.pos
				from = i + 1
				if p.wordStart && i > 0 && isWordChar(s[i-1]) {
					continue
				}
				var a, b int
				switch p.kind {
				case "jwt":
					var next int
					a, b, next = jwtAt(s, i)
					if b < 0 {
						from = next
						continue
					}
				case "privateKey":
					if a, b = keys.at(s, i, p.re); b < 0 {
						continue
					}
				default:
					m := p.re.FindStringSubmatchIndex(s[i:min(len(s), i+p.window)])
					if m == nil || m[2*p.group] < 0 {
						continue
					}
					a, b = i+m[2*p.group], i+m[2*p.group+1]
					from = i + m[1]
					if p.minEntropy > 0 && !looksRandom(s[a:b], p.minEntropy) {
						continue
					}
				}
				found = append(found, span{a, b, p.kind})
				from = max(from, b)
			}
		}
		out = mergeFree(out, found)
	}
	return out
}

// prefixAt is an occurrence of secretPatterns[pattern].prefixes[prefix] at pos.
type prefixAt struct {
	pos             int
	pattern, prefix uint8
}

// prefixRef names a prefix of secretPatterns.
type prefixRef struct {
	pattern, prefix uint8
	s               string
	fold            bool
}

// prefixesByByte lists the prefixes of secretPatterns by their first byte (lower-case for
// the case-insensitive ones, which are lower-case ASCII), each byte's in pattern order.
var prefixesByByte = func() (t [256][]prefixRef) {
	for pi, p := range secretPatterns {
		for ri, pre := range p.prefixes {
			r := prefixRef{uint8(pi), uint8(ri), pre, p.fold}
			t[pre[0]] = append(t[pre[0]], r)
			if p.fold && pre[0] >= 'a' && pre[0] <= 'z' {
				t[pre[0]-'a'+'A'] = append(t[pre[0]-'a'+'A'], r)
			}
		}
	}
	return t
}()

// startsPrefix marks the bytes prefixesByByte has prefixes for: most bytes of a text start
// none, and this small table is all the pass reads for them.
var startsPrefix = func() (t [256]bool) {
	for c, refs := range prefixesByByte {
		t[c] = len(refs) > 0
	}
	return t
}()

// prefixTrigrams is a 4096-bit filter of the first three bytes of every prefix (each
// prefix has three or more), keyed by trigramKey. Ordinary prose starts a prefix at nearly
// every other byte ("a", "s", "t", "p", "c" …); the filter turns almost all of those away
// with one bit test, before the prefixes of the byte, and the strings they point to, are
// read: on a step's text that is most of the scan's work and most of its cache lines.
var prefixTrigrams = func() (t [64]uint64) {
	for _, p := range secretPatterns {
		for _, pre := range p.prefixes {
			if len(pre) < 3 {
				panic("secret prefix " + pre + " is shorter than the trigram filter reads")
			}
			h := trigramKey(pre[0], pre[1], pre[2])
			t[h/64] |= 1 << (h % 64)
		}
	}
	return t
}()

// trigramKey hashes three bytes, each OR 0x20, to 12 bits. OR 0x20 maps an ASCII capital
// to its small letter and every byte x to x|0x20, so a text that matches a prefix exactly,
// or ASCII case-insensitively, has the prefix's key: the filter has no false negatives.
func trigramKey(a, b, c byte) uint32 {
	k := uint32(a|0x20)<<16 | uint32(b|0x20)<<8 | uint32(c|0x20)
	return (k * 0x9e3779b1) >> 20
}

// prefixOccurrences appends to out every position of s where a prefix of secretPatterns
// starts (ASCII case-insensitively for the patterns with fold, as a search in asciiLower(s)
// finds them), in order of position.
func prefixOccurrences(s string, out []prefixAt) []prefixAt {
	// Every prefix has three bytes or more, so none starts in the last two.
	for i := 0; i+2 < len(s); i++ {
		if !startsPrefix[s[i]] {
			continue
		}
		if h := trigramKey(s[i], s[i+1], s[i+2]); prefixTrigrams[h/64]&(1<<(h%64)) == 0 {
			continue
		}
		for _, r := range prefixesByByte[s[i]] {
			if len(s)-i < len(r.s) {
				continue
			}
			if r.fold && !hasLowerPrefix(s[i:], r.s) || !r.fold && s[i:i+len(r.s)] != r.s {
				continue
			}
			out = append(out, prefixAt{i, r.pattern, r.prefix})
		}
	}
	return out
}

// hasLowerPrefix reports whether asciiLower(s) starts with the lower-case prefix.
func hasLowerPrefix(s, prefix string) bool {
	for k := 0; k < len(prefix); k++ {
		c := s[k]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[k] {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool { return isAlnum(c) || c == '_' || c == '-' }

// tokenRun returns the end of the run of base64url characters starting at i.
func tokenRun(s string, i int) int {
	for i < len(s) && isTokenChar(s[i]) {
		i++
	}
	return i
}

// jwtAt matches a JSON Web Token (three base64url segments, the first two JSON objects,
// "eyJ…") at s[i:]. On failure b is -1 and next is where to search again: any "eyJ" inside
// the first segment would end at the same place and fail the same way.
func jwtAt(s string, i int) (a, b, next int) {
	j := tokenRun(s, i)
	if j-i < 8 || j >= len(s) || s[j] != '.' || !strings.HasPrefix(s[j+1:], "eyJ") {
		return 0, -1, j
	}
	k := tokenRun(s, j+1)
	if k-(j+1) < 8 || k >= len(s) || s[k] != '.' {
		return 0, -1, j
	}
	l := tokenRun(s, k+1)
	if l-(k+1) < 10 {
		return 0, -1, j
	}
	return i, l, l
}

// keyBlocks finds PEM private key blocks. The position of the next END line is kept across
// calls, so many BEGIN lines without an END do not each rescan the rest of the text.
type keyBlocks struct {
	nextEnd int // index of the next "-----END " after the last header; -1 none
	done    bool
}

func (kb *keyBlocks) at(s string, i int, header *regexp.Regexp) (int, int) {
	m := header.FindStringIndex(s[i:min(len(s), i+128)])
	if m == nil {
		return 0, -1
	}
	body := i + m[1]
	if !kb.done || (kb.nextEnd >= 0 && kb.nextEnd < body) {
		kb.done = true
		kb.nextEnd = -1
		if k := strings.Index(s[body:], "-----END "); k >= 0 {
			kb.nextEnd = body + k
		}
	}
	if kb.nextEnd >= 0 {
		if f := privateKeyFooterRe.FindStringIndex(s[kb.nextEnd:min(len(s), kb.nextEnd+128)]); f != nil {
			return i, kb.nextEnd + f[1]
		}
	}
	// No END line (a truncated paste): the header and the base64 or "Key: value" lines
	// that follow it, up to the first line of anything else.
	end, pos := body, body
	for pos < len(s) {
		nl := strings.IndexByte(s[pos:], '\n')
		lineEnd := len(s)
		if nl >= 0 {
			lineEnd = pos + nl
		}
		line := strings.TrimSpace(s[pos:lineEnd])
		if line != "" && !isBase64Line(line) && !pemHeaderRe.MatchString(line) {
			break
		}
		if line != "" {
			end = pos + strings.Index(s[pos:lineEnd], line) + len(line)
		}
		if nl < 0 {
			break
		}
		pos = lineEnd + 1
	}
	return i, end
}

var pemHeaderRe = regexp.MustCompile(`^[A-Za-z][A-Za-z-]*: \S`)

func isBase64Line(line string) bool {
	for i := 0; i < len(line); i++ {
		if c := line[i]; !isAlnum(c) && c != '+' && c != '/' && c != '=' {
			return false
		}
	}
	return true
}

var privateKeyFooterRe = regexp.MustCompile(`^-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----`)

// looksRandom accepts a key=value secret value: letters mixed with digits, or a long value,
// and not a low-entropy placeholder such as xxxxxxxxxxxx or 123456789012.
func looksRandom(v string, minEntropy float64) bool {
	letters, digits := false, false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case isDigit(c):
			digits = true
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			letters = true
		}
	}
	if !letters {
		return false
	}
	h := shannon(v)
	if digits {
		return h >= minEntropy
	}
	return len(v) >= 20 && h >= minEntropy+0.5
}

// shannon is the Shannon entropy of s in bits per byte.
func shannon(s string) float64 {
	if s == "" {
		return 0
	}
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	n := float64(len(s))
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}
