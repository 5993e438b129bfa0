package ruleenv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/rules"
)

const context = `{
  "agent": {"id": "agent-1", "name": "Assistant", "instructions": "Help.", "version": "1.2.0",
    "provider": {"name": "Corp IT", "url": "https://it.corp.example"},
    "model": {"id": "gpt-4o", "name": "GPT-4o", "provider": {"name": "OpenAI"}},
    "tools": [{"id": "send_email", "name": "Send email", "type": "function_call",
      "arguments": [{"name": "to", "type": "string", "required": true}], "outputs": null}]},
  "session": {"id": "sess-1"}, "turnId": "turn-2", "stepId": "step-3",
  "timestamp": "2025-05-01T12:00:00Z",
  "user": {"id": "u-1", "name": "Alex", "email": "alex@corp.example", "organization": {"id": "corp", "name": "Corp"}}
}`

func parse(t *testing.T, method, params string) *aos.Step {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": json.RawMessage(params)})
	require.NoError(t, err)
	step, aerr := aos.ParseStep(raw)
	require.Nil(t, aerr)
	return step
}

func TestBuildToolCall(t *testing.T) {
	step := parse(t, aos.MethodToolCallRequest, `{"context": `+context+`,
	  "toolCallRequest": {"executionId": "e1", "toolId": "send_email",
	    "inputs": [{"name": "to", "value": "eve@evil.example"}, {"name": "n", "value": 3}]},
	  "reasoning": "the user asked"}`)
	hist := History{StepCount: 12, Steps: []rules.HistoryStep{{Tool: "read_doc", Kind: "toolCall"}}}
	now := time.Date(2025, 5, 1, 12, 0, 1, 0, time.UTC)
	env := Build(step, hist, now)
	require.Equal(t, "steps/toolCallRequest", env.Method)
	require.Equal(t, "toolCall", env.Kind)
	require.Equal(t, rules.Agent{ID: "agent-1", Name: "Assistant", Version: "1.2.0", Provider: "Corp IT", Model: "gpt-4o"}, env.Agent)
	require.Equal(t, rules.User{ID: "u-1", Name: "Alex", Email: "alex@corp.example", Org: "corp"}, env.User)
	require.Equal(t, rules.Session{ID: "sess-1", StepCount: 12, Steps: hist.Steps}, env.Session)
	require.Equal(t, "turn-2", env.TurnID)
	require.Equal(t, "step-3", env.StepID)
	require.Equal(t, "send_email", env.Tool)
	require.Equal(t, map[string]any{"to": "eve@evil.example", "n": 3.0}, env.Inputs)
	require.Equal(t, "to=eve@evil.example\nn=3", env.Text)
	require.Equal(t, "the user asked", env.Reasoning)
	require.Equal(t, "Send email", env.ToolDef["name"])
	require.Equal(t, []any{map[string]any{"name": "to", "type": "string", "required": true}}, env.ToolDef["arguments"])
	require.Equal(t, now, env.Now)
	require.Equal(t, "e1", env.Params["toolCallRequest"].(map[string]any)["executionId"])
	require.False(t, env.IsError)

	// A history with fewer loaded steps than the session has keeps the true count, and an
	// explicit session id wins.
	env = Build(step, History{SessionID: "other", Steps: make([]rules.HistoryStep, 3)}, time.Time{})
	require.Equal(t, "other", env.Session.ID)
	require.Equal(t, 3, env.Session.StepCount)
}

