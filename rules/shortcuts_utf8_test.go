package rules

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/expr-lang/expr/parser"
	"github.com/stretchr/testify/require"
)

// The engine's shortcuts (a regexp's literal pre-check, the rule index's literal
// screening, the per-evaluation and per-session caches) must give the verdicts of the
// plain expr programs. These tests compare them on the inputs where byte-level shortcuts
// and rune-level matching part ways: text that is not valid UTF-8, which Go's regexp
// reads one invalid byte at a time as U+FFFD.

// evalSteady evaluates env twice and returns the second verdict: the first evaluation of
// a fresh pooled state is a timed one, which skips the rule index and its screening.
func evalSteady(p *Program, e *Env) Verdict {
	p.Evaluate(e)
	return p.Evaluate(e)
}

// patternForm is a rule testing a pattern on a field in one of the ways the shortcuts
// recognise. Patterns are quoted with backticks, so that expr keeps their bytes as they
// are, invalid ones included (its "\xe9" would be the rune é).
type patternForm struct {
	name string
	when string // a format taking the pattern
	glob bool
}

var patternForms = []patternForm{
	{"matches", "text matches `%s`", false},
	{"regexMatch", "regexMatch(text, `%s`)", false},
	{"input matches", "inputs.s matches `%s`", false},
	{"glob", "glob(`%s`, text)", true},
	{"input glob", "glob(`%s`, inputs.s)", true},
}

// plainMatch is what the rule's test evaluates to without any shortcut.
func plainMatch(t *testing.T, pattern string, glob bool, s string) bool {
	t.Helper()
	if glob {
		src, err := globRegexp(pattern)
		require.NoError(t, err)
		pattern = src
	}
	return regexp.MustCompile(pattern).MatchString(s)
}

// patternEnv is a step whose text and inputs.s are both s.
func patternEnv(s string) *Env { return &Env{Text: s, Inputs: map[string]any{"s": s}} }

func TestShortcutsReadInvalidUTF8LikeRegexp(t *testing.T) {
	cases := []struct {
		name, pattern, text string
		plain               bool // documents the expectation; checked against regexp below
	}{
		{"U+FFFD matches a Latin-1 byte", "\uFFFD", "caf\xe9", true},
		{"U+FFFD in a literal matches a Latin-1 byte", "caf\uFFFD", "caf\xe9 au lait", true},
		{"U+FFFD matches a truncated sequence", "a\uFFFDb", "xa\xc3b", true},
		{"two invalid bytes are two U+FFFD", "\uFFFD\uFFFD", "\xff\xfe", true},
		{"alternative with U+FFFD", "jailbreak|\uFFFD\uFFFD", "\xff\xfe", true},
		{"a real U+FFFD matches", "caf\uFFFD", "caf\uFFFD", true},
		{"the rest of the literal is still required", "caf\uFFFD", "ca\xe9", false},
		{"a valid text without it", "caf\uFFFD", "café", false},
	}
	for _, tc := range cases {
		for _, form := range patternForms {
			if form.glob {
				continue
			}
			t.Run(tc.name+"/"+form.name, func(t *testing.T) {
				require.Equal(t, tc.plain, plainMatch(t, tc.pattern, false, tc.text))
				when := fmt.Sprintf(form.when, tc.pattern)
				checkScreening(t, when, tc.text, tc.plain)
				checkPatternRule(t, when, tc.text, tc.plain)
			})
		}
	}
}

func TestShortcutsReadInvalidUTF8LikeGlob(t *testing.T) {
	cases := []struct {
		name, pattern, text string
		plain               bool
	}{
		{"U+FFFD matches a Latin-1 byte", "*\uFFFD*", "caf\xe9", true},
		{"U+FFFD matches a truncated sequence", "x\uFFFD*", "x\xc3", true},
		{"the rest of the literal is still required", "caf\uFFFD*", "ca\xe9", false},
		// globRegexp reads an invalid byte of the pattern as U+FFFD. A rule's expression
		// must be valid UTF-8, so these are checked on the screening alone.
		{"an invalid byte matches a real U+FFFD", "*\xe9*", "caf\uFFFD", true},
		{"an invalid byte matches another", "caf\xe9*", "caf\xff", true},
		{"an invalid byte and the rest of the literal", "caf\xe9*", "ca\xe9", false},
	}
	for _, tc := range cases {
		for _, form := range patternForms {
			if !form.glob {
				continue
			}
			t.Run(tc.name+"/"+form.name, func(t *testing.T) {
				require.Equal(t, tc.plain, plainMatch(t, tc.pattern, true, tc.text))
				when := fmt.Sprintf(form.when, tc.pattern)
				checkScreening(t, when, tc.text, tc.plain)
				if utf8.ValidString(tc.pattern) {
					checkPatternRule(t, when, tc.text, tc.plain)
				}
			})
		}
	}
}

