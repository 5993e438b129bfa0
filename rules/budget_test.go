package rules

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bigEnv is a step of about 100 KB: the shape of the red-team finding.
func bigEnv() *Env {
	chunk := strings.Repeat("lorem ipsum a dolor sit amet ", 35) // ~1 KB
	params := map[string]any{}
	var text strings.Builder
	for i := range 100 {
		params["field"+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = chunk
		text.WriteString(chunk)
	}
	return &Env{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: "t", Text: text.String(),
		Params: params, Inputs: map[string]any{"body": text.String()}}
}

// hostileRules are conditions that ran for seconds or built gigabytes before the budget.
var hostileRules = []struct {
	name, when string
	// want is the part of the error naming the limit.
	want string
}{
	// Whichever limit it reaches first: the time, or 32 MiB of JSON.
	{"loop over toJSON of a 100 KB step", `all(1..20000, len(toJSON(params)) > 0)`, ""},
	{"nested loops scanning the text", `all(1..1000, all(1..1000, indexOf(text, "zzz") < 0))`, "ran longer than"},
	{"loop over string concatenation", `all(1..20000, len(text + "x") > 0)`, ""},
	{"doubling a string", `let a = text + text; let b = a + a; let c = b + b; let d = c + c;
		let f = d + d; let g = f + f; let h = g + g; let i = h + h; let j = i + i; len(j + j) > 0`, "built more than"},
	{"doubling in reduce", `len(reduce(1..40, #acc + #acc, text)) > 0`, "built more than"},
	{"replace expanding", `len(replace(text, "a", text)) > 0`, "built more than"},
	{"join with a big glue", `len(join(map(1..20000, "x"), text)) > 0`, "built more than"},
	{"toJSON of many references", `len(toJSON(map(1..20000, text))) > 0`, "built more than"},
	{"string of many references", `len(string(map(1..20000, params))) > 0`, "built more than"},
	{"sessionText in a loop", `all(1..20000, len(upper(sessionText(session))) > 0)`, ""},
	{"regex over the text in a loop", `all(1..20000, !(text matches "[0-9]{5}"))`, ""},
	{"expr's memory budget", `len(map(1..2000000, #)) > 0`, "allocated more than"},
}

func TestBudgetStopsHostileRules(t *testing.T) {
	env := bigEnv()
	env.Session.Steps = []HistoryStep{{Text: env.Text}, {Text: env.Text}}
	for _, tc := range hostileRules {
		t.Run(tc.name, func(t *testing.T) {
			// A rule meant to hit a work limit gets time enough that only that limit can stop
			// it, whatever the load on the machine running the test.
			budget := 50 * time.Millisecond
			if tc.want != "" && tc.want != "ran longer than" {
				budget = time.Minute
			}
			p := mustCompile(t, Options{Budget: budget}, rule("hostile", tc.when, ActionAllow))
			start := time.Now()
			v := p.Evaluate(env)
			t.Logf("cut off after %s", time.Since(start))
			require.Equal(t, ActionDeny, v.Action, "an enforced rule over its budget fails closed")
			require.Len(t, v.Matches, 1)
			require.Contains(t, v.Matches[0].Error, "evaluation budget exceeded (")
			require.Contains(t, v.Matches[0].Error, tc.want)
			st := p.Stats()["hostile"]
			require.EqualValues(t, 1, st.Errors)
			require.Equal(t, v.Matches[0].Error, st.LastError)
			require.NotNil(t, st.LastErrorAt)
		})
	}
}

func TestBudgetUsesErrorPolicy(t *testing.T) {
	hostile := `all(1..1000, all(1..1000, indexOf(text, "zzz") < 0))`
	cases := []struct {
		name string
		opts Options
		mode Mode
		want Action
	}{
		{"enforced fails closed by default", Options{}, ModeEnforce, ActionDeny},
		{"enforced with on-rule-error allow", Options{OnErrorEnforce: ActionAllow}, ModeEnforce, ActionAllow},
		{"monitor fails open", Options{}, ModeMonitor, ActionAllow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Budget = 20 * time.Millisecond
			p := mustCompile(t, tc.opts, rule("hostile", hostile, ActionAllow, mode(tc.mode)))
			v := p.Evaluate(bigEnv())
			require.Equal(t, tc.want, v.Action)
			require.Contains(t, v.Reasoning, "evaluation budget exceeded (ran longer than 20ms)")
		})
	}
}

