package rules

import (
	"testing"
)

// FuzzCompileEvaluate feeds arbitrary text to every place an operator's text is compiled
// (condition, message placeholder, set expression, redaction pattern) and evaluates what
// compiles on a realistic step. Nothing may panic; the detectors see the text too.
func FuzzCompileEvaluate(f *testing.F) {
	for _, s := range []string{
		`tool == "send_email" && domain(inputs.to) != "corp.example"`,
		`len(pii(text)) > 0 || len(secrets(text)) > 0`,
		`countTool(session, "transfer_*") >= 5`,
		`any(session.steps, .tool == "read_doc" && .text contains "CONFIDENTIAL")`,
		`text matches inputs.to`,
		`glob(inputs.to, tool)`,
		`regexFind(text, "[0-9]+")[0] == "4111"`,
		`inputs.n > 5`,
		`1..1000000 | len() > 0`,
		`repeat("a", 100000) | pii() | len() == 0`,
		`toJSON(params) contains "x"`,
		`let x = session.steps; len(x) > 0`,
		"tool ==\n \"x\" &&",
		`{{`,
		`sessionHas(session, "[", "x")`,
		`countToolWithin(session, "x", duration("1h"))`,
	} {
		f.Add(s)
	}
	env := historyEnv()
	env.Params = map[string]any{"x": []any{1, "two", map[string]any{"three": nil}}}
	f.Fuzz(func(t *testing.T, s string) {
		rules := []Rule{
			{ID: "when", When: s, Action: ActionDeny, Enabled: true},
			{ID: "message", When: "true", Action: ActionHold, Message: "m {{" + s + "}} {{", Enabled: true},
			{ID: "set", When: "true", Action: ActionModify, Enabled: true,
				Modify: &ModifySpec{Set: map[string]string{"x": s}, Redact: []string{s}}},
		}
		for _, r := range rules {
			Validate(r)
			p, err := Compile([]Rule{r}, Options{})
			if err != nil {
				continue
			}
			v := p.Evaluate(env)
			if v.Modify != nil {
				v.Modify.Apply(map[string]any{"a": []any{env.Text, s}}, func(string, any) {})
			}
		}
		findPII(s)
		findSecrets(s)
		findURLs(s)
		domainOf(s)
		c := &regexCache{}
		_, _ = c.glob(s, env.Text)
		_, _ = ParseFile("f.yaml", []byte(s))
		_, _ = ParseFile("f.json", []byte(s))
	})
}
