package aos

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// typedParams returns the one params value of a step.
func typedParams(s *Step) any {
	switch {
	case s.Trigger != nil:
		return s.Trigger
	case s.Knowledge != nil:
		return s.Knowledge
	case s.Memory != nil:
		return s.Memory
	case s.Message != nil:
		return s.Message
	case s.ToolCall != nil:
		return s.ToolCall
	case s.ToolResult != nil:
		return s.ToolResult
	case s.MCP != nil:
		return s.MCP
	case s.A2A != nil:
		return s.A2A
	}
	return s.Ping
}

// TestRoundTrip encodes the decoded params of every example and decodes them again: what
// Go code builds is what the guardian accepts, and nothing is lost on the way.
func TestRoundTrip(t *testing.T) {
	for _, name := range exampleNames(t) {
		t.Run(name, func(t *testing.T) {
			s := parse(t, example(t, name))
			params := mustMarshal(t, typedParams(s))
			out, err := NewModifiedRequest(s, params)
			require.NoError(t, err, "%s", params)
			again := parse(t, out)
			require.Equal(t, s.Kind, again.Kind)
			require.Equal(t, s.Text(), again.Text())
			require.Equal(t, s.SessionHint(), again.SessionHint())
			require.Equal(t, s.Inputs(), again.Inputs())
			require.Equal(t, s.Reasoning(), again.Reasoning())
			if s.Context != nil {
				require.Equal(t, *s.Context, *again.Context)
			}
			switch {
			case s.MCP != nil:
				require.JSONEq(t, string(s.MCP.Message), string(again.MCP.Message))
				require.Equal(t, s.MCP.Inline, again.MCP.Inline)
			case s.A2A != nil:
				require.JSONEq(t, string(s.A2A.Message), string(again.A2A.Message))
				require.Equal(t, s.A2A.Texts, again.A2A.Texts)
			case s.ToolResult != nil:
				// Sent in the text's layout whatever layout came in.
				require.False(t, again.ToolResult.Nested)
				require.Equal(t, s.ToolResult.Result, again.ToolResult.Result)
			case s.Ping != nil:
				require.Equal(t, s.Ping.Time, again.Ping.Time)
			default:
				require.Equal(t, typedParams(s), typedParams(again))
			}

			// encoding/json reaches the same decoder through UnmarshalJSON.
			target := newParams(s.Kind)
			require.NoError(t, json.Unmarshal(params, target))
		})
	}
}

func newParams(k Kind) any {
	switch k {
	case KindTrigger:
		return new(AgentTriggerParams)
	case KindKnowledge:
		return new(KnowledgeRetrievalParams)
	case KindMemoryStore, KindMemoryRetrieval:
		return new(MemoryParams)
	case KindMessage:
		return new(MessageParams)
	case KindToolCall:
		return new(ToolCallRequestParams)
	case KindToolResult:
		return new(ToolCallResultParams)
	case KindMCP:
		return new(MCPParams)
	case KindA2A:
		return new(A2AParams)
	}
	return new(PingParams)
}

func TestMarshalShapes(t *testing.T) {
	msg := Message{ID: "m1", Role: RoleUser, Content: []Part{
		TextPart{Text: "hi"},
		FilePart{File: FileWithURI{URI: "https://x.example/a.pdf"}},
		FilePart{File: FileWithBytes{Name: "a.txt", Bytes: "aGk="}},
		DataPart{Data: map[string]any{"k": 1.0}},
	}}
	require.JSONEq(t, `{"id":"m1","role":"user","content":[
		{"kind":"text","text":"hi"},
		{"kind":"file","file":{"uri":"https://x.example/a.pdf"}},
		{"kind":"file","file":{"name":"a.txt","bytes":"aGk="}},
		{"kind":"data","data":{"k":1}}]}`, string(mustMarshal(t, msg)))

	require.JSONEq(t, `[{"kind":"file","id":"f","name":"n"},{"kind":"site","url":"u"}]`,
		string(mustMarshal(t, []Source{FileSource{ID: "f", Name: "n"}, SiteSource{URL: "u"}})))

	// Required members are sent even when empty; nullable ones as null.
	require.JSONEq(t, `{"outputs":[],"isError":false}`, string(mustMarshal(t, ToolCallResult{})))
	require.JSONEq(t, `{"name":"t","id":"t","type":"function_call","arguments":null,"outputs":null}`,
		string(mustMarshal(t, ToolDefinition{Name: "t", ID: "t", Type: "function_call"})))
	require.JSONEq(t, `{"name":"a","required":false}`, string(mustMarshal(t, ToolArgumentDefinition{Name: "a"})))

	// UnmarshalJSON validates.
	var m Message
	err := json.Unmarshal([]byte(`{"id":"m","role":"robot","content":[{"kind":"text","text":"x"}]}`), &m)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, FieldError{Field: "role", Reason: `must be one of "user", "agent", "system", not "robot"`}, e.Data)
	require.NoError(t, json.Unmarshal(mustMarshal(t, msg), &m))
	require.Equal(t, msg, m)

	var tr AgentTrigger
	require.Error(t, json.Unmarshal([]byte(`{"type":"autonomous","event":{"type":"t","id":"i"},"content":[]}`), &tr))

	var p ToolCallRequestParams
	err = json.Unmarshal([]byte(`{"context":{}}`), &p)
	require.ErrorAs(t, err, &e)
	require.Equal(t, "params.context.agent", e.Data.(FieldError).Field)
	require.NoError(t, json.Unmarshal([]byte(`null`), &p))

	// Inline and native protocol params keep their layout.
	var mcp MCPParams
	require.NoError(t, json.Unmarshal([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`), &mcp))
	require.True(t, mcp.Inline)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`, string(mustMarshal(t, mcp)))
	var a2a A2AParams
	require.NoError(t, json.Unmarshal([]byte(`{"payload":{"message":{"role":"user","parts":[{"kind":"text","text":"q"}]}},"context":{"from":"a"}}`), &a2a))
	require.True(t, a2a.Native)
	require.Equal(t, []string{"q"}, a2a.Texts)
	require.JSONEq(t, `{"payload":{"message":{"role":"user","parts":[{"kind":"text","text":"q"}]}},"context":{"from":"a"}}`, string(mustMarshal(t, a2a)))
}
