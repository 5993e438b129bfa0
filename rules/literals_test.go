package rules

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestLiteralScreeningAgreesWithConditions compiles random rules whose guards need
// literals, on texts made of the same pieces (upper case, runes that fold onto ASCII
// letters, other non-ASCII runes), and checks that each rule matches through Evaluate,
// which screens candidates by their literals, exactly when its condition evaluates to
// true in the VM.
func TestLiteralScreeningAgreesWithConditions(t *testing.T) {
	pieces := []string{"ab", "Ab", "AB", "k", "K", "s", "S", "i", "I", "\u0130", "\u017f", "\u212a", "é", "É", " ", "x", "ik"}
	r := rand.New(rand.NewPCG(7, 11))
	word := func(n int) string {
		var b strings.Builder
		for range 1 + r.IntN(n) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		return b.String()
	}
	lit := func() string { return strings.TrimSpace(word(3)) + word(1) }
	re := func() string {
		var alts []string
		for range 1 + r.IntN(3) {
			alts = append(alts, lit()+[]string{"", `\s+`, "x?", "(ab|k)"}[r.IntN(4)]+lit())
		}
		return []string{"", "(?i)"}[r.IntN(2)] + strings.Join(alts, "|")
	}
	// globPat returns a glob and remembers a path it matches, which steps then use.
	var samples []string
	globPat := func() string {
		var pat, path strings.Builder
		for range 1 + r.IntN(4) {
			switch k := r.IntN(8); k {
			case 0:
				pat.WriteString("*")
				path.WriteString(strings.ReplaceAll(word(2), "/", ""))
			case 1:
				pat.WriteString("**")
				path.WriteString(word(2) + "/" + word(2))
			case 2:
				pat.WriteString("?")
				path.WriteString("x")
			case 3:
				pat.WriteString("[ab]")
				path.WriteString([]string{"a", "b"}[r.IntN(2)])
			default:
				l := []string{"/", lit(), lit(), "Ab/", "ik"}[k-3]
				pat.WriteString(l)
				path.WriteString(l)
			}
		}
		samples = append(samples, path.String())
		return pat.String()
	}
	field := func() string { return []string{"text", "text", "reasoning"}[r.IntN(3)] }
	shapes := []func() string{
		func() string { return fmt.Sprintf("%s matches %q", field(), re()) },
		func() string { return fmt.Sprintf("regexMatch(%s, %q) && tool == \"a\"", field(), re()) },
		func() string { return fmt.Sprintf("icontains(%s, %q)", field(), lit()) },
		func() string { return fmt.Sprintf("containsAny(%s, [%q, %q])", field(), lit(), lit()) },
		func() string { return fmt.Sprintf("containsAny(%s, [%q, \"\"])", field(), lit()) },
		func() string { return fmt.Sprintf("%s contains %q", field(), lit()) },
		func() string { return fmt.Sprintf("text startsWith %q || text endsWith %q", lit(), lit()) },
		func() string { return fmt.Sprintf("icontains(text, %q) || text matches %q", lit(), re()) },
		func() string { return fmt.Sprintf("text contains %q || reasoning contains %q", lit(), lit()) },
		func() string { return fmt.Sprintf("len(text) > 3 && icontains(text, %q) && kind == \"k\"", lit()) },
		func() string { return fmt.Sprintf("inputs.n > 1 && text contains %q", lit()) },
		func() string { return fmt.Sprintf("!(text contains %q)", lit()) },
		func() string { return fmt.Sprintf("glob(%q, inputs.p)", globPat()) },
		func() string { return fmt.Sprintf("glob(%q, inputs.p) || glob(%q, inputs.p)", globPat(), globPat()) },
		func() string { return fmt.Sprintf("kind == \"k\" && glob(%q, text)", globPat()) },
		func() string { return fmt.Sprintf("glob(%q, inputs.n)", globPat()) },
		func() string { return fmt.Sprintf("glob(%q, inputs) || icontains(inputs, %q)", globPat(), lit()) },
		func() string { return fmt.Sprintf("containsAny(inputs, [%q]) && text contains %q", lit(), lit()) },
	}
	screened := 0
	for round := range 60 {
		var rs []Rule
		for i := range 1 + r.IntN(90) {
			c := shapes[r.IntN(len(shapes))]()
			rs = append(rs, rule(fmt.Sprintf("r%d", i), c, ActionDeny))
		}
		p := mustCompile(t, Options{}, rs...)
		for range 60 {
			env := &Env{Kind: []string{"k", "j"}[r.IntN(2)], Tool: []string{"a", "b"}[r.IntN(2)],
				Text: word(12), Reasoning: word(6), Inputs: map[string]any{"n": []any{2, "s"}[r.IntN(2)]}}
			switch r.IntN(3) {
			case 0:
				env.Inputs["p"] = word(4) + "/" + word(4)
				if len(samples) > 0 && r.IntN(2) == 0 {
					env.Inputs["p"] = samples[r.IntN(len(samples))]
					env.Text = samples[r.IntN(len(samples))]
				}
			case 1:
				env.Inputs["p"] = []any{nil, 12, true}[r.IntN(3)]
			}
			if r.IntN(4) == 0 {
				env.Text = rs[r.IntN(len(rs))].When // the rules' own literals
				env.Inputs["p"] = env.Text
			}
			if p.index.lits != nil {
				mask := p.index.candidates(nil, env, p.active, false)
				for _, w := range p.index.always {
					screened += popcount(w)
				}
				for _, w := range mask {
					screened -= popcount(w)
				}
			}
			requireVerdictsMatchVM(t, p, env, fmt.Sprintf("round %d ", round))
		}
	}
	require.Greater(t, screened, 1000, "the screening dropped rules")
}

func popcount(w uint64) int {
	n := 0
	for ; w != 0; w &= w - 1 {
		n++
	}
	return n
}

// TestLitSpecialRunes checks that litSpecial knows every rune that lower-cases to, or
// case-folds with, an ASCII byte.
func TestLitSpecialRunes(t *testing.T) {
	for c := rune(utf8.RuneSelf); c <= unicode.MaxRune; c++ {
		if !utf8.ValidRune(c) {
			continue
		}
		ascii := false
		for _, b := range []byte(strings.ToLower(string(c))) {
			ascii = ascii || b < utf8.RuneSelf
		}
		for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
			ascii = ascii || f < utf8.RuneSelf
		}
		require.Equal(t, ascii, litSpecial("x"+string(c)), "%U", c)
	}
}