// checkPatternRule checks that a rule `when` denies text exactly when plain, and that a
// conjunct after it that fails at run time fails exactly then too (the shortcut must
// not hide the error by deciding the test is false).
func checkPatternRule(t *testing.T, when, text string, plain bool) {
	t.Helper()
	p := mustCompile(t, Options{}, rule("r", when, ActionDeny))
	v := evalSteady(p, patternEnv(text))
	require.Equal(t, plain, v.Action == ActionDeny, "%s on %q: %s", when, text, v.Reasoning)

	when += ` && len(inputs.missing) > 2` // len(nil) fails
	p = mustCompile(t, Options{}, rule("r", when, ActionDeny))
	v = evalSteady(p, patternEnv(text))
	failed := len(v.Matches) == 1 && v.Matches[0].Error != ""
	require.Equal(t, plain, failed, "%s on %q: %+v", when, text, v.Matches)
}

// checkScreening checks that the rule index's literal screening keeps a rule `when` for
// text when its test holds.
func checkScreening(t *testing.T, when, text string, plain bool) {
	t.Helper()
	if plain {
		require.True(t, screening(t, when)(text), "%s on %q: screened out", when, text)
	}
}

// screening returns whether the rule index's literal screening keeps a rule `when` for a
// text. It drives literalsOf and litFilter directly, so that it also covers patterns
// Compile rejects in a rule (not valid UTF-8).
func screening(t *testing.T, when string) func(text string) bool {
	t.Helper()
	tree, err := parser.Parse(when)
	require.NoError(t, err)
	g, ok := literalsOf(tree.Node, &regexCache{})
	if !ok {
		return func(string) bool { return true } // no literal condition: never screened out
	}
	for _, l := range g.lits {
		require.True(t, utf8.ValidString(l) && !strings.ContainsRune(l, utf8.RuneError),
			"%s: the regexp reads literal %q differently", when, l)
	}
	f := newLitFilter([]*compiledRule{{lits: &g}})
	return func(text string) bool {
		mask := []uint64{1}
		f.screen(patternEnv(text), mask, make([]uint64, 1))
		return mask[0] == 1
	}
}

// Random texts mixing valid text, invalid bytes and real U+FFFD, against patterns that
// hold U+FFFD or (globs) invalid bytes, and valid ones alongside: every rule of one
// Program matches exactly when its plain regexp or glob does, and the screening keeps
// every rule whose test holds (Compile rejects the globs with invalid bytes in a rule, so
// only the screening sees them).
func TestShortcutsAgreeWithPlainPatternsOnMixedUTF8(t *testing.T) {
	regexps := []string{"\uFFFD", "caf\uFFFD", "\uFFFD\uFFFD", "a\uFFFDb", "(?i)caf\uFFFD",
		"xyz|\uFFFDa", "é\uFFFD", "caf", "(?i)CAF", "a/b"}
	globs := []string{"*\uFFFD*", "**\uFFFD\uFFFD**", "caf\uFFFD*", "*caf*", "*é*", "a*",
		"*\xe9*", "caf\xe9*", "*a\xffb*", "*\xc3*"}
	type check struct {
		id, when string
		re       *regexp.Regexp // the plain test
		kept     func(string) bool
	}
	var rules []Rule
	var checks []check
	for _, form := range patternForms {
		patterns := regexps
		if form.glob {
			patterns = globs
		}
		for _, pat := range patterns {
			c := check{id: fmt.Sprintf("r%d", len(checks)), when: fmt.Sprintf(form.when, pat)}
			src := pat
			if form.glob {
				var err error
				src, err = globRegexp(pat)
				require.NoError(t, err)
			}
			c.re = regexp.MustCompile(src)
			c.kept = screening(t, c.when)
			if utf8.ValidString(pat) {
				rules = append(rules, rule(c.id, c.when, ActionDeny))
			}
			checks = append(checks, c)
		}
	}
	p := mustCompile(t, Options{}, rules...)

	// Pieces that join into valid and invalid sequences: "\xef\xbf" then "\xbd" is a real
	// U+FFFD, "\xc3" then "\xa9" is é, "\xed\xa0\x80" a surrogate's encoding (invalid).
	pieces := []string{"caf", "CAF", "a", "b", "x", "/", " ", "é", "\uFFFD", "\xe9", "\xff", "\xc3",
		"\xa9", "\xef\xbf", "\xbd", "\xed\xa0\x80"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		var b strings.Builder
		for range 1 + r.IntN(8) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		text := b.String()
		var want []string
		for _, c := range checks {
			if !c.re.MatchString(text) {
				continue
			}
			require.True(t, c.kept(text), "%s on %q: screened out", c.when, text)
			if utf8.ValidString(c.when) {
				want = append(want, c.id)
			}
		}
		var got []string
		for _, m := range evalSteady(p, patternEnv(text)).Matches {
			require.Empty(t, m.Error, "%s on %q", m.RuleID, text)
			got = append(got, m.RuleID)
		}
		slices.Sort(want)
		slices.Sort(got)
		require.Equal(t, want, got, "rules matching %q", text)
	}
}