func TestBuildOtherKinds(t *testing.T) {
	t.Run("knowledge", func(t *testing.T) {
		env := Build(parse(t, aos.MethodKnowledgeRetrieval, `{"context": `+context+`,
		  "knowledgeStep": {"query": "refunds", "results": [{"id": "kb1", "content": "30 days"}]}}`), History{}, time.Time{})
		require.Equal(t, "knowledge", env.Kind)
		require.Equal(t, "refunds\n30 days", env.Text)
		require.Empty(t, env.Tool)
		require.Nil(t, env.ToolDef)
	})
	t.Run("message", func(t *testing.T) {
		env := Build(parse(t, aos.MethodMessage, `{"context": `+context+`,
		  "message": {"id": "m1", "role": "agent", "content": [{"kind": "text", "text": "hello"}]}}`), History{}, time.Time{})
		require.Equal(t, "message", env.Kind)
		require.Equal(t, "agent", env.Role)
		require.Equal(t, "hello", env.Text)
	})
	t.Run("tool result error", func(t *testing.T) {
		env := Build(parse(t, aos.MethodToolCallResult, `{"context": `+context+`, "executionId": "e1",
		  "result": {"outputs": [{"kind": "text", "text": "boom"}], "isError": true}}`), History{}, time.Time{})
		require.Equal(t, "toolResult", env.Kind)
		require.True(t, env.IsError)
		require.Equal(t, "boom", env.Text)
	})
	t.Run("mcp", func(t *testing.T) {
		env := Build(parse(t, aos.MethodMCP, `{"message": {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
		  "params": {"name": "read_file", "arguments": {"path": "/etc/passwd"}, "_meta": {"sessionId": "mcp-sess"}}}}`), History{}, time.Time{})
		require.Equal(t, "mcp", env.Kind)
		require.Equal(t, rules.MCP{Method: "tools/call", Tool: "read_file", Arguments: map[string]any{"path": "/etc/passwd"}}, env.MCP)
		require.Equal(t, "read_file", env.Tool)
		require.Equal(t, map[string]any{"path": "/etc/passwd"}, env.Inputs)
		require.Equal(t, "mcp-sess", env.Session.ID)
		require.Equal(t, rules.Agent{}, env.Agent)
	})
	t.Run("a2a", func(t *testing.T) {
		env := Build(parse(t, "message/send", `{"payload": {"message": {"role": "agent", "kind": "message",
		  "messageId": "m9", "contextId": "ctx-7", "parts": [{"kind": "text", "text": "Where is parcel 42?"}]}},
		  "context": {"from": {"name": "Support"}, "to": {"name": "Shipping"}}}`), History{}, time.Time{})
		require.Equal(t, "a2a", env.Kind)
		require.Equal(t, rules.A2A{Method: "message/send", Text: "Where is parcel 42?", From: "Support", To: "Shipping", ContextID: "ctx-7"}, env.A2A)
		require.Equal(t, "ctx-7", env.Session.ID)
	})
}

// BuildFor leaves out the costly fields; evaluation builds them when a rule reads them.
func TestBuildForSkipsUnread(t *testing.T) {
	message := parse(t, aos.MethodMessage, `{"context": `+context+`,
	  "message": {"id": "m1", "role": "user", "content": [{"kind": "text", "text": "hi"}]}}`)
	toolCall := parse(t, aos.MethodToolCallRequest, `{"context": `+context+`,
	  "toolCallRequest": {"executionId": "e1", "toolId": "send_email", "inputs": [{"name": "to", "value": "a@b.example"}]}}`)
	cases := []struct {
		name        string
		step        *aos.Step
		plain, uses string // a condition that does not read the field, one that does
		field       func(*rules.Env) any
	}{
		{"params", message, `text == "hi"`, `params.message.id == "m1"`,
			func(e *rules.Env) any { return e.Params }},
		{"inputs", toolCall, `tool == "send_email"`, `inputs.to endsWith "@b.example"`,
			func(e *rules.Env) any { return e.Inputs }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, when := range []string{tc.plain, tc.uses} {
				prog, err := rules.Compile([]rules.Rule{{ID: "a", When: when, Action: rules.ActionDeny, Enabled: true}}, rules.Options{})
				require.NoError(t, err)
				env := BuildFor(prog, tc.step, History{}, time.Time{})
				require.Nil(t, tc.field(env), when)
				require.Equal(t, rules.ActionDeny, prog.Evaluate(env).Action, when)
				require.Nil(t, tc.field(env), "evaluation does not change the Env")
			}
		})
	}
}

