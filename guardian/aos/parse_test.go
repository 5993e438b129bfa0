package aos

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseStepExamples(t *testing.T) {
	tests := []struct {
		name   string
		method string
		kind   Kind
		id     string
		check  func(t *testing.T, s *Step)
	}{
		{"agentTrigger", MethodAgentTrigger, KindTrigger, `"req-trigger-1"`, func(t *testing.T, s *Step) {
			tr := s.Trigger.Trigger
			require.Equal(t, TriggerAutonomous, tr.Type)
			require.Equal(t, AgentTriggerEvent{Type: "email", ID: "msg-20250603-0871"}, tr.Event)
			require.Len(t, tr.Content, 2)
			require.IsType(t, TextPart{}, tr.Content[0])
			require.Equal(t, map[string]any{"from": "dana.whitfield@example.com", "receivedAt": "2025-06-03T08:59:51Z"}, tr.Content[1].(DataPart).Data)
			require.Equal(t, "support@acme.example", tr.Metadata["mailbox"])
			require.Nil(t, s.Context.User)
		}},
		{"message", MethodMessage, KindMessage, `1`, func(t *testing.T, s *Step) {
			m := s.Message.Message
			require.Equal(t, "msg-u-1", m.ID)
			require.Equal(t, RoleUser, m.Role)
			require.Len(t, m.Content, 2)
			require.Equal(t, FilePart{File: FileWithURI{Name: "receipt.pdf", MimeType: "application/pdf", URI: "https://files.acme.example/u/4821/receipt.pdf"}}, m.Content[1])
			require.Empty(t, s.Message.Citations)
			c := s.Context
			require.Equal(t, "dana.whitfield@example.com", c.User.Email)
			require.Equal(t, "org-customers", c.User.Organization.ID)
			require.Equal(t, time.Date(2025, 6, 3, 9, 0, 1, 512e6, time.UTC), c.Time)
		}},
		{"message-agent", MethodMessage, KindMessage, `8`, func(t *testing.T, s *Step) {
			require.Equal(t, RoleAgent, s.Role())
			require.Equal(t, []Source{FileSource{ID: "kb-refund-policy", Name: "Refund policy"}, SiteSource{URL: "https://acme.example/help/refunds"}}, s.Message.Citations)
			require.Equal(t, "Confirm the refund and cite the policy.", s.Reasoning())
		}},
		{"knowledgeRetrieval", MethodKnowledgeRetrieval, KindKnowledge, `2`, func(t *testing.T, s *Step) {
			k := s.Knowledge.KnowledgeStep
			require.Equal(t, "refund policy for undelivered orders", k.Query)
			require.Equal(t, []string{"refund", "undelivered", "policy"}, k.Keywords)
			require.Len(t, k.Results, 2)
			require.Equal(t, 0.91, k.Results[0].Metadata["score"])
		}},
		{"memoryContextRetrieval", MethodMemoryContextRetrieval, KindMemoryRetrieval, `3`, func(t *testing.T, s *Step) {
			require.Len(t, s.Memory.Memory, 2)
		}},
		{"memoryStore", MethodMemoryStore, KindMemoryStore, `7`, func(t *testing.T, s *Step) {
			require.Equal(t, []string{"Refund rf_3Kx81 of 89.90 EUR issued for order A-10023 on 2025-06-03."}, s.Memory.Memory)
		}},
		{"toolCallRequest", MethodToolCallRequest, KindToolCall, `4`, func(t *testing.T, s *Step) {
			tc := s.ToolCall.ToolCallRequest
			require.Equal(t, "exec-91b2", tc.ExecutionID)
			require.Equal(t, "refund_payment", tc.ToolID)
			require.Equal(t, []ToolArgumentValue{{Name: "orderId", Value: "A-10023"}, {Name: "amount", Value: 89.9}, {Name: "currency", Value: "EUR"}}, tc.Inputs)
			a := s.Context.Agent
			require.Equal(t, "Acme Support Agent", a.Name)
			require.Equal(t, "https://acme.example", a.Provider.URL)
			require.Equal(t, int64(4096), a.Model.MaxTokens)
			require.Equal(t, int64(128000), a.Model.ContextWindow)
			require.Equal(t, "OpenAI", a.Model.Provider.Name)
			require.Len(t, a.Tools, 3)
			require.Nil(t, a.Tools[1].Outputs)
			require.Equal(t, ToolArgumentDefinition{Name: "cc", Type: "array"}, a.Tools[1].Arguments[3])
			require.Equal(t, []MCPServer{{Name: "filesystem", Version: "0.6.2"}}, a.MCPServers)
			require.Equal(t, "kb-refund-policy", a.Resources[0].ID)
			require.Equal(t, "org-acme", a.Organization.ID)
			require.Equal(t, "eu-west-1", a.Metadata["region"])
			require.Equal(t, "sess-7f3a9c", s.Context.Session.ID)
			require.Equal(t, "web-chat", s.Context.Session.Metadata["channel"])
			require.Equal(t, "turn-1", s.Context.TurnID)
			require.Equal(t, "step-4", s.Context.StepID)
		}},
		{"toolCallResult", MethodToolCallResult, KindToolResult, `5`, func(t *testing.T, s *Step) {
			r := s.ToolResult
			require.False(t, r.Nested)
			require.Equal(t, "exec-91b2", r.ExecutionID)
			require.False(t, r.Result.IsError)
			require.Len(t, r.Result.Outputs, 1)
		}},
		{"toolCallResult-nested", MethodToolCallResult, KindToolResult, `6`, func(t *testing.T, s *Step) {
			r := s.ToolResult
			require.True(t, r.Nested)
			require.Equal(t, "exec-91b2", r.ExecutionID)
			require.Len(t, r.Result.Outputs, 1)
		}},
		{"MCP", MethodMCP, KindMCP, `9`, func(t *testing.T, s *Step) {
			m := s.MCP
			require.False(t, m.Inline)
			require.Equal(t, "tools/call", m.Method)
			require.Equal(t, "17", string(m.ID))
			require.Equal(t, "read_file", m.ToolName)
			require.Equal(t, map[string]any{"path": "/srv/orders/A-10023.json"}, m.Arguments)
			require.True(t, json.Valid(m.Message))
			require.Nil(t, s.Context)
		}},
		{"MCP-inline", MethodMCP, KindMCP, `10`, func(t *testing.T, s *Step) {
			require.True(t, s.MCP.Inline)
			require.Equal(t, string(s.Params), string(s.MCP.Message))
			require.Equal(t, "write_file", s.MCP.ToolName)
		}},
		{"MCP-result", MethodMCP, KindMCP, `11`, func(t *testing.T, s *Step) {
			require.Empty(t, s.MCP.Method)
			require.NotNil(t, s.MCP.Result)
			require.False(t, s.IsError())
		}},
		{"A2A", MethodA2A, KindA2A, `12`, func(t *testing.T, s *Step) {
			a := s.A2A
			require.False(t, a.Inline)
			require.False(t, a.Native)
			require.Equal(t, "message/send", a.Method)
			require.Equal(t, "9229e770-767c-417b-a0b0-f0741243c589", a.MessageID)
			require.Equal(t, "ctx-shipping-4821", a.ContextID)
			require.Equal(t, []string{"Where is parcel JD0146000034 for order A-10023?"}, a.Texts)
			require.Len(t, a.Data, 1)
			require.Equal(t, "Ask the shipping agent about the parcel.", s.Reasoning())
		}},
		{"A2A-inline", MethodA2A, KindA2A, `13`, func(t *testing.T, s *Step) {
			require.True(t, s.A2A.Inline)
			require.Equal(t, "message/send", s.A2A.Method)
			require.Equal(t, "agent", s.Role())
		}},
		{"A2A-native", "message/send", KindA2A, `14`, func(t *testing.T, s *Step) {
			a := s.A2A
			require.True(t, a.Native)
			require.Equal(t, "message/send", a.Method)
			require.Equal(t, "Acme Support Agent", a.From)
			require.Equal(t, "Shipping Agent", a.To)
			require.Equal(t, "ctx-shipping-4821", a.ContextID)
			require.Len(t, a.Texts, 1)
		}},
		{"ping", MethodPing, KindPing, `"ping-1"`, func(t *testing.T, s *Step) {
			require.Equal(t, "2025-06-03T09:00:00Z", s.Ping.Timestamp)
			require.Equal(t, int64(5000), s.Ping.Timeout)
			require.False(t, s.Ping.TopLevel)
			require.Equal(t, "agent-support-01", s.Ping.Metadata["agent"])
		}},
		{"ping-toplevel", MethodPing, KindPing, `15`, func(t *testing.T, s *Step) {
			require.True(t, s.Ping.TopLevel)
			require.Equal(t, time.Date(2025, 6, 3, 9, 0, 0, 0, time.UTC), s.Ping.Time)
		}},
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := example(t, tc.name)
			s := parse(t, msg)
			require.Equal(t, tc.method, s.Method)
			require.Equal(t, tc.kind, s.Kind)
			require.Equal(t, tc.id, string(s.ID))
			require.False(t, s.IsNotification())
			require.Equal(t, string(msg), string(s.Raw))
			set := 0
			for _, p := range []bool{s.Trigger != nil, s.Knowledge != nil, s.Memory != nil, s.Message != nil,
				s.ToolCall != nil, s.ToolResult != nil, s.MCP != nil, s.A2A != nil, s.Ping != nil} {
				if p {
					set++
				}
			}
			require.Equal(t, 1, set, "exactly one params pointer")
			switch tc.kind {
			case KindMCP, KindA2A, KindPing:
				require.Nil(t, s.Context)
			default:
				require.NotNil(t, s.Context)
			}
			tc.check(t, s)
		})
		covered[tc.name] = true
	}
	for _, n := range exampleNames(t) {
		require.True(t, covered[n], "testdata/%s.json has no test case", n)
	}
}

