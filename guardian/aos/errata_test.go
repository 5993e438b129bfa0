package aos

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// One test per entry of shared/spec/ERRATA.md that concerns decoding.

func TestErrata1ErrorObject(t *testing.T) {
	_, e := ParseStep(mutate(t, "message", "params.message.content[0].text", deleted))
	b, err := json.Marshal(Response{JSONRPC: "2.0", ID: IDOf(example(t, "message")), Error: e})
	require.NoError(t, err)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,
		"message":"invalid params: params.message.content[0].text: required",
		"data":{"field":"params.message.content[0].text","reason":"required"}}}`, string(b))

	_, e = ParseStep(json.RawMessage(`{"jsonrpc":"2.0","id":1,`))
	b, err = json.Marshal(Response{JSONRPC: "2.0", ID: IDOf(json.RawMessage(`{"jsonrpc":"2.0","id":1,`)), Error: e})
	require.NoError(t, err)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error",
		"data":{"offset":24,"reason":"unexpected end of input"}}}`, string(b))
}

func TestErrata2AgentURLOptional(t *testing.T) {
	s := parse(t, example(t, "message"))
	require.Empty(t, s.Context.Agent.URL)
	s = parse(t, mutate(t, "message", "params.context.agent.url", "https://support.acme.example/a2a"))
	require.Equal(t, "https://support.acme.example/a2a", s.Context.Agent.URL)
}

func TestErrata3MCPLayouts(t *testing.T) {
	msg := map[string]any{"jsonrpc": "2.0", "id": 5, "method": "tools/call",
		"params": map[string]any{"name": "send_email", "arguments": map[string]any{"to": "x@evil.example"}}}
	wrapped := parse(t, mutate(t, "MCP", "params", map[string]any{"message": msg, "reasoning": "r"}))
	inline := parse(t, mutate(t, "MCP", "params", msg))
	require.False(t, wrapped.MCP.Inline)
	require.True(t, inline.MCP.Inline)
	for _, s := range []*Step{wrapped, inline} {
		require.Equal(t, "tools/call", s.MCP.Method)
		require.Equal(t, "5", string(s.MCP.ID))
		require.Equal(t, "send_email", s.ToolID())
		require.Equal(t, map[string]any{"to": "x@evil.example"}, s.Inputs())
		require.JSONEq(t, string(mustMarshal(t, msg)), string(s.MCP.Message))
	}
	require.Equal(t, "r", wrapped.Reasoning())

	// Without jsonrpc "2.0" in params, params.message is required.
	_, e := ParseStep(mutate(t, "MCP", "params", map[string]any{"method": "tools/call", "params": map[string]any{"name": "x"}}))
	requireErr(t, e, CodeInvalidParams, "params.message", "required")
}

func TestErrata4ToolCallResultLayouts(t *testing.T) {
	text := parse(t, example(t, "toolCallResult"))
	nested := parse(t, example(t, "toolCallResult-nested"))
	require.False(t, text.ToolResult.Nested)
	require.True(t, nested.ToolResult.Nested)
	require.Equal(t, text.ToolResult.ExecutionID, nested.ToolResult.ExecutionID)
	require.Equal(t, text.ToolResult.Result, nested.ToolResult.Result)
	require.Equal(t, text.Text(), nested.Text())
}

func TestErrata5Citations(t *testing.T) {
	site := map[string]any{"kind": "site", "url": "https://a.example"}
	file := map[string]any{"kind": "file", "id": "f1", "name": "f.pdf"}
	tests := []struct {
		name   string
		params map[string]any
		want   []Source
	}{
		{"neither", map[string]any{}, nil},
		{"citation", map[string]any{"citation": []any{site}}, []Source{SiteSource{URL: "https://a.example"}}},
		{"citations", map[string]any{"citations": []any{file}}, []Source{FileSource{ID: "f1", Name: "f.pdf"}}},
		{"both", map[string]any{"citation": []any{site}, "citations": []any{file}}, nil},
	}
	base := parse(t, example(t, "message"))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.params["context"] = base.Message.Context
			tc.params["message"] = base.Message.Message
			s := parse(t, mutate(t, "message", "params", tc.params))
			if tc.name == "both" {
				require.ElementsMatch(t, []Source{SiteSource{URL: "https://a.example"}, FileSource{ID: "f1", Name: "f.pdf"}}, s.Message.Citations)
				return
			}
			require.Equal(t, tc.want, s.Message.Citations)
		})
	}
}