func TestHistoryStep(t *testing.T) {
	step := parse(t, aos.MethodToolCallRequest, `{"context": `+context+`,
	  "toolCallRequest": {"executionId": "e1", "toolId": "send_email", "inputs": [{"name": "to", "value": "a@b.example"}]}}`)
	at := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	require.Equal(t, rules.HistoryStep{Method: "steps/toolCallRequest", Kind: "toolCall", Tool: "send_email",
		Decision: "deny", Text: "to=a@b.example", Seq: 9, ReceivedAt: at}, HistoryStep(step, "deny", 9, at))
}

func TestFromMethodParams(t *testing.T) {
	env, err := FromMethodParams(aos.MethodMessage, json.RawMessage(`{"context": `+context+`,
	  "message": {"id": "m1", "role": "user", "content": [{"kind": "text", "text": "hi"}]}}`))
	require.NoError(t, err)
	require.Equal(t, "hi", env.Text)
	require.Equal(t, "sess-1", env.Session.ID)
	require.True(t, env.Now.IsZero(), "the program's clock decides")

	_, err = FromMethodParams("steps/unknown", json.RawMessage(`{}`))
	require.ErrorContains(t, err, "-32601")
	_, err = FromMethodParams(aos.MethodMessage, json.RawMessage(`{"context": `+context+`}`))
	require.ErrorContains(t, err, "message")
	_, err = FromMethodParams(aos.MethodMessage, nil)
	require.ErrorContains(t, err, "params")
	_, err = FromMethodParams(aos.MethodMessage, json.RawMessage(`{bad`))
	require.ErrorContains(t, err, "not JSON")
}

// Every test of the shipped rule packs passes with the guardian's own step decoding.
func TestExampleRulePacks(t *testing.T) {
	files, err := filepath.Glob("../../examples/rules/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			data, err := os.ReadFile(name)
			require.NoError(t, err)
			f, err := rules.ParseFile(name, data)
			require.NoError(t, err)
			prog, err := rules.CompileFile(f, rules.Options{})
			require.NoError(t, err)
			results := rules.RunTests(f, prog, FromMethodParams)
			require.NotEmpty(t, results)
			for _, r := range results {
				require.True(t, r.Passed, "%s:%d: %s: %s", name, r.Line, r.Name, r.Message)
			}
			// Every rule is exercised by at least one test that it decides.
			decided := map[string]bool{}
			for _, tc := range f.Tests {
				decided[tc.Rule] = true
			}
			for _, r := range f.Rules {
				if r.Mode == rules.ModeMonitor {
					continue
				}
				if !decided[r.ID] {
					t.Errorf("rule %s has no test that names it as the deciding rule", r.ID)
				}
			}
		})
	}
}

