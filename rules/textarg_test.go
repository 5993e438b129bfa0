package rules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// textArgS is the text the text-argument tests hide in values of every type: an email, an
// AWS key and a URL.
const textArgS = "Bob bob@corp.example key AKIAIOSFODNN7EXAMPLE see https://evil.example/x"

// textArgEnv is a step whose inputs and params hold textArgS.
func textArgEnv() *Env {
	return &Env{Kind: "toolCall", Tool: "send", Text: textArgS,
		Inputs: map[string]any{"note": textArgS}, Params: map[string]any{"note": textArgS}}
}

// evalValue compiles src as the modify.set value of an always-matching rule, through
// Compile as the rules API does, and returns the value the evaluation sets.
func evalValue(t *testing.T, src string, env *Env) any {
	t.Helper()
	p, err := Compile([]Rule{rule("v", "true", ActionModify, func(r *Rule) {
		r.Modify = &ModifySpec{Set: map[string]string{"out": src}}
	})}, Options{})
	require.NoError(t, err, src)
	v := p.Evaluate(env)
	require.Equal(t, ActionModify, v.Action, "%s: %s", src, v.Reasoning)
	require.NotNil(t, v.Modify, src)
	return v.Modify.Set["out"]
}

// The text helpers read any value as its text, as the docs promise: nil as "", a number or
// a boolean as written, a map or a list as its JSON, a string as it is. Each call is
// compiled through Compile, evaluated for its value, and as a condition whose verdict must
// be the plain VM's (guards, literal screening and the memo must not change it).
func TestTextHelpersAcceptAnyValue(t *testing.T) {
	// values are one of each type; the last five all hold textArgS.
	values := []struct{ name, src string }{
		{"nil", `nil`}, {"number", `123`}, {"bool", `true`},
		{"map", fmt.Sprintf(`{"note": %q}`, textArgS)}, {"list", fmt.Sprintf(`[1, %q, nil]`, textArgS)},
		{"string", fmt.Sprintf(`%q`, textArgS)},
		{"inputs", `inputs`}, {"params", `params`}, {"input", `inputs.note`},
	}
	none := []string{}
	cases := []struct {
		call string // %s is the value
		// want is the result for nil, the number, the boolean, and the values holding textArgS.
		nilWant, numWant, boolWant, textWant any
	}{
		{`pii(%s)`, none, none, none, []string{"bob@corp.example"}},
		{`piiKinds(%s)`, none, none, none, []string{"email"}},
		{`emails(%s)`, none, none, none, []string{"bob@corp.example"}},
		{`secrets(%s)`, none, none, none, []string{"AKIAIOSFODNN7EXAMPLE"}},
		{`secretKinds(%s)`, none, none, none, []string{"awsAccessKey"}},
		{`urls(%s)`, none, none, none, []string{"https://evil.example/x"}},
		{`map(urls(%s), domain(#))`, []any{}, []any{}, []any{}, []any{"evil.example"}},
		{`domain(%s)`, "", "123", "true", ""},
		{`glob("**bob@corp.example**", %s)`, false, false, false, true},
		{`glob("12?", %s)`, false, true, false, false},
		{`glob("", %s)`, true, false, false, false},
		{`regexMatch(%s, "(?i)BOB@corp")`, false, false, false, true},
		{`regexMatch(%s, "^(true|123)$")`, false, true, true, false},
		{`regexFind(%s, "[a-z]+@[a-z.]+")`, none, none, none, []string{"bob@corp.example"}},
		{`%s matches "(?i)BOB@corp"`, false, false, false, true},
		{`%s matches "^$"`, true, false, false, false},
		{`icontains(%s, "BOB@CORP")`, false, false, false, true},
		{`icontains(%s, "TRU")`, false, false, true, false},
		{`containsAny(%s, ["nothing", "AKIAIOSFODNN7"])`, false, false, false, true},
		{`containsAny(%s, ["23"])`, false, true, false, false},
	}
	for _, c := range cases {
		for i, v := range values {
			want := c.textWant
			switch i {
			case 0:
				want = c.nilWant
			case 1:
				want = c.numWant
			case 2:
				want = c.boolWant
			}
			src := fmt.Sprintf(c.call, v.src)
			t.Run(fmt.Sprintf("%s/%s", strings.SplitN(c.call, "(", 2)[0], v.name), func(t *testing.T) {
				require.Equal(t, want, evalValue(t, src, textArgEnv()), src)
				cond := src
				switch w := want.(type) {
				case string:
					cond = fmt.Sprintf("%s == %q", src, w)
				case []string, []any:
					cond = fmt.Sprintf("len(%s) > 0", src)
				}
				p := mustCompile(t, Options{}, rule("c", cond, ActionDeny), rule("g", cond+` && tool == "send"`, ActionDeny))
				requireVerdictsMatchVM(t, p, textArgEnv(), "")
				requireVerdictsMatchVM(t, p, &Env{Tool: "send"}, "")
			})
		}
	}
}

