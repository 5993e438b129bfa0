package holds

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
)

var rememberNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// inputsOf is a Request.Inputs returning m.
func inputsOf(m map[string]any) func() map[string]any {
	return func() map[string]any { return m }
}

func decodeInputs(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	return m
}

// remembers compiles r with the real rules engine and reports whether it decides a step of
// the given agent, tool and inputs (given as JSON, decoded as the guardian decodes them).
func remembers(t *testing.T, r rules.Rule, agent, tool, inputs string) bool {
	t.Helper()
	p, err := rules.Compile([]rules.Rule{r}, rules.Options{Now: func() time.Time { return rememberNow }})
	require.NoError(t, err)
	env := rules.Env{Agent: rules.Agent{ID: agent}, Tool: tool, Kind: "toolCall", Now: rememberNow}
	if inputs != "" {
		env.Inputs = decodeInputs(t, inputs)
	}
	v := p.Evaluate(&env)
	for _, m := range v.Matches {
		require.Empty(t, m.Error, "the remembered rule must never fail at run time: %s", r.When)
	}
	return v.RuleID == r.ID && v.Action == rules.ActionAllow
}

func TestRememberRuleToolScope(t *testing.T) {
	req := Request{AgentID: "Agent 1", Tool: "transfer_funds", Inputs: inputsOf(map[string]any{"amount": 5000.0})}
	r, err := RememberRule(req, RememberSpec{Scope: ScopeTool}, "alice", "h_x", rememberNow)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(r.ID, "remember-agent-1-transfer-funds-"), r.ID)
	require.True(t, IsRemembered(r.ID))
	require.Equal(t, `agent.id == "Agent 1" && tool == "transfer_funds"`, r.When)
	require.Equal(t, rules.ActionAllow, r.Action)
	require.Equal(t, rules.ModeEnforce, r.Mode)
	require.True(t, r.Enabled)
	require.Equal(t, RememberPriority, r.Priority)
	require.Equal(t, RememberReasonCode, r.ReasonCode)
	require.NotNil(t, r.ExpiresAt)
	require.Equal(t, rememberNow.Add(DefaultRememberFor), *r.ExpiresAt)
	require.Contains(t, r.Description, "alice")
	require.Contains(t, r.Description, "h_x")

	require.True(t, remembers(t, r, "Agent 1", "transfer_funds", `{"amount":1}`))
	require.True(t, remembers(t, r, "Agent 1", "transfer_funds", ""))
	require.False(t, remembers(t, r, "Agent 2", "transfer_funds", `{"amount":1}`))
	require.False(t, remembers(t, r, "Agent 1", "send_email", `{"amount":1}`))

	r2, err := RememberRule(req, RememberSpec{Scope: ScopeTool, ExpiresIn: time.Hour}, "bob", "h_y", rememberNow)
	require.NoError(t, err)
	require.Equal(t, r.ID, r2.ID, "same scope, same rule")
	require.Equal(t, rememberNow.Add(time.Hour), *r2.ExpiresAt)
}

func TestRememberRuleInputsScope(t *testing.T) {
	const inputs = `{"amount":5000,"rate":0.25,"big":1e21,"tiny":-1.5e-7,"to":"ACCT \"7\"\n\u00e9\u0000\ud83d\ude00",
		"flags":[true,null,{"k":[1,2]}],"meta":{"in":"x","weird key":{"a/b":false},"empty":{}},
		"none":null,"list":[]}`
	req := Request{AgentID: "agent-1", Tool: "transfer_funds", Inputs: inputsOf(decodeInputs(t, inputs))}
	r, err := RememberRule(req, RememberSpec{Scope: ScopeInputs, ExpiresIn: 7 * 24 * time.Hour}, "alice", "h_x", rememberNow)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(r.ID, "remember-agent-1-transfer-funds-"), r.ID)
	require.Contains(t, r.Name, "with these inputs")

	// Deterministic: the same inputs decoded again (a new map, new iteration order) give
	// the same condition and id.
	again, err := RememberRule(Request{AgentID: "agent-1", Tool: "transfer_funds", Inputs: inputsOf(decodeInputs(t, inputs))},
		RememberSpec{Scope: ScopeInputs, ExpiresIn: 7 * 24 * time.Hour}, "alice", "h_x", rememberNow)
	require.NoError(t, err)
	require.Equal(t, r.When, again.When)
	require.Equal(t, r.ID, again.ID)
	tool, err := RememberRule(req, RememberSpec{Scope: ScopeTool}, "alice", "h_x", rememberNow)
	require.NoError(t, err)
	require.NotEqual(t, tool.ID, r.ID)

	require.True(t, remembers(t, r, "agent-1", "transfer_funds", inputs))
	// Key order and number spelling do not matter.
	require.True(t, remembers(t, r, "agent-1", "transfer_funds", `{"list":[],"none":null,
		"meta":{"empty":{},"weird key":{"a/b":false},"in":"x"},"flags":[true,null,{"k":[1.0,2e0]}],
		"to":"ACCT \"7\"\n\u00e9\u0000\ud83d\ude00","tiny":-0.00000015,"big":1000000000000000000000,"rate":0.25,"amount":5000.0}`))

	for name, other := range map[string]string{
		"changed number":   strings.Replace(inputs, `"amount":5000`, `"amount":5001`, 1),
		"changed string":   strings.Replace(inputs, `ACCT`, `ACCX`, 1),
		"extra key":        strings.Replace(inputs, `"list":[]`, `"list":[],"x":1`, 1),
		"missing null key": strings.Replace(inputs, `"none":null,`, ``, 1),
		"renamed null key": strings.Replace(inputs, `"none":null`, `"nono":null`, 1),
		"longer array":     strings.Replace(inputs, `"list":[]`, `"list":[1]`, 1),
		"nested change":    strings.Replace(inputs, `"k":[1,2]`, `"k":[1,3]`, 1),
		"nested type":      strings.Replace(inputs, `"k":[1,2]`, `"k":"12"`, 1),
		"object to string": strings.Replace(inputs, `"empty":{}`, `"empty":"{}"`, 1),
		"bool to string":   strings.Replace(inputs, `"a/b":false`, `"a/b":"false"`, 1),
		"null to value":    strings.Replace(inputs, `"none":null`, `"none":0`, 1),
	} {
		require.NotEqual(t, inputs, other, name)
		require.False(t, remembers(t, r, "agent-1", "transfer_funds", other), name)
	}
	require.False(t, remembers(t, r, "agent-1", "transfer_funds", ""))
	require.False(t, remembers(t, r, "agent-2", "transfer_funds", inputs))

	empty, err := RememberRule(Request{AgentID: "a", Tool: "t"}, RememberSpec{Scope: ScopeInputs}, "alice", "h", rememberNow)
	require.NoError(t, err)
	require.True(t, remembers(t, empty, "a", "t", ""))
	require.True(t, remembers(t, empty, "a", "t", `{}`))
	require.False(t, remembers(t, empty, "a", "t", `{"x":1}`))
}