// TestBudgetIsPerRule: a rule over its budget does not take the next rule's budget with it.
func TestBudgetIsPerRule(t *testing.T) {
	p := mustCompile(t, Options{Budget: 20 * time.Millisecond},
		rule("a-hostile", `all(1..20000, len(toJSON(params)) > 0)`, ActionAllow, mode(ModeMonitor)),
		rule("b-fine", `all(1..3, len(inputs.body) > 0)`, ActionDeny))
	v := p.Evaluate(bigEnv())
	require.Equal(t, ActionDeny, v.Action)
	require.Equal(t, "b-fine", v.RuleID)
	require.Empty(t, v.Matches[0].Error)
}

func TestBudgetLeavesOrdinaryRulesAlone(t *testing.T) {
	cases := []struct{ when, set string }{
		{`any(split(text, " "), # == "dolor") && len(toJSON(params)) > 1000`, ""},
		{`len(reduce(1..5, #acc + "x", "")) == 5`, ""},
		{`upper("a") + lower("B") + string(1) == "Ab1"`, ""},
		{`replace(tool, "t", "tt") == "tt" && join(["a", "b"], "-") == "a-b"`, ""},
		{`trim(" x ") == "x" && fromJSON("[1]")[0] == 1 && 1 + 2 == 3 && repeat("ab", 2) == "abab"`, ""},
		{`true`, `text + "!"`},
	}
	for _, tc := range cases {
		t.Run(tc.when, func(t *testing.T) {
			r := rule("ok", tc.when, ActionDeny)
			if tc.set != "" {
				r.Action = ActionModify
				r.Modify = &ModifySpec{Set: map[string]string{"body": tc.set}}
			}
			p := mustCompile(t, Options{}, r)
			v := p.Evaluate(bigEnv())
			require.Equal(t, r.Action, v.Action, v.Reasoning)
			require.Empty(t, v.Matches[0].Error)
		})
	}
}

func TestBudgetBoundsModifyAndMessages(t *testing.T) {
	r := rule("big", `true`, ActionModify, msg("{{ map(1..20000, text) }}"))
	r.Modify = &ModifySpec{Set: map[string]string{"body": `map(1..20000, text)`}}
	// Time enough that only the size limit can stop it, whatever the load on the machine.
	p := mustCompile(t, Options{Budget: time.Minute}, r)
	v := p.Evaluate(bigEnv())
	require.Equal(t, ActionDeny, v.Action, "a set value too large to forward fails the rule")
	require.Contains(t, v.Matches[0].Error, "modify.set.body: evaluation budget exceeded (built more than")

	r = rule("big", `true`, ActionDeny, msg("x{{ map(1..20000, text) }}"))
	v = mustCompile(t, Options{Budget: time.Minute}, r).Evaluate(bigEnv())
	require.Equal(t, "x…", v.Message)
}

func TestEvaluateContextCancelled(t *testing.T) {
	p := mustCompile(t, Options{Budget: -1}, rule("hostile", `all(1..20000, len(toJSON(params)) > 0)`, ActionDeny))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := p.EvaluateContext(ctx, bigEnv())
	require.ErrorIs(t, err, context.Canceled)

	// Cancelled while the rule runs: the evaluation stops at its next check.
	ctx, cancel = context.WithCancel(t.Context())
	env := bigEnv()
	env.Params["stop"] = cancelOnJSON(cancel)
	start := time.Now()
	_, err = p.EvaluateContext(ctx, env)
	t.Logf("stopped %s after the cancellation", time.Since(start))
	require.ErrorIs(t, err, context.Canceled)
}

// cancelOnJSON cancels when a rule first turns it into JSON.
type cancelOnJSON context.CancelFunc

func (c cancelOnJSON) MarshalJSON() ([]byte, error) {
	c()
	return []byte(`"stop"`), nil
}