func TestModifiedRequest(t *testing.T) {
	prog, err := rules.Compile([]rules.Rule{{
		ID: "m", When: `len(pii(text)) > 0 || len(secrets(text)) > 0`, Action: rules.ActionModify, Enabled: true,
		Modify: &rules.ModifySpec{Redact: []string{"pii", "secrets", `text`}, Set: map[string]string{"to": `"security@corp.example"`, "priority": `1 + 1`}},
	}}, rules.Options{})
	require.NoError(t, err)

	step := parse(t, aos.MethodToolCallRequest, `{"context": `+context+`,
	  "toolCallRequest": {"executionId": "e1", "toolId": "send_email",
	    "inputs": [{"name": "to", "value": "eve@evil.example"}, {"name": "body", "value": "card 4111 1111 1111 1111 key AKIAIOSFODNN7EXAMPLE text"},
	               {"name": "n", "value": 12345678901234567890}]}}`)
	v := prog.Evaluate(Build(step, History{}, time.Time{}))
	require.Equal(t, rules.ActionModify, v.Action)
	raw, err := ModifiedRequest(step, v.Modify)
	require.NoError(t, err)
	mod, aerr := aos.ParseStep(raw)
	require.Nil(t, aerr)
	require.Equal(t, step.Method, mod.Method)
	require.JSONEq(t, `1`, string(mod.ID))
	require.Equal(t, map[string]any{
		"to":       "security@corp.example",
		"body":     "card [REDACTED:creditCard] key [REDACTED:awsAccessKey] [REDACTED]",
		"n":        1.2345678901234567e19,
		"priority": 2.0,
	}, mod.Inputs())
	require.Contains(t, string(raw), `12345678901234567890`, "numbers are kept exactly")
	require.Equal(t, "alex@corp.example", mod.Context.User.Email, "the step context is not content")
	require.Equal(t, step.Context.Agent, mod.Context.Agent)

	t.Run("mcp", func(t *testing.T) {
		step := parse(t, aos.MethodMCP, `{"message": {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
		  "params": {"name": "send", "arguments": {"to": "x@evil.example", "text": "text"}}}}`)
		v := prog.Evaluate(Build(step, History{}, time.Time{}))
		raw, err := ModifiedRequest(step, v.Modify)
		require.NoError(t, err)
		mod, aerr := aos.ParseStep(raw)
		require.Nil(t, aerr)
		require.Equal(t, map[string]any{"to": "security@corp.example", "text": "[REDACTED]", "priority": 2.0}, mod.Inputs())
		require.Equal(t, "tools/call", mod.MCP.Method)
	})
	t.Run("set on a message is refused", func(t *testing.T) {
		step := parse(t, aos.MethodMessage, `{"context": `+context+`,
		  "message": {"id": "m1", "role": "user", "content": [{"kind": "text", "text": "mail bob@corp.example"}]}}`)
		v := prog.Evaluate(Build(step, History{}, time.Time{}))
		_, err := ModifiedRequest(step, v.Modify)
		require.ErrorIs(t, err, ErrSetNotSupported)
	})
	t.Run("redaction only keeps a message valid", func(t *testing.T) {
		only, err := rules.Compile([]rules.Rule{{ID: "r", When: `true`, Action: rules.ActionModify, Enabled: true,
			Modify: &rules.ModifySpec{Redact: []string{"pii", `text|user|2\.0`}}}}, rules.Options{})
		require.NoError(t, err)
		step := parse(t, aos.MethodMessage, `{"context": `+context+`,
		  "message": {"id": "m1", "role": "user", "content": [{"kind": "text", "text": "mail bob@corp.example"}]}}`)
		raw, err := ModifiedRequest(step, only.Evaluate(Build(step, History{}, time.Time{})).Modify)
		require.NoError(t, err)
		mod, aerr := aos.ParseStep(raw)
		require.Nil(t, aerr)
		require.Equal(t, "mail [REDACTED:email]", mod.Text())
		require.Equal(t, "user", mod.Role())
	})
	t.Run("notification keeps no id", func(t *testing.T) {
		raw := []byte(`{"jsonrpc": "2.0", "method": "steps/message", "params": {"context": ` + context + `,
		  "message": {"id": "m1", "role": "user", "content": [{"kind": "text", "text": "4111 1111 1111 1111"}]}}}`)
		step, aerr := aos.ParseStep(raw)
		require.Nil(t, aerr)
		redact, err := rules.Compile([]rules.Rule{{ID: "r", When: `true`, Action: rules.ActionModify, Enabled: true,
			Modify: &rules.ModifySpec{Redact: []string{"creditCard"}}}}, rules.Options{})
		require.NoError(t, err)
		out, err := ModifiedRequest(step, redact.Evaluate(Build(step, History{}, time.Time{})).Modify)
		require.NoError(t, err)
		require.NotContains(t, string(out), `"id":null`)
		require.NotContains(t, string(out), `4111`)
	})
}

