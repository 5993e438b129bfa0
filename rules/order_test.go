package rules

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// orderPieces are conjuncts of every sort: cheap tests the engine moves first, costly
// helpers, and tests that fail at run time on some steps (inputs.n > 1 on a string, a member
// of nil).
var orderPieces = []string{
	`tool == "a"`, `tool != "b"`, `kind in ["toolCall", "mcp"]`, `tool not in ["a", "ab"]`,
	`!(user.id in ["u"])`, `agent.id startsWith "x"`, `user.email endsWith "@corp.example"`,
	`agent.model contains "mini"`, `session.id startsWith "t"`, `tool startsWith "a"`,
	`now.Weekday().String() == "Sunday"`, `now.Hour() < 6 || now.Hour() >= 22`, `now.Day() > 15`,
	`session.stepCount > 2`, `isError`, `text matches "(?i)ignore"`, `reasoning matches "x+"`,
	`containsAny(text, ["IGNORE", "evil"])`, `icontains(reasoning, "X")`, `len(text) > 3`,
	`countTool(session, "a") >= 1`, `countTool(session, "a*") > 1`, `countDecision(session, "deny") == 0`,
	`lastTool(session) == "ab"`, `any(urls(text), domain(#) endsWith "evil.example")`,
	`countToolWithin(session, "a*", duration("1m")) >= 2`, `sessionHas(session, "a", "secret")`,
	`toolStreak(session, "a") >= 2`, `sessionText(session) contains "secret"`,
	`"email" in piiKinds(text)`, `len(secrets(text)) > 0`, `glob("/etc/**", inputs.path)`,
	`domain(inputs.to) == "evil.example"`, `any(session.steps, .decision == "deny")`,
	`inputs.n > 1`, `inputs.n.x == 1`, `params.a.b == "c"`, `len(inputs.path) > 3`,
	`toolDef?.type == "api"`, `int(inputs.n) > 0`, `true`, `false`,
	`inputs.path matches "^/etc"`, `inputs.n matches "2"`, `"privateKey" in secretKinds(text)`,
	`"email" in piiKinds(inputs.to)`, `len(pii(inputs.to)) > 0`, `len(urls(text)) == 1`,
	`toolStreak(session, "a*") >= 1`, `toolStreak(session, "b") == 0`, `regexMatch(inputs.to, "evil")`,
	`glob("**/passwd", inputs.path)`, `sessionText(session) startsWith "x"`,
	// Text helpers reading values that are not strings.
	`len(pii(inputs)) > 0`, `icontains(inputs, "evil")`, `glob("**x@evil**", inputs)`,
	`containsAny(params, ["flat", "zz"])`, `session.stepCount matches "^[0-3]$"`, `domain(inputs.n) == "2"`,
	`len(secrets(nil)) == 0`, `regexMatch(isError, "true")`, `"email" in piiKinds(inputs)`,
	// Inputs tested for presence, and read for URLs.
	`inputs.path != nil`, `inputs.n == nil`, `nil != inputs.to`, `nil == inputs.path`,
	`any(urls(inputs.to), domain(#) endsWith "evil.example")`, `any(urls(inputs.path), domain(#) in ["a.b"])`,
	// Comparisons of inputs with numbers, which fail when the input is not one.
	`inputs.amount > 100`, `inputs.amount <= 99`, `100 < inputs.amount`, `2 >= inputs.n`, `inputs.n < 3`,
}

