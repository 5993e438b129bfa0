package rules

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFindPII(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []string
		kind []string
	}{
		{"email", "mail bob.smith@example.com now", []string{"bob.smith@example.com"}, []string{PIIEmail}},
		{"email subdomain and plus", "to: a.b+tag@mail.corp.example.co.uk.", []string{"a.b+tag@mail.corp.example.co.uk"}, []string{PIIEmail}},
		{"mailto counts", "mailto:carol@corp.example", []string{"carol@corp.example"}, []string{PIIEmail}},
		{"email in URL path is not an email", "see https://x.example/u/bob@corp.example", nil, nil},
		{"medium-style handle in URL", "read https://medium.com/@alice.dev/post", nil, nil},
		{"URL user info is not an email", "http://user:pw@host.example.com/x", nil, nil},
		{"email next to a URL still counts", "https://x.example/a and bob@corp.example", []string{"bob@corp.example"}, []string{PIIEmail}},
		{"no TLD", "x@localhost", nil, nil},
		{"digit TLD", "bob@x.c0m", nil, nil},
		{"second at sign", "a@b@c.io", []string{"b@c.io"}, []string{PIIEmail}},
		{"leading dots trimmed", "...bob@x.example", []string{"bob@x.example"}, []string{PIIEmail}},

		{"visa spaced", "card 4111 1111 1111 1111.", []string{"4111 1111 1111 1111"}, []string{PIICreditCard}},
		{"visa dashed", "card 4111-1111-1111-1111", []string{"4111-1111-1111-1111"}, []string{PIICreditCard}},
		{"visa plain", "4111111111111111", []string{"4111111111111111"}, []string{PIICreditCard}},
		{"amex 4-6-5", "amex 3782 822463 10005", []string{"3782 822463 10005"}, []string{PIICreditCard}},
		{"mastercard", "mc 5555555555554444", []string{"5555555555554444"}, []string{PIICreditCard}},
		{"card among dates and years", "paid 2024-05-01 4111 1111 1111 1111 2024", []string{"4111 1111 1111 1111"}, []string{PIICreditCard}},
		{"Luhn-invalid", "bad 4111 1111 1111 1112", nil, nil},
		{"Luhn-invalid plain", "4111111111111112", nil, nil},
		{"Luhn-valid but issuer digit 1", "id 1234567812345670", nil, nil},
		{"too long", "order 99999999999999999999", nil, nil},
		{"mixed separators", "4111 1111-1111 1111", nil, nil},
		{"glued to letters", "X4111111111111111", nil, nil},
		{"part of a decimal", "3.4111111111111111", nil, nil},

		{"IBAN grouped", "IBAN DE89 3704 0044 0532 0130 00 thanks", []string{"DE89 3704 0044 0532 0130 00"}, []string{PIIIBAN}},
		{"IBAN compact with letters", "GB82WEST12345698765432", []string{"GB82WEST12345698765432"}, []string{PIIIBAN}},
		{"IBAN bad checksum", "DE89370400440532013001", nil, nil},
		{"IBAN unknown country", "XX89370400440532013000", nil, nil},
		{"IBAN wrong length", "DE8937040044053201300", nil, nil},
		{"IBAN glued to a word", "ADE89370400440532013000", nil, nil},

		{"SSN", "ssn 123-45-6789", []string{"123-45-6789"}, []string{PIISSN}},
		{"SSN area 000", "ssn 000-12-3456", nil, nil},
		{"SSN area 666", "ssn 666-12-3456", nil, nil},
		{"SSN area 9xx", "ssn 912-12-3456", nil, nil},
		{"SSN group 00", "ssn 123-00-1234", nil, nil},
		{"SSN serial 0000", "ssn 123-45-0000", nil, nil},
		{"SSN inside a longer number", "ref 123-45-6789-1", nil, nil},

		{"phone international", "call +1 415 555 0132", []string{"+1 415 555 0132"}, []string{PIIPhone}},
		{"phone international compact", "+4915112345678", []string{"+4915112345678"}, []string{PIIPhone}},
		{"phone UK", "call +44 20 7946 0958", []string{"+44 20 7946 0958"}, []string{PIIPhone}},
		{"phone US formats", "call (415) 555-0132 or 415.555.0132", []string{"(415) 555-0132", "415.555.0132"}, []string{PIIPhone}},
		{"phone national trunk 0", "call 020 7946 0958", []string{"020 7946 0958"}, []string{PIIPhone}},
		{"phone with extra digit", "nums 415 555 01329", nil, nil},
		{"version", "version 1.2.3.4", nil, nil},
		{"IP address", "ip 192.168.100.200", nil, nil},
		{"date", "date 2024-01-15", nil, nil},
		{"time", "time 12:30:45", nil, nil},
		{"bare digits", "order 4155550132", nil, nil},

		{"several kinds in order", "ssn 123-45-6789, mail a@b.example, card 4111111111111111",
			[]string{"123-45-6789", "a@b.example", "4111111111111111"}, []string{PIIEmail, PIICreditCard, PIISSN}},
		{"empty", "", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sp := findPII(tc.in)
			got := spanStrings(tc.in, sp)
			if tc.want == nil {
				require.Empty(t, got)
			} else {
				require.Equal(t, tc.want, got)
			}
			kinds := spanKinds(sp, piiKindOrder)
			if tc.kind == nil {
				require.Empty(t, kinds)
			} else {
				require.Equal(t, tc.kind, kinds)
			}
		})
	}
}