// TestParseStepInvalidParams changes one thing in a valid example and expects -32602
// naming the field.
func TestParseStepInvalidParams(t *testing.T) {
	tests := []struct {
		example string
		path    string
		value   any
		field   string
		reason  string
	}{
		// StepContext and the objects in it.
		{"message", "params.context", deleted, "params.context", "required"},
		{"message", "params.context", "ctx", "params.context", "must be an object, not a string"},
		{"message", "params.context.agent", deleted, "params.context.agent", "required"},
		{"message", "params.context.agent.name", 5, "params.context.agent.name", "must be a string, not a number"},
		{"message", "params.context.agent.id", deleted, "params.context.agent.id", "required"},
		{"message", "params.context.agent.instructions", deleted, "params.context.agent.instructions", "required"},
		{"message", "params.context.agent.version", deleted, "params.context.agent.version", "required"},
		{"message", "params.context.agent.provider", deleted, "params.context.agent.provider", "required"},
		{"message", "params.context.agent.provider.url", deleted, "params.context.agent.provider.url", "required"},
		{"message", "params.context.agent.model.provider", deleted, "params.context.agent.model.provider", "required"},
		{"message", "params.context.agent.model.provider.name", deleted, "params.context.agent.model.provider.name", "required"},
		{"message", "params.context.agent.model.maxTokens", 1.5, "params.context.agent.model.maxTokens", "must be an integer"},
		{"message", "params.context.agent.model.contextWindow", "big", "params.context.agent.model.contextWindow", "must be an integer"},
		{"message", "params.context.agent.model.stopSequences", []any{1}, "params.context.agent.model.stopSequences[0]", "must be a string"},
		{"message", "params.context.agent.tools", map[string]any{}, "params.context.agent.tools", "must be an array, not an object"},
		{"message", "params.context.agent.tools[1].arguments", deleted, "params.context.agent.tools[1].arguments", "required"},
		{"message", "params.context.agent.tools[1].outputs", deleted, "params.context.agent.tools[1].outputs", "required"},
		{"message", "params.context.agent.tools[2].type", deleted, "params.context.agent.tools[2].type", "required"},
		{"message", "params.context.agent.tools[0].arguments[0].required", deleted, "params.context.agent.tools[0].arguments[0].required", "required"},
		{"message", "params.context.agent.tools[0].arguments[0].required", "yes", "params.context.agent.tools[0].arguments[0].required", "must be a boolean"},
		{"message", "params.context.agent.tools[0].arguments[0].type", "text", "params.context.agent.tools[0].arguments[0].type", `must be one of "string", "number"`},
		{"message", "params.context.agent.tools[0].outputs[0].type", "json", "params.context.agent.tools[0].outputs[0].type", "must be one of"},
		{"message", "params.context.agent.tools[0].outputs[0].name", deleted, "params.context.agent.tools[0].outputs[0].name", "required"},
		{"message", "params.context.agent.mcpServers[0].version", deleted, "params.context.agent.mcpServers[0].version", "required"},
		{"message", "params.context.agent.resources[0].content", deleted, "params.context.agent.resources[0].content", "required"},
		{"message", "params.context.agent.organization.id", deleted, "params.context.agent.organization.id", "required"},
		{"message", "params.context.agent.metadata", "x", "params.context.agent.metadata", "must be an object, not a string"},
		{"message", "params.context.session", deleted, "params.context.session", "required"},
		{"message", "params.context.session.id", deleted, "params.context.session.id", "required"},
		{"message", "params.context.session.id", nil, "params.context.session.id", "must be a string, not null"},
		{"message", "params.context.session.id", "", "params.context.session.id", "must not be empty"},
		{"message", "params.context.turnId", deleted, "params.context.turnId", "required"},
		{"message", "params.context.stepId", 7, "params.context.stepId", "must be a string"},
		{"message", "params.context.timestamp", deleted, "params.context.timestamp", "required"},
		{"message", "params.context.timestamp", "yesterday", "params.context.timestamp", "ISO 8601"},
		{"message", "params.context.timestamp", "2025-13-45T99:00:00Z", "params.context.timestamp", "ISO 8601"},
		{"message", "params.context.user.id", deleted, "params.context.user.id", "required"},
		{"message", "params.context.user.organization", deleted, "params.context.user.organization", "required"},
		{"message", "params.context.user.email", false, "params.context.user.email", "must be a string"},
		// Message, parts and sources.
		{"message", "params.message", deleted, "params.message", "required"},
		{"message", "params.message.id", deleted, "params.message.id", "required"},
		{"message", "params.message.role", deleted, "params.message.role", "required"},
		{"message", "params.message.role", "admin", "params.message.role", `must be one of "user", "agent", "system", not "admin"`},
		{"message", "params.message.content", deleted, "params.message.content", "required"},
		{"message", "params.message.content", []any{}, "params.message.content", "at least one part"},
		{"message", "params.message.content", "hi", "params.message.content", "must be an array, not a string"},
		{"message", "params.message.content[0]", "hi", "params.message.content[0]", "must be an object, not a string"},
		{"message", "params.message.content[0].text", deleted, "params.message.content[0].text", "required"},
		{"message", "params.message.content[0].text", 5, "params.message.content[0].text", "must be a string, not a number"},
		{"message", "params.message.content[0].kind", "image", "params.message.content[0].kind", `must be one of "text", "file", "data", not "image"`},
		{"message", "params.message.content[0]", map[string]any{"metadata": map[string]any{}}, "params.message.content[0].kind", "required"},
		{"message", "params.message.content[1].file", deleted, "params.message.content[1].file", "required"},
		{"message", "params.message.content[1].file", "f", "params.message.content[1].file", "must be an object"},
		{"message", "params.message.content[1].file.bytes", "aGVsbG8=", "params.message.content[1].file", "either bytes or uri, not both"},
		{"message", "params.message.content[1].file.uri", deleted, "params.message.content[1].file", "must have bytes or uri"},
		{"message", "params.message.content[1].file.uri", 3, "params.message.content[1].file.uri", "must be a string"},
		{"message", "params.message.content[1]", map[string]any{"kind": "data"}, "params.message.content[1].data", "required"},
		{"message", "params.message.content[1]", map[string]any{"kind": "data", "data": "x"}, "params.message.content[1].data", "must be an object or an array"},
		{"message", "params.citations", "x", "params.citations", "must be an array"},
		{"message-agent", "params.citations[0].kind", "book", "params.citations[0].kind", `must be one of "file", "site"`},
		{"message-agent", "params.citations[0].kind", deleted, "params.citations[0].kind", "required"},
		{"message-agent", "params.citations[0].name", deleted, "params.citations[0].name", "required"},
		{"message-agent", "params.citations[0].id", 1, "params.citations[0].id", "must be a string"},
		{"message-agent", "params.citations[1].url", deleted, "params.citations[1].url", "required"},
		{"message-agent", "params.reasoning", 1, "params.reasoning", "must be a string"},
		// Trigger.
		{"agentTrigger", "params.trigger", deleted, "params.trigger", "required"},
		{"agentTrigger", "params.trigger.type", "scheduled", "params.trigger.type", `must be one of "autonomous"`},
		{"agentTrigger", "params.trigger.type", deleted, "params.trigger.type", "required"},
		{"agentTrigger", "params.trigger.event", deleted, "params.trigger.event", "required"},
		{"agentTrigger", "params.trigger.event.id", deleted, "params.trigger.event.id", "required"},
		{"agentTrigger", "params.trigger.event.type", deleted, "params.trigger.event.type", "required"},
		{"agentTrigger", "params.trigger.content", []any{}, "params.trigger.content", "at least one part"},
		{"agentTrigger", "params.trigger.content[1].data", deleted, "params.trigger.content[1].data", "required"},
		// Knowledge.
		{"knowledgeRetrieval", "params.knowledgeStep", deleted, "params.knowledgeStep", "required"},
		{"knowledgeRetrieval", "params.knowledgeStep.results", deleted, "params.knowledgeStep.results", "required"},
		{"knowledgeRetrieval", "params.knowledgeStep.results[1].content", deleted, "params.knowledgeStep.results[1].content", "required"},
		{"knowledgeRetrieval", "params.knowledgeStep.results[0].id", deleted, "params.knowledgeStep.results[0].id", "required"},
		{"knowledgeRetrieval", "params.knowledgeStep.keywords", []any{"a", 1}, "params.knowledgeStep.keywords[1]", "must be a string"},
		{"knowledgeRetrieval", "params.knowledgeStep.query", []any{}, "params.knowledgeStep.query", "must be a string, not an array"},
		// Memory.
		{"memoryStore", "params.memory", deleted, "params.memory", "required"},
		{"memoryStore", "params.memory", nil, "params.memory", "must be an array, not null"},
		{"memoryContextRetrieval", "params.memory[1]", map[string]any{}, "params.memory[1]", "must be a string, not an object"},
		// Tool call request.
		{"toolCallRequest", "params.toolCallRequest", deleted, "params.toolCallRequest", "required"},
		{"toolCallRequest", "params.toolCallRequest.executionId", deleted, "params.toolCallRequest.executionId", "required"},
		{"toolCallRequest", "params.toolCallRequest.toolId", deleted, "params.toolCallRequest.toolId", "required"},
		{"toolCallRequest", "params.toolCallRequest.inputs", deleted, "params.toolCallRequest.inputs", "required"},
		{"toolCallRequest", "params.toolCallRequest.inputs[1].value", deleted, "params.toolCallRequest.inputs[1].value", "required"},
		{"toolCallRequest", "params.toolCallRequest.inputs[2].name", deleted, "params.toolCallRequest.inputs[2].name", "required"},
		{"toolCallRequest", "params.toolCallRequest.inputs[0].id", 1, "params.toolCallRequest.inputs[0].id", "must be a string"},
		{"toolCallRequest", "params.toolCallRequest.inputs[2].name", "orderId", "params.toolCallRequest.inputs[2].name", "repeats the name of inputs[0]"},
		{"toolCallRequest", "params.toolCallRequest.inputs[2].name", "amount", "params.toolCallRequest.inputs[2].name", "repeats the name of inputs[1]"},
		// Tool call result, both layouts.
		{"toolCallResult", "params.executionId", deleted, "params.executionId", "required"},
		{"toolCallResult", "params.result", deleted, "params.result", "required"},
		{"toolCallResult", "params.result.isError", deleted, "params.result.isError", "required"},
		{"toolCallResult", "params.result.isError", "false", "params.result.isError", "must be a boolean, not a string"},
		{"toolCallResult", "params.result.outputs", deleted, "params.result.outputs", "required"},
		{"toolCallResult", "params.result.outputs[0].kind", "data", "params.result.outputs[0].kind", `must be "text"`},
		{"toolCallResult", "params.result.outputs[0].text", deleted, "params.result.outputs[0].text", "required"},
		{"toolCallResult", "params.toolCallResult", map[string]any{"executionId": "x", "result": map[string]any{"outputs": []any{}, "isError": true}}, "params.toolCallResult", "must not be combined"},
		{"toolCallResult-nested", "params.toolCallResult.executionId", deleted, "params.toolCallResult.executionId", "required"},
		{"toolCallResult-nested", "params.toolCallResult.result", deleted, "params.toolCallResult.result", "required"},
		{"toolCallResult-nested", "params.toolCallResult.result.isError", deleted, "params.toolCallResult.result.isError", "required"},
		{"toolCallResult-nested", "params.toolCallResult", deleted, "params.executionId", "required"},
		{"toolCallResult-nested", "params.toolCallResult", nil, "params.toolCallResult", "must be an object, not null"},
		// MCP.
		{"MCP", "params.message", deleted, "params.message", "required"},
		{"MCP", "params.message", "x", "params.message", "must be an object, not a string"},
		{"MCP", "params.message.method", 5, "params.message.method", "must be a string"},
		{"MCP", "params.message.id", map[string]any{}, "params.message.id", "must be a string, a number or null"},
		{"MCP", "params.message.params", deleted, "params.message.params", "required"},
		{"MCP", "params.message.params", []any{}, "params.message.params", "must be an object, not an array"},
		{"MCP", "params.message.params.name", deleted, "params.message.params.name", "required"},
		{"MCP", "params.message.params.name", 1, "params.message.params.name", "must be a string"},
		{"MCP", "params.message.params.arguments", "x", "params.message.params.arguments", "must be an object"},
		{"MCP", "params.reasoning", 1, "params.reasoning", "must be a string"},
		{"MCP-inline", "params.params.name", deleted, "params.params.name", "required"},
		{"MCP-inline", "params.jsonrpc", "1.0", "params.message", "required"},
		// A2A.
		{"A2A", "params.message", deleted, "params.message", "required"},
		{"A2A", "params.message", 1, "params.message", "must be an object, not a number"},
		{"A2A", "params.message.params.message.parts", "x", "params.message.params.message.parts", "must be an array"},
		{"A2A", "params.message.params.message.parts[0]", "x", "params.message.params.message.parts[0]", "must be an object"},
		{"A2A", "params.message.params.message.parts[0].text", 5, "params.message.params.message.parts[0].text", "must be a string, not a number"},
		{"A2A", "params.message.params.message.parts[0].text", deleted, "params.message.params.message.parts[0].text", "required"},
		{"A2A-inline", "params.params.message.parts[0].text", false, "params.params.message.parts[0].text", "must be a string"},
		{"A2A-native", "params.payload", "x", "params.payload", "must be an object, not a string"},
		{"A2A-native", "params.payload.message.parts[0].text", []any{}, "params.payload.message.parts[0].text", "must be a string"},
		{"A2A-native", "params.context", "x", "params.context", "must be an object"},
		// Ping.
		{"ping", "params.timestamp", "now", "params.timestamp", "ISO 8601"},
		{"ping", "params.timestamp", 1717405200, "params.timestamp", "must be a string"},
		{"ping", "params.timeout", -1, "params.timeout", "must not be negative"},
		{"ping", "params.timeout", "5s", "params.timeout", "must be an integer"},
		{"ping", "params.metadata", []any{}, "params.metadata", "must be an object"},
		{"ping-toplevel", "timestamp", "soon", "timestamp", "ISO 8601"},
	}
	for _, tc := range tests {
		t.Run(tc.example+"/"+tc.path, func(t *testing.T) {
			_, e := ParseStep(mutate(t, tc.example, tc.path, tc.value))
			requireErr(t, e, CodeInvalidParams, tc.field, tc.reason)
		})
	}
}