func TestErrata6PingTimestamp(t *testing.T) {
	tests := []struct {
		name     string
		msg      string
		want     string
		topLevel bool
	}{
		{"in params", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"timestamp":"2025-06-03T09:00:00Z"}}`, "2025-06-03T09:00:00Z", false},
		{"top level", `{"jsonrpc":"2.0","id":1,"method":"ping","timestamp":"2025-06-03T09:00:00Z"}`, "2025-06-03T09:00:00Z", true},
		{"both: params wins", `{"jsonrpc":"2.0","id":1,"method":"ping","timestamp":"2025-06-03T10:00:00Z","params":{"timestamp":"2025-06-03T09:00:00Z"}}`, "2025-06-03T09:00:00Z", false},
		{"top level with empty params", `{"jsonrpc":"2.0","id":1,"method":"ping","timestamp":"2025-06-03T09:00:00Z","params":{}}`, "2025-06-03T09:00:00Z", true},
		{"no params", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := parse(t, json.RawMessage(tc.msg))
			require.Equal(t, tc.want, s.Ping.Timestamp)
			require.Equal(t, tc.topLevel, s.Ping.TopLevel)
			require.Equal(t, tc.want != "", !s.Ping.Time.IsZero())
		})
	}
}

func TestErrata7A2ALayouts(t *testing.T) {
	inner := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": map[string]any{
		"message": map[string]any{"role": "agent", "messageId": "m1", "contextId": "c1",
			"parts": []any{map[string]any{"kind": "text", "text": "hello B"}}}}}
	check := func(t *testing.T, s *Step) {
		t.Helper()
		require.Equal(t, KindA2A, s.Kind)
		require.Equal(t, []string{"hello B"}, s.A2A.Texts)
		require.Equal(t, "c1", s.SessionHint())
		require.Equal(t, "m1", s.A2A.MessageID)
	}
	t.Run("protocols/A2A params.message", func(t *testing.T) {
		s := parse(t, mutate(t, "A2A", "params", map[string]any{"message": inner}))
		check(t, s)
		require.Equal(t, "message/send", s.A2A.Method)
	})
	t.Run("protocols/A2A params.message is an A2A Message", func(t *testing.T) {
		s := parse(t, mutate(t, "A2A", "params", map[string]any{"message": inner["params"].(map[string]any)["message"]}))
		check(t, s)
		require.Empty(t, s.A2A.Method)
	})
	t.Run("protocols/A2A inline", func(t *testing.T) {
		s := parse(t, mutate(t, "A2A", "params", inner))
		check(t, s)
		require.True(t, s.A2A.Inline)
	})
	t.Run("protocols/A2A response with a task", func(t *testing.T) {
		task := map[string]any{"jsonrpc": "2.0", "id": 1, "result": map[string]any{"kind": "task", "id": "t9", "contextId": "c1",
			"status": map[string]any{"state": "completed", "message": map[string]any{"role": "agent", "messageId": "m1",
				"parts": []any{map[string]any{"kind": "text", "text": "hello B"}}}},
			"artifacts": []any{map[string]any{"parts": []any{map[string]any{"kind": "text", "text": "artifact text"}}}}}}
		s := parse(t, mutate(t, "A2A", "params", map[string]any{"message": task}))
		require.Equal(t, []string{"hello B", "artifact text"}, s.A2A.Texts)
		require.Equal(t, "t9", s.A2A.TaskID)
		require.Equal(t, "c1", s.SessionHint())
	})
	for _, m := range A2AMethods {
		t.Run(m, func(t *testing.T) {
			msg := mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 2, "method": m, "params": map[string]any{
				"payload": inner["params"], "context": map[string]any{"from": "agent-a", "to": map[string]any{"url": "https://b.example"}}}})
			s := parse(t, msg)
			check(t, s)
			require.True(t, s.A2A.Native)
			require.Equal(t, m, s.A2A.Method)
			require.Equal(t, "agent-a", s.A2A.From)
			require.Equal(t, "https://b.example", s.A2A.To)
		})
	}
	t.Run("native without payload", func(t *testing.T) {
		s := parse(t, mustMarshal(t, inner))
		check(t, s)
		require.True(t, s.A2A.Native)
	})
	t.Run("native tasks/get", func(t *testing.T) {
		s := parse(t, json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"payload":{"id":"t9","historyLength":2}}}`))
		require.Equal(t, "tasks/get", s.A2A.Method)
		require.Empty(t, s.Text())
	})
}

func TestErrata8NotMethods(t *testing.T) {
	for _, m := range []string{"steps/knowledge", "messages/mcp"} {
		_, e := ParseStep(mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": m, "params": map[string]any{}}))
		require.Equal(t, CodeMethodNotFound, e.Code, m)
	}
}

func TestErrata9And10Result(t *testing.T) {
	s := parse(t, example(t, "toolCallRequest"))
	mr, err := NewModifiedRequest(s, s.Params)
	require.NoError(t, err)
	res := Result{Decision: Modify, Message: "redacted", ReasonCode: []string{"redact-cards", "PII"}, ModifiedRequest: mr}
	b, err := json.Marshal(res)
	require.NoError(t, err)
	var back struct {
		ReasonCode      []string `json:"reasonCode"`
		ModifiedRequest Request  `json:"modifiedRequest"`
	}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, []string{"redact-cards", "PII"}, back.ReasonCode)
	require.Equal(t, "2.0", back.ModifiedRequest.JSONRPC)
	require.Equal(t, "4", string(back.ModifiedRequest.ID))
	require.Equal(t, MethodToolCallRequest, back.ModifiedRequest.Method)
	p, err := res.ModifiedParams()
	require.NoError(t, err)
	var tp ToolCallRequestParams
	require.NoError(t, json.Unmarshal(p, &tp))
	require.Equal(t, "refund_payment", tp.ToolCallRequest.ToolID)
}

func TestErrata14Notification(t *testing.T) {
	msg := json.RawMessage(`{"jsonrpc":"2.0","method":"steps/memoryStore","params":` + string(parse(t, example(t, "memoryStore")).Params) + `}`)
	s := parse(t, msg)
	require.True(t, s.IsNotification())
	require.Nil(t, s.ID)
	require.NotNil(t, s.Memory)
}