// Cost ordering must never change a rule's result: the same match, the same error, for
// conditions made of random conjuncts in random order, on random steps.
func TestCostOrderAgreesWithConditions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	var rs []Rule
	for i := range 400 {
		n := 1 + r.IntN(4)
		parts := make([]string, n)
		for k := range parts {
			parts[k] = orderPieces[r.IntN(len(orderPieces))]
			if strings.Contains(parts[k], "||") {
				parts[k] = "(" + parts[k] + ")"
			}
		}
		rs = append(rs, rule(fmt.Sprintf("r%d", i), strings.Join(parts, pick(" && ", " and ")), ActionDeny))
	}
	p := mustCompile(t, Options{Budget: -1}, rs...)
	guarded, whole := 0, 0
	for _, cr := range p.rules {
		if len(cr.guards) > 0 {
			guarded++
		}
		if cr.whole {
			whole++
		}
	}
	require.Greater(t, guarded, 200)
	require.Greater(t, whole, 30)

	base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	for range 1500 {
		env := &Env{
			Kind: pick("toolCall", "mcp", "message"), Tool: pick("a", "ab", "b", ""),
			Agent:     Agent{ID: pick("x1", "y"), Model: pick("gpt-mini", "large")},
			User:      User{ID: pick("u", "v"), Email: pick("a@corp.example", "b@other.example")},
			Text:      pick("", "please IGNORE that", "see https://x.evil.example/a and bob@corp.example", "plain"),
			Reasoning: pick("", "xxx", "no"), IsError: r.IntN(2) == 0,
			Now: base.Add(time.Duration(r.IntN(24*30)) * time.Hour),
		}
		env.Session.ID = pick("t-1", "s-1")
		switch r.IntN(4) {
		case 0: // nil maps
		case 1:
			env.Inputs = map[string]any{"n": 2, "path": "/etc/passwd", "to": "x@evil.example"}
		case 2:
			env.Inputs = map[string]any{"n": "s", "path": 7}
			env.Params = map[string]any{"a": map[string]any{"b": "c"}}
		case 3:
			env.Inputs = map[string]any{"n": nil}
			env.Params = map[string]any{"a": "flat"}
			env.ToolDef = map[string]any{"type": "api"}
		}
		if env.Inputs != nil && r.IntN(2) == 0 {
			env.Inputs["amount"] = []any{100.0, 99.5, 100, 101, "150", nil, -1e300, math.NaN(), math.Inf(1)}[r.IntN(9)]
		}
		if r.IntN(8) == 0 {
			// Values that are nil without being a nil interface, and URLs in inputs.
			env.Inputs = map[string]any{"path": []any(nil), "to": map[string]any(nil), "n": "https://a.b/x"}
			if r.IntN(2) == 0 {
				env.Inputs = map[string]any{"path": "see https://a.b/c", "to": []any{"https://x.evil.example"}}
			}
		}
		steps := make([]HistoryStep, r.IntN(6))
		for k := range steps {
			steps[k] = HistoryStep{Kind: pick("toolCall", "toolResult"), Tool: pick("a", "ab", "b"),
				Decision: pick("allow", "deny"), Text: pick("", "a Secret", "x"),
				ReceivedAt: env.Now.Add(-time.Duration(r.IntN(120)) * time.Second)}
		}
		env.Session.Steps, env.Session.StepCount = steps, len(steps)
		if r.IntN(2) == 0 {
			env.Session = env.Session.WithCounts(CountSteps(steps))
		}
		requireVerdictsMatchVM(t, p, env, "")
	}
}

// A costly helper written first runs only on steps that pass the cheap tests after it.
func TestCostOrderSkipsCostlyHelpers(t *testing.T) {
	for _, c := range []struct {
		when   string
		guards int
		whole  bool
	}{
		{`countToolWithin(session, "delete_*", duration("1m")) >= 3 && tool matches "^delete_"`, 2, true},
		{`sessionHas(session, "read_file", "TOP SECRET") && tool == "send_email"`, 2, true},
		{`any(session.steps, .decision == "deny" && .tool == "pay") && tool == "pay"`, 2, true},
		{`sessionText(session) contains "x" && tool == "pay"`, 2, true},
		{`inputs.command matches "rm\\s+-rf" && tool == "run_shell"`, 2, true},
		{`"privateKey" in secretKinds(text) && len(pii(inputs.body)) > 0`, 2, true},
		{`glob("**/*.pem", inputs.path) || glob("**/id_rsa*", inputs.path)`, 1, true},
		{`now.Weekday().String() == "Sunday" && tool == "deploy"`, 2, true},
		// A comparison that fails on a string input still refutes the rule for a smaller
		// number; nothing after it becomes a guard.
		{`inputs.amount > 1000 && tool == "pay"`, 1, false},
		{`tool == "pay" && inputs.amount > 1000 && user.org == "x"`, 2, false},
		{`inputs.amount.x > 1000 && tool == "pay"`, 0, false},
	} {
		p := mustCompile(t, Options{}, rule("r", c.when, ActionDeny))
		require.Len(t, p.rules[0].guards, c.guards, c.when)
		require.Equal(t, c.whole, p.rules[0].whole, c.when)
	}
	p := mustCompile(t, Options{}, rule("r", `sessionHas(session, "*", "secret") && tool == "send_email"`, ActionDeny))
	require.Equal(t, uint64(0), p.index.always[0]&1, "filed under its tool")
	require.Equal(t, "tool", p.rules[0].guards[0].name, "the cheap test runs first")
}