// TestParseStepValidVariants accepts what the spec allows and the liberal reading adds.
func TestParseStepValidVariants(t *testing.T) {
	tests := []struct {
		example string
		path    string
		value   any
		check   func(t *testing.T, s *Step)
	}{
		{"message", "params.context.user", deleted, func(t *testing.T, s *Step) { require.Nil(t, s.Context.User) }},
		{"message", "params.context.user", nil, func(t *testing.T, s *Step) { require.Nil(t, s.Context.User) }},
		{"message", "params.context.agent.url", "https://support.acme.example/a2a", func(t *testing.T, s *Step) {
			require.Equal(t, "https://support.acme.example/a2a", s.Context.Agent.URL)
		}},
		{"message", "params.context.agent.description", nil, func(t *testing.T, s *Step) { require.Empty(t, s.Context.Agent.Description) }},
		{"message", "params.context.agent.model", deleted, func(t *testing.T, s *Step) { require.Nil(t, s.Context.Agent.Model) }},
		{"message", "params.context.agent.tools", deleted, func(t *testing.T, s *Step) { require.Nil(t, s.Context.Agent.Tools) }},
		{"message", "params.context.agent.tools[0].arguments", nil, func(t *testing.T, s *Step) { require.Nil(t, s.Context.Agent.Tools[0].Arguments) }},
		{"message", "params.context.agent.tools[0].arguments[0].mimeType", nil, nil},
		{"message", "params.context.agent.tools[0].arguments[0].type", "integer", nil},
		{"message", "params.context.agent.model.maxTokens", 1e3, func(t *testing.T, s *Step) { require.Equal(t, int64(1000), s.Context.Agent.Model.MaxTokens) }},
		{"message", "params.context.agent.metadata", nil, func(t *testing.T, s *Step) { require.Nil(t, s.Context.Agent.Metadata) }},
		{"message", "params.context.timestamp", "2025-06-03T11:00:01+02:00", func(t *testing.T, s *Step) {
			require.True(t, s.Context.Time.Equal(time.Date(2025, 6, 3, 9, 0, 1, 0, time.UTC)))
		}},
		{"message", "params.context.timestamp", "2025-06-03T09:00:01.123456", nil},
		{"message", "params.context.timestamp", "2025-06-03T11:00:01+0200", nil},
		{"message", "params.context.timestamp", "2025-06-03 09:00:01Z", nil},
		{"message", "params.context.timestamp", "2025-06-03", nil},
		{"message", "params.message.content[0].kind", deleted, func(t *testing.T, s *Step) { require.IsType(t, TextPart{}, s.Message.Message.Content[0]) }},
		{"message", "params.message.content[1].kind", deleted, func(t *testing.T, s *Step) { require.IsType(t, FilePart{}, s.Message.Message.Content[1]) }},
		{"message", "params.message.content[1]", map[string]any{"kind": "file", "file": map[string]any{"bytes": "aGVsbG8=", "name": nil}}, func(t *testing.T, s *Step) {
			require.Equal(t, FilePart{File: FileWithBytes{Bytes: "aGVsbG8="}}, s.Message.Message.Content[1])
		}},
		{"message", "params.message.content[1]", map[string]any{"data": []any{1.0, "two"}}, func(t *testing.T, s *Step) {
			require.Equal(t, DataPart{Data: []any{1.0, "two"}}, s.Message.Message.Content[1])
		}},
		{"message", "params.message.content[0].kind", "text", nil},
		{"message", "params.message.role", "system", func(t *testing.T, s *Step) { require.Equal(t, RoleSystem, s.Role()) }},
		{"message", "params.message.metadata", map[string]any{"lang": "en"}, func(t *testing.T, s *Step) { require.Equal(t, "en", s.Message.Message.Metadata["lang"]) }},
		{"message", "params.citations", nil, func(t *testing.T, s *Step) { require.Nil(t, s.Message.Citations) }},
		{"message", "params.citation", []any{map[string]any{"kind": "site", "url": "https://x.example"}}, func(t *testing.T, s *Step) {
			require.Equal(t, []Source{SiteSource{URL: "https://x.example"}}, s.Message.Citations)
		}},
		{"message", "params.unknownField", map[string]any{"deep": []any{1, 2, 3}}, func(t *testing.T, s *Step) {
			require.Contains(t, string(s.Raw), "unknownField")
		}},
		{"message", "params.context.agent.tools[0].arguments[0].extra", true, nil},
		{"toolCallRequest", "params.toolCallRequest.inputs[0].value", nil, func(t *testing.T, s *Step) {
			require.Contains(t, s.Inputs(), "orderId")
			require.Nil(t, s.Inputs()["orderId"])
		}},
		{"toolCallRequest", "params.toolCallRequest.inputs", []any{}, func(t *testing.T, s *Step) { require.Empty(t, s.Inputs()) }},
		{"toolCallRequest", "params.toolCallRequest.inputs[0].value", map[string]any{"a": []any{true}}, nil},
		{"toolCallResult", "params.result.outputs", []any{}, func(t *testing.T, s *Step) { require.Empty(t, s.ToolResult.Result.Outputs) }},
		{"toolCallResult", "params.result.outputs[0].kind", deleted, nil},
		{"toolCallResult", "params.result.isError", true, func(t *testing.T, s *Step) { require.True(t, s.IsError()) }},
		{"knowledgeRetrieval", "params.knowledgeStep.results", []any{}, nil},
		{"knowledgeRetrieval", "params.knowledgeStep.query", deleted, nil},
		{"memoryStore", "params.memory", []any{}, nil},
		{"ping", "params", deleted, func(t *testing.T, s *Step) { require.Empty(t, s.Ping.Timestamp) }},
		{"ping", "params", nil, func(t *testing.T, s *Step) { require.Nil(t, s.Params) }},
		{"ping", "params", map[string]any{}, nil},
		{"ping", "params.timestamp", nil, nil},
		{"MCP", "params.message.params.arguments", nil, func(t *testing.T, s *Step) { require.Nil(t, s.Inputs()) }},
		{"MCP", "params.message", map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}, func(t *testing.T, s *Step) {
			require.Equal(t, "notifications/initialized", s.MCP.Method)
			require.Nil(t, s.MCP.ID)
		}},
		{"A2A", "params.message", map[string]any{"role": "user", "parts": []any{map[string]any{"type": "text", "text": "old-style part"}}}, func(t *testing.T, s *Step) {
			require.Equal(t, []string{"old-style part"}, s.A2A.Texts)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.example+"/"+tc.path, func(t *testing.T) {
			s := parse(t, mutate(t, tc.example, tc.path, tc.value))
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func TestParseStepEnvelope(t *testing.T) {
	tests := []struct {
		name  string
		msg   string
		code  int
		field string
	}{
		{"jsonrpc missing", `{"id":1,"method":"ping"}`, CodeInvalidRequest, "jsonrpc"},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, CodeInvalidRequest, "jsonrpc"},
		{"jsonrpc number", `{"jsonrpc":2.0,"id":1,"method":"ping"}`, CodeInvalidRequest, "jsonrpc"},
		{"jsonrpc case", `{"JSONRPC":"2.0","id":1,"method":"ping"}`, CodeInvalidRequest, "jsonrpc"},
		{"method missing", `{"jsonrpc":"2.0","id":1}`, CodeInvalidRequest, "method"},
		{"method number", `{"jsonrpc":"2.0","id":1,"method":1}`, CodeInvalidRequest, "method"},
		{"method null", `{"jsonrpc":"2.0","id":1,"method":null}`, CodeInvalidRequest, "method"},
		{"method case", `{"jsonrpc":"2.0","id":1,"Method":"ping"}`, CodeInvalidRequest, "method"},
		{"id object", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, CodeInvalidRequest, "id"},
		{"id array", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, CodeInvalidRequest, "id"},
		{"id bool", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, CodeInvalidRequest, "id"},
		{"params string", `{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}`, CodeInvalidRequest, "params"},
		{"params number", `{"jsonrpc":"2.0","id":1,"method":"ping","params":3}`, CodeInvalidRequest, "params"},
		{"params array", `{"jsonrpc":"2.0","id":1,"method":"ping","params":[]}`, CodeInvalidParams, "params"},
		{"params missing", `{"jsonrpc":"2.0","id":1,"method":"steps/message"}`, CodeInvalidParams, "params"},
		{"params null", `{"jsonrpc":"2.0","id":1,"method":"steps/message","params":null}`, CodeInvalidParams, "params"},
		{"not an object", `[1]`, CodeInvalidRequest, ""},
		{"string", `"ping"`, CodeInvalidRequest, ""},
		{"null", `null`, CodeInvalidRequest, ""},
		{"envelope before method", `{"jsonrpc":"2.0","id":{},"method":"nope"}`, CodeInvalidRequest, "id"},
		{"parse error", `{"jsonrpc":"2.0","id":1,"method":"ping"`, CodeParseError, ""},
		{"trailing data", `{"jsonrpc":"2.0","id":1,"method":"ping"} {}`, CodeParseError, ""},
		{"bom", "\ufeff" + `{"jsonrpc":"2.0","id":1,"method":"ping"}`, CodeParseError, ""},
		{"single quotes", `{'jsonrpc':'2.0'}`, CodeParseError, ""},
		{"empty", ``, CodeParseError, ""},
		{"bad escape", `{"jsonrpc":"2.0","id":"\x","method":"ping"}`, CodeParseError, ""},
		{"control char", "{\"jsonrpc\":\"2.0\",\"id\":\"a\tb\",\"method\":\"ping\"}", CodeParseError, ""},
		{"leading zero", `{"jsonrpc":"2.0","id":01,"method":"ping"}`, CodeParseError, ""},
		{"bare minus", `{"jsonrpc":"2.0","id":-,"method":"ping"}`, CodeParseError, ""},
		{"trailing comma", `{"jsonrpc":"2.0","id":1,"method":"ping",}`, CodeParseError, ""},
		{"nan", `{"jsonrpc":"2.0","id":NaN,"method":"ping"}`, CodeParseError, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, e := ParseStep(json.RawMessage(tc.msg))
			require.NotNil(t, e)
			require.Equal(t, tc.code, e.Code, e.Message)
			switch tc.code {
			case CodeParseError:
				require.Equal(t, "Parse error", e.Message)
				require.IsType(t, SyntaxDetail{}, e.Data)
				require.False(t, json.Valid([]byte(tc.msg)), "encoding/json agrees it is invalid")
			case CodeInvalidRequest:
				require.True(t, strings.HasPrefix(e.Message, "invalid request: "), e.Message)
			}
			if tc.field != "" {
				require.Equal(t, tc.field, e.Data.(FieldError).Field)
			}
		})
	}
}

func TestParseStepMethodNotFound(t *testing.T) {
	for _, m := range []string{"steps/foo", "steps/knowledge", "messages/mcp", "messages/a2a", "Ping", "steps/Message", "", "tasks/list"} {
		t.Run(m, func(t *testing.T) {
			msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": m, "params": map[string]any{}})
			require.NoError(t, err)
			_, e := ParseStep(msg)
			require.NotNil(t, e)
			require.Equal(t, CodeMethodNotFound, e.Code)
			require.Equal(t, "Method not found", e.Message)
			require.Equal(t, map[string]any{"method": m}, e.Data)
		})
	}
}

func TestParseStepIDs(t *testing.T) {
	tests := []struct {
		id           string // raw JSON; "" for absent
		notification bool
	}{
		{`12345678901234567890123`, false},
		{`"str"`, false},
		{`"\u0041\"b"`, false},
		{`-0.5e+10`, false},
		{`0`, false},
		{`""`, false},
		{`null`, false},
		{``, true},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			msg := `{"jsonrpc":"2.0","method":"ping"`
			if tc.id != "" {
				msg += `,"id":` + tc.id
			}
			msg += `}`
			s := parse(t, json.RawMessage(msg))
			require.Equal(t, tc.notification, s.IsNotification())
			require.Equal(t, tc.notification, IsNotification(json.RawMessage(msg)))
			if tc.notification {
				require.Nil(t, s.ID)
				require.Equal(t, "null", string(IDOf(json.RawMessage(msg))))
				return
			}
			require.Equal(t, tc.id, string(s.ID), "byte for byte")
			require.Equal(t, tc.id, string(IDOf(json.RawMessage(msg))))
		})
	}
}