func TestRememberRuleRefusals(t *testing.T) {
	big := map[string]any{}
	for i := range 2000 {
		big[fmt.Sprintf("key%04d", i)] = float64(i)
	}
	for _, tc := range []struct {
		name  string
		req   Request
		spec  RememberSpec
		field string
	}{
		{"no agent", Request{Tool: "t"}, RememberSpec{Scope: ScopeTool}, "remember"},
		{"no tool", Request{AgentID: "a"}, RememberSpec{Scope: ScopeTool}, "remember"},
		{"bad scope", Request{AgentID: "a", Tool: "t"}, RememberSpec{Scope: "session"}, "remember.scope"},
		{"negative expiry", Request{AgentID: "a", Tool: "t"}, RememberSpec{Scope: ScopeTool, ExpiresIn: -time.Hour}, "remember.expiresIn"},
		{"expiry too long", Request{AgentID: "a", Tool: "t"}, RememberSpec{Scope: ScopeTool, ExpiresIn: MaxRememberFor + time.Hour}, "remember.expiresIn"},
		{"inputs too large", Request{AgentID: "a", Tool: "t", Inputs: inputsOf(big)}, RememberSpec{Scope: ScopeInputs}, "remember"},
		{"unsupported input", Request{AgentID: "a", Tool: "t", Inputs: inputsOf(map[string]any{"c": make(chan int)})}, RememberSpec{Scope: ScopeInputs}, "remember.scope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RememberRule(tc.req, tc.spec, "alice", "h", rememberNow)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field)
			require.NotEmpty(t, fe.Message)
		})
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"agent-1":                  "agent-1",
		"Billing Agent/v2":         "billing-agent-v2",
		"--":                       "x",
		"":                         "x",
		"émoji😀tool":               "moji-tool",
		strings.Repeat("ab-", 20):  "ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab",
		"mcp:filesystem.read_file": "mcp-filesystem-read-file",
	} {
		require.Equal(t, want, slug(in), in)
	}
}

func TestRememberedMatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		matches []record.RuleMatch
		want    string
	}{
		{"none", nil, ""},
		{"enforced allow", []record.RuleMatch{{RuleID: "big", Action: "hold", Mode: "enforce"}, {RuleID: "remember-a-t-1", Action: "allow", Mode: "enforce"}}, "remember-a-t-1"},
		{"monitor", []record.RuleMatch{{RuleID: "remember-a-t-1", Action: "allow", Mode: "monitor"}}, ""},
		{"errored", []record.RuleMatch{{RuleID: "remember-a-t-1", Action: "allow", Mode: "enforce", Error: "boom"}}, ""},
		{"error policy deny", []record.RuleMatch{{RuleID: "remember-a-t-1", Action: "deny", Mode: "enforce"}}, ""},
		{"other allow", []record.RuleMatch{{RuleID: "allow-all", Action: "allow", Mode: "enforce"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := rememberedMatch(tc.matches)
			require.Equal(t, tc.want != "", ok)
			require.Equal(t, tc.want, got)
		})
	}
}