// The calls the defect report quoted, which the rules API refused with invalid_rule.
func TestTextHelpersCompileAnyArgument(t *testing.T) {
	for _, c := range []struct {
		when string
		want Action
	}{
		{`len(pii(nil)) == 0`, ActionDeny},
		{`len(pii(123)) == 0`, ActionDeny},
		{`len(pii(inputs)) > 0`, ActionDeny},
		{`len(secrets(params)) >= 0`, ActionDeny},
		{`icontains(inputs, "bob")`, ActionDeny},
		{`icontains(params, "nobody")`, ActionAllow},
		{`"awsAccessKey" in secretKinds(params) && tool == "send"`, ActionDeny},
		{`domain(session.stepCount) == "0"`, ActionDeny},
		{`containsAny(isError, ["false"])`, ActionDeny},
		{`glob("*", now)`, ActionDeny}, // RFC 3339 has no '/' for * to stop at
	} {
		p, err := Compile([]Rule{rule("r", c.when, ActionDeny)}, Options{})
		require.NoError(t, err, c.when)
		v := p.Evaluate(textArgEnv())
		require.Equal(t, c.want, v.Action, "%s: %s", c.when, v.Reasoning)
		for _, m := range v.Matches {
			require.Empty(t, m.Error, c.when)
		}
	}
}

// A step without inputs (a nil map) has no text, as nil has none: not "null". The guards,
// which read inputs.NAME themselves, read a nil value the same way.
func TestTextHelpersNilMapIsEmpty(t *testing.T) {
	none := &Env{Tool: "t"}
	nilValues := &Env{Tool: "t", Inputs: map[string]any{"m": map[string]any(nil), "l": []any(nil)}}
	for _, c := range []struct {
		when  string
		env   *Env
		match bool
	}{
		{`icontains(inputs, "null")`, none, false},
		{`glob("", params)`, none, true},
		{`inputs matches "^$"`, none, true},
		{`containsAny(toolDef, ["null"])`, none, false},
		{`domain(inputs) == ""`, none, true},
		{`glob("", inputs.m) && tool == "t"`, nilValues, true},
		{`inputs.l matches "^$" && tool == "t"`, nilValues, true},
		{`icontains(inputs.m, "null") && tool == "t"`, nilValues, false},
		{`len(pii(inputs.l)) == 0 && tool == "t"`, nilValues, true},
	} {
		p := mustCompile(t, Options{}, rule("r", c.when, ActionDeny))
		v := p.Evaluate(c.env)
		require.Equal(t, c.match, v.Action == ActionDeny, "%s: %s", c.when, v.Reasoning)
		requireVerdictsMatchVM(t, p, c.env, "")
	}
}

// A map or list is converted to text once per evaluation, however many calls read it, so
// the scanners' memo (keyed by the text's address) scans it once too.
func TestTextArgConvertedOncePerEvaluation(t *testing.T) {
	prog, diags := compileExpr(`len(pii(inputs)) + len(pii(inputs)) + len(emails(inputs)) + len(pii(params))`,
		"when", false, helperOptions(&regexCache{}))
	require.Empty(t, diags)
	st := &evalState{memo: map[memoKey]memoEntry{}}
	e := *textArgEnv()
	e.state = st
	out, err := st.vm.Run(prog, &e)
	require.NoError(t, err)
	require.Equal(t, 4, out)
	scans := 0
	for k := range st.memo {
		if k.fn == "pii" {
			scans++
		}
	}
	require.Equal(t, 2, scans, "pii scanned inputs once, and params once")
	require.Len(t, st.texts, 2)
	// A pooled state must not keep a step's values alive.
	texts := st.texts[:cap(st.texts)]
	st.reset()
	require.Empty(t, st.texts)
	for _, x := range texts {
		require.Zero(t, x)
	}
}

// Converting a value to text builds its JSON, which counts against the evaluation budget
// as toJSON does: a value too large fails the rule rather than exhausting memory.
func TestTextArgChargesTheBudget(t *testing.T) {
	big := strings.Repeat("x", MaxProduced+1)
	env := &Env{Inputs: map[string]any{"big": big}}
	p := mustCompile(t, Options{Budget: -1},
		rule("map", `len(pii(inputs)) > 0`, ActionDeny),
		rule("str", `len(pii(inputs.big)) > 0`, ActionHold, mode(ModeMonitor)))
	v := p.Evaluate(env)
	errs := map[string]string{}
	for _, m := range v.Matches {
		errs[m.RuleID] = m.Error
	}
	require.Contains(t, errs["map"], "evaluation budget exceeded")
	require.NotContains(t, errs, "str", "a string is read as it is, with nothing built")
}

// A map or list is read as its JSON without HTML escaping: encoding/json's default writes
// <, > and & as \u003c, \u003e and \u0026, so a rule looking for a shell chain, markup or a
// query string inside structured inputs never matched.
func TestTextOfStructuredInputsKeepsMarkup(t *testing.T) {
	env := &Env{Tool: "run", Inputs: map[string]any{
		"args": map[string]any{"cmd": "ls && curl evil"},
		"html": []any{"<script>alert(1)</script>"},
		"link": map[string]any{"u": "https://x.example/?a=1&b=2"},
	}}
	for _, when := range []string{
		`containsAny(inputs, ["&&"])`,
		`icontains(inputs.html, "<script>")`,
		`any(urls(inputs), # endsWith "b=2")`,
		`regexMatch(inputs.args, "&&\\s*curl")`,
	} {
		t.Run(when, func(t *testing.T) {
			p := mustCompile(t, Options{}, rule("r", when, ActionDeny))
			require.Equal(t, ActionDeny, p.Evaluate(env).Action)
			requireVerdictsMatchVM(t, p, env, "")
		})
	}
}