func TestIDOf(t *testing.T) {
	tests := []struct {
		msg, want string
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"nope"}`, `7`},
		{`{"id":"keep me","jsonrpc":"1.0"}`, `"keep me"`},
		{`{"method":"steps/message","params":{"context":5},"id":12345678901234567890123}`, `12345678901234567890123`},
		{`{"id":{},"method":"ping"}`, `null`},
		{`{"id":[1],"method":"ping"}`, `null`},
		{`{"id":false}`, `null`},
		{`{"jsonrpc":"2.0","id":9`, `null`},
		{`not json`, `null`},
		{`[{"id":1}]`, `null`},
		{``, `null`},
		{`{"jsonrpc":"2.0","id":3,"method":"ping","params":{"a":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`, `3`},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, string(IDOf(json.RawMessage(tc.msg))), tc.msg)
	}
	require.False(t, IsNotification(json.RawMessage(`{"jsonrpc":"2.0","method":"ping"`)), "broken JSON is not a notification")
	require.False(t, IsNotification(json.RawMessage(`[]`)))
}

func TestSplitBody(t *testing.T) {
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	tests := []struct {
		name  string
		body  string
		batch bool
		msgs  []string
		code  int
	}{
		{"single", ping, false, []string{ping}, 0},
		{"single with whitespace", "\n  " + ping + "\r\n", false, []string{"\n  " + ping + "\r\n"}, 0},
		{"batch", "[" + ping + ", " + ping + "]", true, []string{ping, ping}, 0},
		{"batch of scalars", `[1, "x", null]`, true, []string{`1`, `"x"`, `null`}, 0},
		{"batch with a broken element", "[" + ping + `, {"a":]`, true, nil, CodeParseError},
		{"empty batch", `[]`, true, nil, CodeInvalidRequest},
		{"empty batch with spaces", " [ \n ] ", true, nil, CodeInvalidRequest},
		{"unterminated batch", "[" + ping, true, nil, CodeParseError},
		{"trailing comma in batch", "[" + ping + ",]", true, nil, CodeParseError},
		{"not json", `hello`, false, nil, CodeParseError},
		{"empty", ``, false, nil, CodeParseError},
		{"whitespace", " \n\t", false, nil, CodeParseError},
		{"truncated object", `{"jsonrpc":"2.0"`, false, nil, CodeParseError},
		{"number", `42`, false, nil, CodeInvalidRequest},
		{"string", `"ping"`, false, nil, CodeInvalidRequest},
		{"null", `null`, false, nil, CodeInvalidRequest},
		{"true", `true`, false, nil, CodeInvalidRequest},
		{"two values", ping + ping, false, nil, CodeParseError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msgs, batch, e := SplitBody([]byte(tc.body))
			if e == nil && !batch && tc.code == CodeParseError {
				// A single object's syntax is checked by ParseStep, as the endpoint calls it.
				require.Equal(t, []json.RawMessage{json.RawMessage(tc.body)}, msgs)
				_, e = ParseStep(msgs[0])
				require.NotNil(t, e)
				msgs = nil
			}
			if tc.code != 0 {
				require.NotNil(t, e)
				require.Equal(t, tc.code, e.Code, e.Message)
				require.Nil(t, msgs)
				if tc.code == CodeParseError {
					require.Equal(t, "Parse error", e.Message)
				}
				return
			}
			require.Nil(t, e)
			require.Equal(t, tc.batch, batch)
			got := make([]string, len(msgs))
			for i, m := range msgs {
				got[i] = string(m)
			}
			require.Equal(t, tc.msgs, got)
		})
	}
}

// TestBatchElements runs a mixed batch through SplitBody and ParseStep, as the endpoint does.
func TestBatchElements(t *testing.T) {
	body := `[
		{"jsonrpc":"2.0","id":"a","method":"ping"},
		{"jsonrpc":"2.0","method":"ping"},
		1,
		{"jsonrpc":"2.0","id":"d","method":"steps/nope"},
		{"jsonrpc":"2.0","id":"e","method":"steps/message","params":{}},
		{"foo":"bar"}
	]`
	msgs, batch, e := SplitBody([]byte(body))
	require.Nil(t, e)
	require.True(t, batch)
	require.Len(t, msgs, 6)
	type outcome struct {
		code int
		id   string
	}
	want := []outcome{{0, `"a"`}, {0, ``}, {CodeInvalidRequest, `null`}, {CodeMethodNotFound, `"d"`}, {CodeInvalidParams, `"e"`}, {CodeInvalidRequest, `null`}}
	for i, m := range msgs {
		s, e := ParseStep(m)
		if want[i].code == 0 {
			require.Nil(t, e)
			require.Equal(t, want[i].id, string(s.ID))
			continue
		}
		require.NotNil(t, e, "element %d", i)
		require.Equal(t, want[i].code, e.Code, "element %d: %s", i, e.Message)
		require.Equal(t, want[i].id, string(IDOf(m)), "element %d", i)
	}
	b, _, e := SplitBody(example(t, "batch"))
	require.Nil(t, e)
	require.Len(t, b, 3)
	for _, m := range b {
		parse(t, m)
	}
}

func TestParseStepExactMemberNames(t *testing.T) {
	// Member names match exactly: a differently cased duplicate is an unknown member, not an
	// alias the guardian and the agent could read differently.
	msg := mutate(t, "toolCallRequest", "params.toolCallRequest.ToolId", "delete_all")
	s := parse(t, msg)
	require.Equal(t, "refund_payment", s.ToolID())

	// Escaped member names are unescaped before matching, as every JSON parser does.
	s = parse(t, json.RawMessage(`{"jsonrpc":"2.0","id":1,"m\u0065thod":"ping"}`))
	require.Equal(t, MethodPing, s.Method)

	// A repeated member: the last one wins, as in encoding/json and JavaScript.
	s = parse(t, json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"steps/nope","method":"ping"}`))
	require.Equal(t, MethodPing, s.Method)
}

func TestParseStepStrings(t *testing.T) {
	msg := mutate(t, "message", "params.message.content[0].text", "caf\u00e9 \u2603 \U0001F600 \"quoted\" \\ / \b\f\n\r\t \u0001")
	s := parse(t, msg)
	require.Equal(t, "caf\u00e9 \u2603 \U0001F600 \"quoted\" \\ / \b\f\n\r\t \u0001", s.Message.Message.Content[0].(TextPart).Text)

	// Escapes, surrogate pairs and invalid UTF-8 decode as encoding/json decodes them.
	for _, raw := range []string{`"\ud83d\ude00"`, `"\ud83d"`, `"\ude00x"`, `"\ud83d\u0041"`, "\"a\xffb\"", "\"\xe2\x82\"", `"\/\u00e9"`} {
		body := `{"jsonrpc":"2.0","id":1,"method":"steps/memoryStore","params":{"context":` +
			string(mustMarshal(t, parse(t, example(t, "memoryStore")).Context)) + `,"memory":[` + raw + `]}}`
		s := parse(t, json.RawMessage(body))
		var want string
		require.NoError(t, json.Unmarshal([]byte(raw), &want))
		require.Equal(t, want, s.Memory.Memory[0], raw)
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestHostileInput(t *testing.T) {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n) }
	ctx := string(mustMarshal(t, parse(t, example(t, "memoryStore")).Context))
	memory := func(items string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"steps/memoryStore","params":{"context":` + ctx + `,"memory":` + items + `}}`)
	}

	t.Run("depth 64 is fine", func(t *testing.T) {
		// envelope (1) > params (2) > metadata and 61 objects inside it (3..64).
		parse(t, []byte(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"metadata":`+deep(62)+`}}`))
	})
	t.Run("depth 65 in params", func(t *testing.T) {
		_, e := ParseStep([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"metadata":` + deep(63) + `}}`))
		requireErr(t, e, CodeInvalidParams, "params.metadata"+strings.Repeat(".a", 62), "nested deeper than 64 levels")
	})
	t.Run("depth outside params", func(t *testing.T) {
		_, e := ParseStep([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping","x":` + deep(100) + `}`))
		requireErr(t, e, CodeInvalidRequest, "x"+strings.Repeat(".a", 63), "nested deeper than 64 levels")
		require.Equal(t, "1", string(IDOf([]byte(`{"jsonrpc":"2.0","method":"ping","x":`+deep(100)+`,"id":1}`))))
	})
	t.Run("hundreds of thousands of levels", func(t *testing.T) {
		const n = 300_000
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"metadata":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}}`)
		msgs, _, e := SplitBody(body)
		require.Nil(t, e)
		_, e = ParseStep(msgs[0])
		requireErr(t, e, CodeInvalidParams, "", "")
		require.Contains(t, e.Message, "nested deeper than 64 levels")

		_, _, e = SplitBody([]byte(strings.Repeat("[", n)))
		require.Equal(t, CodeParseError, e.Code)
		_, e = ParseStep([]byte(strings.Repeat(`{"a":`, n)))
		require.Equal(t, CodeParseError, e.Code)
		msgs, batch, e := SplitBody([]byte(strings.Repeat("[", n) + strings.Repeat("]", n)))
		require.Nil(t, e)
		require.True(t, batch)
		_, e = ParseStep(msgs[0])
		require.Equal(t, CodeInvalidRequest, e.Code)
	})
	t.Run("too many elements", func(t *testing.T) {
		items := "[" + strings.Repeat(`"m",`, MaxElements) + `"m"]`
		_, e := ParseStep(memory(items))
		requireErr(t, e, CodeInvalidParams, "params.memory", "more than 100000 elements")
		s := parse(t, memory("["+strings.Repeat(`"m",`, MaxElements-1)+`"m"]`))
		require.Len(t, s.Memory.Memory, MaxElements)
	})
	t.Run("too many members", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"metadata":{`)
		for i := 0; i <= MaxElements; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"k` + strconv.Itoa(i) + `":0`)
		}
		b.WriteString(`}}}`)
		_, e := ParseStep([]byte(b.String()))
		requireErr(t, e, CodeInvalidParams, "params.metadata", "more than 100000 members")
	})
	t.Run("huge batch", func(t *testing.T) {
		body := "[" + strings.Repeat(`1,`, MaxElements) + `1]`
		_, _, e := SplitBody([]byte(body))
		require.Equal(t, CodeInvalidRequest, e.Code)
		require.Contains(t, e.Message, "at most 100000")
	})
	t.Run("megabyte strings", func(t *testing.T) {
		big := strings.Repeat("x", 4<<20)
		s := parse(t, memory(`["`+big+`"]`))
		require.Len(t, s.Memory.Memory[0], 4<<20)
		require.Len(t, s.Text(), 4<<20)
		// A huge member name in an error path is cut short.
		_, e := ParseStep([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"metadata":{"` + big + `":` + deep(70) + `}}}`))
		require.Equal(t, CodeInvalidParams, e.Code)
		require.Less(t, len(e.Message), 1000)
	})
}