// The modified request of every modify test in the example packs passes the guardian's own
// validation and no longer carries what was redacted.
func TestExampleModificationsStayValid(t *testing.T) {
	files, err := filepath.Glob("../../examples/rules/*.yaml")
	require.NoError(t, err)
	for _, name := range files {
		data, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := rules.ParseFile(name, data)
		require.NoError(t, err)
		prog, err := rules.CompileFile(f, rules.Options{})
		require.NoError(t, err)
		n := 0
		for _, tc := range f.Tests {
			if tc.Expect != rules.ActionModify {
				continue
			}
			n++
			raw, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "req-1", "method": tc.Step.Method, "params": tc.Step.Params})
			require.NoError(t, err)
			step, aerr := aos.ParseStep(raw)
			require.Nil(t, aerr)
			v := prog.Evaluate(Build(step, History{}, time.Time{}))
			out, err := ModifiedRequest(step, v.Modify)
			require.NoError(t, err, tc.Name)
			mod, aerr := aos.ParseStep(out)
			require.Nil(t, aerr, tc.Name)
			require.JSONEq(t, `"req-1"`, string(mod.ID))
			after := prog.Evaluate(Build(mod, History{}, time.Time{}))
			require.NotEqual(t, rules.ActionModify, after.Action, "%s: the modified request still matches: %s", tc.Name, mod.Text())
			// The message the agent and the console read names only what was redacted.
			for _, kind := range []string{rules.PIIEmail, rules.PIIPhone, rules.PIICreditCard, rules.PIIIBAN, rules.PIISSN} {
				if regexp.MustCompile(`\b` + kind + `\b`).MatchString(v.Message) {
					require.Contains(t, string(out), "[REDACTED:"+kind+"]", "%s: message %q names %s, which was not redacted", tc.Name, v.Message, kind)
				}
			}
		}
		require.Positive(t, n)
	}
}

// An MCP gateway adds the tool's definition from tools/list, and for a response the tool it
// answers, in the AOS params' _meta; rules see them as toolDef and tool.
func TestBuildMCPGatewayMeta(t *testing.T) {
	def := `{"name":"write_file","annotations":{"destructiveHint":true}}`
	cases := []struct {
		name, params string
		tool         string
		toolDef      map[string]any
	}{
		{"call with its definition",
			`{"message":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{}}},"_meta":{"toolDef":` + def + `}}`,
			"write_file", map[string]any{"name": "write_file", "annotations": map[string]any{"destructiveHint": true}}},
		{"result names its tool",
			`{"message":{"jsonrpc":"2.0","id":1,"result":{"content":[]}},"_meta":{"tool":"write_file","toolDef":` + def + `}}`,
			"write_file", map[string]any{"name": "write_file", "annotations": map[string]any{"destructiveHint": true}}},
		{"a request's own tool name wins",
			`{"message":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file"}},"_meta":{"tool":"write_file"}}`,
			"read_file", nil},
		{"no meta", `{"message":{"jsonrpc":"2.0","id":1,"result":{}}}`, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, err := FromMethodParams(aos.MethodMCP, json.RawMessage(c.params))
			require.NoError(t, err)
			require.Equal(t, c.tool, env.Tool)
			require.Equal(t, c.toolDef, env.ToolDef)
		})
	}
}

// TestTextRuleSeesLongNumbers: a rule that looks for a number of 16 digits or more in the
// step's text finds it with the agent's digits wherever the step carries it as JSON.
func TestTextRuleSeesLongNumbers(t *testing.T) {
	prog, err := rules.Compile([]rules.Rule{{ID: "n", When: `text contains "12345678901234567891" && text contains "10.5"`,
		Action: rules.ActionDeny, Enabled: true}}, rules.Options{})
	require.NoError(t, err)
	const data = `{"id": 12345678901234567891, "amount": 10.50}`
	tests := []struct {
		name, method, params string
	}{
		{"tool input", aos.MethodToolCallRequest, `{"context": ` + context + `, "toolCallRequest": {"executionId": "e1",
		  "toolId": "send_email", "inputs": [{"name": "o", "value": ` + data + `}]}}`},
		{"message data part", aos.MethodMessage, `{"context": ` + context + `, "message": {"id": "m1", "role": "user",
		  "content": [{"kind": "data", "data": ` + data + `}]}}`},
		{"a2a data part", aos.MethodA2A, `{"message": {"role": "user", "parts": [{"kind": "data", "data": ` + data + `}]}}`},
		{"mcp structured result", aos.MethodMCP, `{"message": {"jsonrpc": "2.0", "id": 1,
		  "result": {"content": [], "structuredContent": ` + data + `}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			step := parse(t, tc.method, tc.params)
			require.Equal(t, rules.ActionDeny, prog.Evaluate(Build(step, History{}, time.Time{})).Action, step.Text())
		})
	}
}