func TestLuhnAndMod97(t *testing.T) {
	require.True(t, luhn("4111111111111111"))
	require.True(t, luhn("4111 1111 1111 1111"))
	require.False(t, luhn("4111111111111112"))
	require.True(t, luhn("79927398713"))
	require.False(t, luhn("79927398710"))
	require.Equal(t, 1, mod97("DE89370400440532013000"))
	require.Equal(t, 1, mod97("GB82WEST12345698765432"))
	require.NotEqual(t, 1, mod97("GB82WEST12345698765431"))
	require.Equal(t, -1, mod97("DE89-70400440532013000"))
}

func TestFindSecrets(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []string
		kind []string
	}{
		{"aws access key", "id AKIAIOSFODNN7EXAMPLE here", []string{"AKIAIOSFODNN7EXAMPLE"}, []string{"awsAccessKey"}},
		{"aws key glued to a word", "XAKIAIOSFODNN7EXAMPLE", nil, nil},
		{"github token", "key ghp_abcdefghijklmnopqrstuvwxyz0123456789", []string{"ghp_abcdefghijklmnopqrstuvwxyz0123456789"}, []string{"githubToken"}},
		{"github fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", []string{"github_pat_11ABCDEFG0123456789_abcdefghijklmnop"}, []string{"githubToken"}},
		{"github token too short", "ghp_abc", nil, nil},
		{"slack token", "xoxb-123456789012-abcdefghij", []string{"xoxb-123456789012-abcdefghij"}, []string{"slackToken"}},
		{"slack webhook", "post to https://hooks.slack.com/services/T000/B000/XXXXXXXX now", []string{"https://hooks.slack.com/services/T000/B000/XXXXXXXX"}, []string{"slackWebhook"}},
		{"stripe", "sk_live_abcdefghijklmnop1234", []string{"sk_live_abcdefghijklmnop1234"}, []string{"stripeKey"}},
		{"openai", "OPENAI=sk-proj-abcdefghijklmnopqrstuvwxyz123456", []string{"sk-proj-abcdefghijklmnopqrstuvwxyz123456"}, []string{"openaiKey"}},
		{"anthropic-style", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz", []string{"sk-ant-api03-abcdefghijklmnopqrstuvwxyz"}, []string{"openaiKey"}},
		{"google", "AIzaSyA1234567890abcdefghijklmnopqrstuv", []string{"AIzaSyA1234567890abcdefghijklmnopqrstuv"}, []string{"googleApiKey"}},
		{"jwt", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
			[]string{"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"}, []string{"jwt"}},
		{"private key block", "k:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----\nrest",
			[]string{"-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----"}, []string{"privateKey"}},
		{"truncated private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n",
			[]string{"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA"}, []string{"privateKey"}},
		{"public key is not secret", "-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----", nil, nil},
		{"generic api_key", "api_key = 'a8f9c2e1b7d4x6z3q5w0'", []string{"a8f9c2e1b7d4x6z3q5w0"}, []string{"genericSecret"}},
		{"generic env var", "DB_PASSWORD=Sup3rS3cretPassw0rd!", []string{"Sup3rS3cretPassw0rd!"}, []string{"genericSecret"}},
		{"generic json", `{"client_secret": "Zq8Xw2Lm9Pn4Rt7Vb1Kc"}`, []string{"Zq8Xw2Lm9Pn4Rt7Vb1Kc"}, []string{"genericSecret"}},
		{"aws secret via generic", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", []string{"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}, []string{"genericSecret"}},
		{"short password", "password: hunter2", nil, nil},
		{"placeholder", "token = xxxxxxxxxxxxxxxxxxxx", nil, nil},
		{"digits only", "max_tokens: 409612345678", nil, nil},
		{"template variable", `"apiKey": "${API_KEY}"`, nil, nil},
		{"prose", "the author wrote a secret novel about tokens", nil, nil},
		{"two secrets", "AKIAIOSFODNN7EXAMPLE and ghp_abcdefghijklmnopqrstuvwxyz0123456789",
			[]string{"AKIAIOSFODNN7EXAMPLE", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}, []string{"awsAccessKey", "githubToken"}},
		{"specific wins over generic", "api_key=sk_live_abcdefghijklmnop1234", []string{"sk_live_abcdefghijklmnop1234"}, []string{"stripeKey"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sp := findSecrets(tc.in)
			got := spanStrings(tc.in, sp)
			if tc.want == nil {
				require.Empty(t, got)
			} else {
				require.Equal(t, tc.want, got)
			}
			kinds := spanKinds(sp, secretKindOrder)
			if tc.kind == nil {
				require.Empty(t, kinds)
			} else {
				require.Equal(t, tc.kind, kinds)
			}
		})
	}
}