func TestNewModifiedRequest(t *testing.T) {
	s := parse(t, example(t, "toolCallRequest"))
	params := mutate(t, "toolCallRequest", "params.toolCallRequest.inputs[0].value", "A-REDACTED")
	var p struct {
		Params json.RawMessage `json:"params"`
	}
	require.NoError(t, json.Unmarshal(params, &p))

	out, err := NewModifiedRequest(s, p.Params)
	require.NoError(t, err)
	m := parse(t, out)
	require.Equal(t, string(s.ID), string(m.ID))
	require.Equal(t, s.Method, m.Method)
	require.Equal(t, "A-REDACTED", m.Inputs()["orderId"])

	// The id is echoed byte for byte, and a notification's modified request has none.
	big := parse(t, []byte(`{"jsonrpc":"2.0","id":12345678901234567890123,"method":"ping"}`))
	out, err = NewModifiedRequest(big, json.RawMessage(`{"timestamp":"2025-06-03T09:00:00Z"}`))
	require.NoError(t, err)
	require.Contains(t, string(out), `"id":12345678901234567890123`)
	note := parse(t, []byte(`{"jsonrpc":"2.0","method":"ping"}`))
	out, err = NewModifiedRequest(note, json.RawMessage(`{}`))
	require.NoError(t, err)
	require.True(t, parse(t, out).IsNotification())

	for _, bad := range []string{``, `[]`, `"x"`, `{"context":`, `{}`} {
		_, err := NewModifiedRequest(s, json.RawMessage(bad))
		require.Error(t, err, bad)
	}
	_, err = NewModifiedRequest(s, json.RawMessage(`{}`))
	var rpcErr *Error
	require.ErrorAs(t, err, &rpcErr)
	require.Equal(t, CodeInvalidParams, rpcErr.Code)
	_, err = NewModifiedRequest(nil, json.RawMessage(`{}`))
	require.Error(t, err)
}

// ParseStep's strings share the request's memory; an Unmarshaler's never do, since
// encoding/json may reuse the bytes it hands over.
func TestStringsShareOnlyParseStepInput(t *testing.T) {
	msg := example(t, "toolCallRequest")
	step, perr := ParseStep(msg)
	require.Nil(t, perr)
	tool := step.ToolID()
	require.Equal(t, "refund_payment", tool)

	var p ToolCallRequestParams
	params := append([]byte(nil), step.Params...)
	require.NoError(t, json.Unmarshal(params, &p))
	require.Equal(t, "refund_payment", p.ToolCallRequest.ToolID)

	for _, b := range [][]byte{msg, params} {
		for i := strings.Index(string(b), "refund_payment"); i >= 0; i = strings.Index(string(b), "refund_payment") {
			copy(b[i:], "XXXXXXXXXXXXXX")
		}
	}
	require.Equal(t, "XXXXXXXXXXXXXX", tool, "ParseStep shares the request's memory")
	require.Equal(t, "refund_payment", p.ToolCallRequest.ToolID, "an Unmarshaler copies")
}