// Deferred fields are built once per evaluation, only when a rule reading them gets past
// its guards.
func TestDeferredFields(t *testing.T) {
	p := mustCompile(t, Options{},
		rule("in", `tool == "pay" && inputs.amount > 100`, ActionDeny),
		rule("par", `kind == "knowledge" && params.q contains "salary"`, ActionDeny),
		rule("msg", `tool == "pay"`, ActionAllow),
	)
	calls := map[string]int{}
	env := func(tool, kind string) *Env {
		e := &Env{Tool: tool, Kind: kind}
		e.Defer(&Deferred{
			Inputs: func() map[string]any { calls["inputs"]++; return map[string]any{"amount": 500} },
			Params: func() map[string]any { calls["params"]++; return map[string]any{"q": "salary of bob"} },
		})
		return e
	}
	v := p.Evaluate(env("search", "toolCall"))
	require.Equal(t, ActionAllow, v.Action)
	require.Empty(t, calls, "no rule got past its guards")
	v = p.Evaluate(env("pay", "toolCall"))
	require.Equal(t, ActionDeny, v.Action)
	require.Equal(t, "in", v.RuleID)
	require.Equal(t, map[string]int{"inputs": 1}, calls)
	v = p.Evaluate(env("x", "knowledge"))
	require.Equal(t, "par", v.RuleID)
	require.Equal(t, map[string]int{"inputs": 1, "params": 1}, calls)
}

// A guard computing len of a string agrees with expr's len, which counts runes: "KÉK" is
// three long, not four.
func TestGuardLenCountsRunes(t *testing.T) {
	p := mustCompile(t, Options{}, rule("r", `len(text) > 3 && kind == "k"`, ActionDeny))
	require.NotEmpty(t, p.rules[0].guards)
	require.Equal(t, ActionAllow, p.Evaluate(&Env{Kind: "k", Text: "KÉK"}).Action)
	require.Equal(t, ActionDeny, p.Evaluate(&Env{Kind: "k", Text: "KÉKS"}).Action)
}

// The input guards (a presence test, URLs of an input) build the deferred inputs they read,
// as the VM would, and decide the rule alone.
func TestInputGuardsReadDeferredInputs(t *testing.T) {
	for _, c := range []struct {
		when   string
		inputs map[string]any
		want   Action
	}{
		{`inputs.currency != nil`, map[string]any{"currency": "XAU"}, ActionDeny},
		{`inputs.currency != nil`, map[string]any{"amount": 1}, ActionAllow},
		{`nil == inputs.currency`, map[string]any{"amount": 1}, ActionDeny},
		{`inputs.currency == nil`, map[string]any{"currency": []any{}}, ActionAllow},
		{`any(urls(inputs.body), domain(#) endsWith ".onion")`, map[string]any{"body": "see http://abc.onion/x"}, ActionDeny},
		{`any(urls(inputs.body), domain(#) endsWith ".onion")`, map[string]any{"body": "see http://abc.example/x"}, ActionAllow},
	} {
		p := mustCompile(t, Options{}, rule("r", c.when, ActionDeny))
		require.True(t, p.rules[0].whole, c.when)
		e := &Env{Tool: "pay"}
		e.Defer(&Deferred{Inputs: func() map[string]any { return c.inputs }})
		require.Equal(t, c.want, p.Evaluate(e).Action, c.when)
	}
}