func TestFindURLsAndDomain(t *testing.T) {
	urls := []struct {
		in   string
		want []string
	}{
		{"see https://a.example/x?y=1. and more", []string{"https://a.example/x?y=1"}},
		{"(http://b.example/(c)) and [ftp://c.example/]", []string{"http://b.example/(c)", "ftp://c.example/"}},
		{"HTTPS://UP.example/", []string{"HTTPS://UP.example/"}},
		{"wss://live.example/socket, s3://bucket/key", []string{"wss://live.example/socket", "s3://bucket/key"}},
		{"javascript://x is not a scheme we list", nil},
		{"bare :// and http:// alone", nil},
		{`<a href="https://q.example/p">`, []string{"https://q.example/p"}},
		{"no urls", nil},
	}
	for _, tc := range urls {
		got := spanStrings(tc.in, findURLs(tc.in))
		if tc.want == nil {
			require.Empty(t, got, tc.in)
		} else {
			require.Equal(t, tc.want, got, tc.in)
		}
	}
	domains := map[string]string{
		"https://Sub.Example.COM:8443/p": "sub.example.com",
		"bob@Corp.Example":               "corp.example",
		"Bob <bob@corp.example>":         "corp.example",
		"mailto:x@y.example":             "y.example",
		"example.com/path":               "example.com",
		"example.com.":                   "example.com",
		"host:80":                        "host",
		"http://[::1]:80/":               "::1",
		"":                               "",
		"not a domain":                   "",
		"https://%zz":                    "",
	}
	for in, want := range domains {
		require.Equal(t, want, domainOf(in), in)
	}
}

func TestGlob(t *testing.T) {
	cases := []struct {
		pattern, s string
		want       bool
	}{
		{"send_*", "send_email", true},
		{"send_*", "read_doc", false},
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "example.com", false},
		{"/etc/*", "/etc/passwd", true},
		{"/etc/*", "/etc/ssh/sshd_config", false},
		{"/etc/**", "/etc/ssh/sshd_config", true},
		{"**/.env", "/srv/app/.env", true},
		{"file?.txt", "file1.txt", true},
		{"file?.txt", "file10.txt", false},
		{"[abc]*", "banana", true},
		{"[!abc]*", "banana", false},
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[\\-]x", "-x", true},
		{"\\*", "*", true},
		{"\\*", "x", false},
		{"a.b", "aXb", false},
		{"(x)+", "(x)+", true},
		{"", "", true},
		{"", "x", false},
		{"*", "", true},
		{"é*", "été", true},
	}
	c := &regexCache{}
	for _, tc := range cases {
		got, err := c.glob(tc.pattern, tc.s)
		require.NoError(t, err, tc.pattern)
		require.Equal(t, tc.want, got, "glob(%q, %q)", tc.pattern, tc.s)
	}
	_, err := c.glob("[abc", "a")
	require.Error(t, err)
	_, err = c.glob("[z-a]", "a")
	require.Error(t, err)
}

