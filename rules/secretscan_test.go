package rules

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// findSecretsByIndex is findSecrets as it was written first, one strings.Index scan per
// prefix: the reference that the one-pass search of the prefixes must agree with.
func findSecretsByIndex(s string) []span {
	var out []span
	var lower string
	var keys keyBlocks
	for _, p := range secretPatterns {
		hay := s
		if p.fold {
			if lower == "" {
				lower = asciiLower(s)
			}
			hay = lower
		}
		var found []span
		for _, pre := range p.prefixes {
			for from := 0; from < len(hay); {
				k := strings.Index(hay[from:], pre)
				if k < 0 {
					break
				}
				i := from + k
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

// secretText builds a random text out of the secret patterns' prefixes (in random case),
// credential-like runs, separators and key blocks, so that prefixes overlap, repeat, start
// words and sit inside them.
func secretText(r *rand.Rand) string {
	const token = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
	pieces := []string{" ", "=", ": ", "\"", "\n", "x", "_", "-", ".", "K", "ſ",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
		"-----BEGIN PRIVATE KEY-----", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlX19fX18",
		"hooks.slack.com/services/T0123/B0456/abcdef", "https://"}
	var b strings.Builder
	for n := r.IntN(24); n >= 0; n-- {
		switch r.IntN(4) {
		case 0:
			p := secretPatterns[r.IntN(len(secretPatterns))]
			pre := p.prefixes[r.IntN(len(p.prefixes))]
			if r.IntN(3) == 0 {
				pre = strings.ToUpper(pre)
			} else if r.IntN(3) == 0 && len(pre) > 1 {
				pre = strings.ToUpper(pre[:1]) + pre[1:]
			}
			b.WriteString(pre)
		case 1:
			for k := r.IntN(48); k > 0; k-- {
				b.WriteByte(token[r.IntN(len(token))])
			}
		default:
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
	}
	return b.String()
}

// TestFindSecretsMatchesIndexScan: the one-pass prefix search finds the same spans as one
// strings.Index scan per prefix, on random texts dense with prefixes.
func TestFindSecretsMatchesIndexScan(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 2026))
	found := 0
	for range 20000 {
		s := secretText(r)
		want := findSecretsByIndex(s)
		require.Equal(t, want, findSecrets(s), "text %q", s)
		found += len(want)
	}
	require.Greater(t, found, 2000, "the texts must hold secrets, not only prefixes")
	for _, s := range []string{"", "a", "AKIA", "api", "APIKEY=Zx8#kQ2m9LpW4vR7", loadEnv(0, 0).Text, loadEnv(0, 0).Reasoning} {
		require.Equal(t, findSecretsByIndex(s), findSecrets(s), "text %q", s)
	}
}

// TestPrefixOccurrencesFindsEveryPrefix: the one-pass search with its trigram filter finds
// exactly the positions where a prefix starts, checked against every prefix at every
// position, on texts dense with prefixes in every case and with bytes that OR 0x20 maps
// onto letters ("@", "[", "^", …).
func TestPrefixOccurrencesFindsEveryPrefix(t *testing.T) {
	naive := func(s string) []prefixAt {
		var out []prefixAt
		for i := range len(s) {
			for pi, p := range secretPatterns {
				for ri, pre := range p.prefixes {
					if len(s)-i < len(pre) {
						continue
					}
					if p.fold && asciiLower(s[i:i+len(pre)]) == pre || !p.fold && s[i:i+len(pre)] == pre {
						out = append(out, prefixAt{i, uint8(pi), uint8(ri)})
					}
				}
			}
		}
		return out
	}
	r := rand.New(rand.NewPCG(3, 2026))
	found := 0
	for range 20000 {
		s := secretText(r)
		if r.IntN(2) == 0 {
			// Bytes that only the OR 0x20 of the filter's key confuses with letters.
			b := []byte(s)
			for k := range b {
				if r.IntN(8) == 0 {
					b[k] ^= 0x20
				}
			}
			s = string(b)
		}
		want := naive(s)
		require.Equal(t, want, prefixOccurrences(s, nil), "text %q", s)
		found += len(want)
	}
	require.Greater(t, found, 20000)
}