// A required literal keeps only the runes the regexp matches at their own bytes: U+FFFD
// (which matches any invalid byte) and invalid runes split it, and the longest part that
// is left is required.
func TestRequiredLiteralsSplitAtUFFFD(t *testing.T) {
	glob := func(p string) string {
		src, err := globRegexp(p)
		require.NoError(t, err)
		return src
	}
	cases := []struct {
		name, pattern string
		want          []literal
	}{
		{"U+FFFD alone", "\uFFFD", nil},
		{"U+FFFD at the end", "caf\uFFFD", []literal{{"caf", false}}},
		{"the longest part", "ab\uFFFDcdef\uFFFDg", []literal{{"cdef", false}}},
		{"parts too short", "a\uFFFDb", nil},
		{"an alternative without a part", "jailbreak|\uFFFD\uFFFD", nil},
		{"an alternative with a part", "jailbreak|xy\uFFFD", []literal{{"jailbreak", false}, {"xy", false}}},
		{"a surrogate", `ab\x{D800}cde`, []literal{{"cde", false}}},
		{"a glob's U+FFFD", glob("*caf\uFFFD*"), []literal{{"caf", false}}},
		{"a glob's invalid byte", glob("*\xe9ab*"), []literal{{"ab", false}}},
		{"valid UTF-8 is kept whole", "café crème", []literal{{"café crème", false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, requiredLiterals(tc.pattern), "%q", tc.pattern)
		})
	}
}

// sessionHas questions whose selector and substring join into the same string are
// different questions, for the evaluation's cache and for the session's memo alike.
func TestSessionHasQuestionsDoNotCollide(t *testing.T) {
	cases := []struct {
		name string
		step HistoryStep
	}{
		{"the second question holds", HistoryStep{Kind: "toolCall", Tool: "a", Text: "x\x00b"}},
		{"the first question holds", HistoryStep{Kind: "toolCall", Tool: "a\x00", Text: "b"}},
		{"the third question holds", HistoryStep{Kind: "toolCall", Tool: "a\x00b\x00", Text: "c"}},
	}
	questions := []struct{ id, sel, sub string }{
		{"q0", "a\x00", "b"},
		{"q1", "a", "\x00b"},
		{"q2", "a\x00b\x00", "c"},
		{"q3", "a\x00b", "\x00c"},
	}
	var rules []Rule
	for _, q := range questions {
		rules = append(rules, rule(q.id, fmt.Sprintf("sessionHas(session, %q, %q)", q.sel, q.sub), ActionDeny))
	}
	p := mustCompile(t, Options{}, rules...)
	for _, tc := range cases {
		steps := []HistoryStep{tc.step}
		plain := Session{StepCount: 1, Steps: steps}
		var want []string
		for _, q := range questions {
			v, err := sessionHas(p.cache, &Env{Session: plain}, plain, q.sel, strings.ToLower(q.sub))
			require.NoError(t, err)
			if v {
				want = append(want, q.id)
			}
		}
		require.NotEmpty(t, want)
		sessions := map[string]Session{
			"evaluation cache": plain,
			"session memo":     plain.WithCounts(CountSteps(steps)),
		}
		for name, s := range sessions {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				var got []string
				for _, m := range evalSteady(p, &Env{Session: s}).Matches {
					got = append(got, m.RuleID)
				}
				slices.Sort(got)
				require.Equal(t, want, got)
			})
		}
	}
}