func TestRequiredLiterals(t *testing.T) {
	cases := []struct {
		pattern string
		want    []literal
	}{
		{`(?i)(ignore|disregard) (all )?previous instructions`, []literal{{"previous instructions", true}}},
		{`(?i)jailbreak|dan mode`, []literal{{"jailbreak", true}, {"dan mode", true}}},
		{`secret-[0-9]+`, []literal{{"secret-", false}}},
		{`a|b`, nil},
		{`.*`, nil},
		{`(?i)(x)+yz`, []literal{{"yz", true}}},
		{`(?i)ignore (all|previous) instructions 7`, []literal{{"instructions 7", true}}},
		{`a b | c`, nil},  // "c " trims to "c": too short to be worth a search
		{`(?i)café`, nil}, // non-ASCII folding is left to the regexp
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, requiredLiterals(tc.pattern), tc.pattern)
	}
}

// Text full of near-misses (prefixes, digit groups, headers without an end) must cost time
// linear in its length: an agent must not be able to stall the guardian with its text.
func TestDetectorsStayLinear(t *testing.T) {
	inputs := map[string]string{
		"begin":     strings.Repeat("-----BEGIN ", 20000),
		"headers":   strings.Repeat("-----BEGIN RSA PRIVATE KEY-----\nabc\n", 5000),
		"jwt":       strings.Repeat("eyJ", 70000),
		"jwt parts": strings.Repeat("eyJabcdef.", 20000),
		"openai":    strings.Repeat("sk-", 70000),
		"digits":    strings.Repeat("1 ", 100000),
		"emails":    strings.Repeat("a@b.", 50000),
		"urls":      strings.Repeat("http://", 30000),
		"iban":      strings.Repeat("DE89 ", 40000),
		"keys":      strings.Repeat("api_key=", 25000),
		"many hits": strings.Repeat("token: aB3dE5gH7jK9mN1pQ ", 10000),
		"card grid": strings.Repeat("4111 1111 1111 1111 ", 10000),
	}
	start := time.Now()
	for name, s := range inputs {
		findSecrets(s)
		findPII(s)
		findURLs(s)
		require.Less(t, time.Since(start), 20*time.Second, "detectors are super-linear on %q", name)
	}
	require.Len(t, findPII(inputs["card grid"]), 10000)
	require.Len(t, findSecrets(inputs["many hits"]), 10000)
}

// The literal prefilter never decides otherwise than the regexp it guards, including for
// runes outside ASCII that fold onto ASCII letters, and when one evaluation state sees
// one text after another (its lower-cased copy must follow).
func TestPrefilterAgreesWithRegexp(t *testing.T) {
	patterns := []string{`(?i)jailbreak|dan mode`, `(?i)ignore (all )?previous instructions`,
		`(?i)kill switch`, `secret-[0-9]+`}
	texts := []string{"", "DAN Mode on", "please Ignore previous INSTRUCTIONS", "ignore previous instructionſ",
		"\u212aill switch", "kill", "SECRET-12", "secret-12", "jailbreaK", "nothing here"}
	c := &regexCache{}
	st := &evalState{memo: map[memoKey]memoEntry{}}
	e := &Env{state: st}
	for _, s := range texts {
		for _, p := range patterns {
			got, err := c.match(e, p, s)
			require.NoError(t, err)
			require.Equal(t, regexp.MustCompile(p).MatchString(s), got, "%q on %q", p, s)
		}
	}
}

// containsLiteral agrees with strings.Contains, wherever the literal's rarest byte is and
// however often it occurs.
func TestContainsLiteral(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	alphabet := "ab7 .Z"
	gen := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 20000 {
		s, lit := gen(r.IntN(24)), gen(r.IntN(5))
		require.Equal(t, strings.Contains(s, lit), containsLiteral(s, lit), "%q in %q", lit, s)
	}
	require.True(t, containsLiteral("ignore all instructions 7 now", "instructions 7"))
	require.False(t, containsLiteral("ignore all instructions 8 now", "instructions 7"))
}
