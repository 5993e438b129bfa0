package aos

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStepAccessors(t *testing.T) {
	tests := []struct {
		example   string
		text      string
		hint      string
		tool      string
		inputs    map[string]any
		role      string
		reasoning string
		isError   bool
	}{
		{example: "agentTrigger", hint: "sess-7f3a9c",
			text: "Subject: Where is my order A-10023?\n\nHi, I ordered a kettle two weeks ago and it has not arrived. Dana\n" +
				`{"from":"dana.whitfield@example.com","receivedAt":"2025-06-03T08:59:51Z"}`},
		{example: "message", hint: "sess-7f3a9c", role: "user",
			text: "Hi, my order A-10023 hasn't arrived. Can you refund it to my card 4111 1111 1111 1111?"},
		{example: "message-agent", hint: "sess-7f3a9c", role: "agent", reasoning: "Confirm the refund and cite the policy.",
			text: "I'm sorry your kettle hasn't arrived. I've refunded 89.90 EUR to your original payment method; you'll see it within 5 business days."},
		{example: "knowledgeRetrieval", hint: "sess-7f3a9c", reasoning: "The customer asks for a refund of an undelivered order; check the policy first.",
			text: "refund policy for undelivered orders\n" +
				"Refunds are possible within 30 days of delivery. Undelivered orders older than 10 days are refunded in full.\n" +
				"Standard shipping takes 3-5 business days within the EU."},
		{example: "memoryContextRetrieval", hint: "sess-7f3a9c", reasoning: "Load what we know about this customer.",
			text: "Customer Dana Whitfield prefers email contact.\n" + `{"previousTicket":"T-5521","status":"closed"}`},
		{example: "memoryStore", hint: "sess-7f3a9c", reasoning: "Remember the refund for follow-up questions.",
			text: "Refund rf_3Kx81 of 89.90 EUR issued for order A-10023 on 2025-06-03."},
		{example: "toolCallRequest", hint: "sess-7f3a9c", tool: "refund_payment",
			reasoning: "The order is 14 days old and undelivered; policy allows a full refund.",
			inputs:    map[string]any{"orderId": "A-10023", "amount": 89.9, "currency": "EUR"},
			text:      "orderId=A-10023\namount=89.9\ncurrency=EUR"},
		{example: "toolCallResult", hint: "sess-7f3a9c", text: `{"refundId":"rf_3Kx81","status":"pending","amount":89.9}`},
		{example: "toolCallResult-nested", hint: "sess-7f3a9c", text: `{"refundId":"rf_3Kx81","status":"pending","amount":89.9}`},
		{example: "MCP", hint: "sess-7f3a9c", tool: "read_file", inputs: map[string]any{"path": "/srv/orders/A-10023.json"},
			reasoning: "Read the order file from the filesystem MCP server.", text: "read_file\npath=/srv/orders/A-10023.json"},
		{example: "MCP-inline", tool: "write_file", inputs: map[string]any{"path": "/srv/notes/A-10023.txt", "content": "Refund issued: rf_3Kx81"},
			text: "write_file\ncontent=Refund issued: rf_3Kx81\npath=/srv/notes/A-10023.txt"},
		{example: "MCP-result", text: `{"order":"A-10023","status":"in transit","carrier":"DHL"}`},
		{example: "A2A", hint: "ctx-shipping-4821", role: "agent", reasoning: "Ask the shipping agent about the parcel.",
			text: "Where is parcel JD0146000034 for order A-10023?\n" + `{"customer":"Dana Whitfield","orderId":"A-10023"}`},
		{example: "A2A-inline", hint: "ctx-shipping-4821", role: "agent",
			text: "Where is parcel JD0146000034 for order A-10023?\n" + `{"customer":"Dana Whitfield","orderId":"A-10023"}`},
		{example: "A2A-native", hint: "ctx-shipping-4821", role: "agent", reasoning: "Ask the shipping agent about the parcel.",
			text: "Where is parcel JD0146000034 for order A-10023?\n" + `{"customer":"Dana Whitfield","orderId":"A-10023"}`},
		{example: "ping"},
		{example: "ping-toplevel"},
	}
	for _, tc := range tests {
		t.Run(tc.example, func(t *testing.T) {
			s := parse(t, example(t, tc.example))
			require.Equal(t, tc.text, s.Text())
			require.Equal(t, tc.hint, s.SessionHint())
			require.Equal(t, tc.tool, s.ToolID())
			require.Equal(t, tc.role, s.Role())
			require.Equal(t, tc.reasoning, s.Reasoning())
			require.Equal(t, tc.isError, s.IsError())
			if tc.inputs == nil {
				require.Empty(t, s.Inputs())
			} else {
				require.Equal(t, tc.inputs, s.Inputs())
			}
		})
	}
}

func TestStepTextRendering(t *testing.T) {
	s := parse(t, mutate(t, "toolCallRequest", "params.toolCallRequest.inputs", []any{
		map[string]any{"name": "to", "value": "a@b.example"},
		map[string]any{"name": "n", "value": 1e21},
		map[string]any{"name": "flag", "value": true},
		map[string]any{"name": "none", "value": nil},
		map[string]any{"name": "list", "value": []any{"x", 2}},
		map[string]any{"name": "obj", "value": map[string]any{"b": 1, "a": "z"}},
		map[string]any{"name": "cc", "value": "copy@b.example"},
	}))
	require.Equal(t, "to=a@b.example\nn=1000000000000000000000\nflag=true\nnone=null\nlist=[\"x\",2]\nobj={\"a\":\"z\",\"b\":1}\ncc=copy@b.example", s.Text())
	require.Equal(t, "copy@b.example", s.Inputs()["cc"])

	// Empty pieces leave no blank lines; file parts carry no text.
	s = parse(t, mutate(t, "message", "params.message.content", []any{
		map[string]any{"kind": "text", "text": ""},
		map[string]any{"kind": "file", "file": map[string]any{"uri": "https://x.example/f"}},
		map[string]any{"kind": "text", "text": "only line"},
	}))
	require.Equal(t, "only line", s.Text())
}

// TestStepTextKeepsLongNumbers: a number a float64 cannot hold shows in the step's text
// (searched, shown, compared and read by rules) with the agent's digits; rules still read
// the decoded value.
func TestStepTextKeepsLongNumbers(t *testing.T) {
	s := parse(t, mutate(t, "toolCallRequest", "params.toolCallRequest.inputs", json.RawMessage(`[`+
		`{"name":"amount","value":12345678901234567891},`+
		`{"name":"neg","value": -98765432109876543210 },`+
		`{"name":"nested","value":{"b":[12345678901234567891, 2],"a":"x"}},`+
		`{"name":"small","value":1.50e+3},`+
		`{"name":"id","value":"12345678901234567891"}]`)))
	require.Equal(t, "amount=12345678901234567891\nneg=-98765432109876543210\nnested={\"a\":\"x\",\"b\":[12345678901234567891,2]}\nsmall=1500\nid=12345678901234567891", s.Text())
	require.InDelta(t, 1.2345678901234567e19, s.Inputs()["amount"], 1e4, "rules read the number")
	exact, err := json.Marshal(s.ExactInputs())
	require.NoError(t, err)
	require.JSONEq(t, `{"amount":12345678901234567891,"neg":-98765432109876543210,"nested":{"a":"x","b":[12345678901234567891,2]},"small":1500,"id":"12345678901234567891"}`, string(exact))
	require.Contains(t, string(exact), "12345678901234567891,")
}

// TestStepTextShortNumbersUnchanged: next to a long number, or in a value with a long digit
// string (a card number), the other numbers read as they do in any other value.
func TestStepTextShortNumbersUnchanged(t *testing.T) {
	s := parse(t, mutate(t, "toolCallRequest", "params.toolCallRequest.inputs", json.RawMessage(`[`+
		`{"name":"card","value":{"num":"4111111111111111","amount":10.50,"e":1E2}},`+
		`{"name":"o","value":{"big":12345678901234567891,"f":[1.0,2.50e1]}}]`)))
	require.Equal(t, "card={\"amount\":10.5,\"e\":100,\"num\":\"4111111111111111\"}\no={\"big\":12345678901234567891,\"f\":[1,25]}", s.Text())
	m := parse(t, []byte(`{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"message":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"o":{"big":12345678901234567891,"f":1.0}}}}}}`))
	require.Equal(t, "pay\no={\"big\":12345678901234567891,\"f\":1}", m.Text())
}

// TestStepTextKeepsLongNumbersInData: data parts of AOS messages and triggers, A2A data
// parts and the MCP values the text renders (structured results, prompt arguments) show a
// number of 16 digits or more with the agent's digits, as tool inputs do; the numbers beside
// it read as in any other value, and the decoded values stay float64.
func TestStepTextKeepsLongNumbersInData(t *testing.T) {
	const data = `{"id":12345678901234567891,"amount":10.50,"e":1E2,"card":"4111111111111111"}`
	const dataText = `{"amount":10.5,"card":"4111111111111111","e":100,"id":12345678901234567891}`
	decoded := map[string]any{"id": 1.2345678901234567e19, "amount": 10.5, "e": 100.0, "card": "4111111111111111"}
	plain := `{"n":1.0}`
	mcp := func(message string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"message":` + message + `}}`)
	}
	dataPart := func(i int) func(*Step) any {
		return func(s *Step) any {
			if s.Trigger != nil {
				return s.Trigger.Trigger.Content[i].(DataPart).Data
			}
			return s.Message.Message.Content[i].(DataPart).Data
		}
	}
	a2aData := func(s *Step) any { return s.A2A.Data[0] }
	structured := func(s *Step) any { return s.MCP.Result["structuredContent"] }
	tests := []struct {
		name string
		req  []byte
		text string
		// value is what rules and the rest of the guardian read: the decoded value, which is
		// want (decoded when nil).
		value func(*Step) any
		want  any
	}{
		{"message data part", mutate(t, "message", "params.message.content", json.RawMessage(
			`[{"kind":"text","text":"see"},{"kind":"data","data":`+plain+`},{"kind":"data","data":`+data+`}]`)),
			"see\n{\"n\":1}\n" + dataText, dataPart(2), nil},
		{"message data part array", mutate(t, "message", "params.message.content", json.RawMessage(
			`[{"data":[`+data+`,12345678901234567891]}]`)),
			"[" + dataText + ",12345678901234567891]", func(s *Step) any { return s.Message.Message.Content[0].(DataPart).Data.([]any)[0] }, nil},
		{"trigger data part", mutate(t, "agentTrigger", "params.trigger.content[1].data", json.RawMessage(data)),
			"Subject: Where is my order A-10023?\n\nHi, I ordered a kettle two weeks ago and it has not arrived. Dana\n" + dataText, dataPart(1), nil},
		{"a2a data part", mutate(t, "A2A", "params.message.params.message.parts", json.RawMessage(
			`[{"kind":"data","data":`+data+`},{"kind":"text","text":"n 12345678901234567891"},{"kind":"data","data":`+plain+`}]`)),
			"n 12345678901234567891\n" + dataText + "\n{\"n\":1}", a2aData, nil},
		{"a2a inline data part", mutate(t, "A2A-inline", "params.params.message.parts[1].data", json.RawMessage(data)),
			"Where is parcel JD0146000034 for order A-10023?\n" + dataText, a2aData, nil},
		{"a2a native artifact", mutate(t, "A2A-native", "params.payload", json.RawMessage(
			`{"kind":"task","id":"t1","contextId":"c1","artifacts":[{"parts":[{"kind":"data","data":`+data+`}]}]}`)),
			dataText, a2aData, nil},
		{"mcp structured result", mcp(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}],"structuredContent":` + data + `}}`),
			"done\n" + dataText, structured, nil},
		// A text content holds the agent's characters already; a long number in it stays so.
		{"mcp text content that is JSON", mcp(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":` + strconv.Quote(data) + `}],"structuredContent":` + data + `}}`),
			data + "\n" + dataText, structured, nil},
		{"mcp prompt arguments", mcp(`{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p","arguments":{"o":` + data + `,"s":"x","f":1.0}}}`),
			"f=1\no=" + dataText + "\ns=x", func(s *Step) any { return s.MCP.Params["arguments"].(map[string]any)["o"] }, nil},
		{"mcp tool arguments and result", mcp(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"o":` + data + `}},"result":{"structuredContent":` + data + `}}`),
			"pay\no=" + dataText + "\n" + dataText, structured, nil},
		// A long number elsewhere in the content leaves the data parts as they read.
		{"a2a long number outside data", mutate(t, "A2A", "params.message.params.metadata", json.RawMessage(`{"n":12345678901234567891}`)),
			"Where is parcel JD0146000034 for order A-10023?\n" + `{"customer":"Dana Whitfield","orderId":"A-10023"}`, a2aData,
			map[string]any{"customer": "Dana Whitfield", "orderId": "A-10023"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := parse(t, tc.req)
			require.Equal(t, tc.text, s.Text())
			want := tc.want
			if want == nil {
				want = decoded
			}
			require.Equal(t, want, tc.value(s), "the decoded value is unchanged")
			s.ForgetText()
			require.Equal(t, tc.text, s.Text(), "joined again from the request")
		})
	}
}

func TestSessionHintSources(t *testing.T) {
	tests := []struct {
		name string
		msg  string
		want string
	}{
		{"mcp params _meta", `{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"message":{"jsonrpc":"2.0","method":"tools/list","params":{"_meta":{"sessionId":"m1"}}}}}`, "m1"},
		{"mcp result _meta", `{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"message":{"jsonrpc":"2.0","id":1,"result":{"tools":[],"_meta":{"sessionId":"m2"}}}}}`, "m2"},
		{"aos params _meta", `{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"_meta":{"sessionId":"m3"},"message":{"jsonrpc":"2.0","method":"tools/list"}}}`, "m3"},
		{"inline mcp", `{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"jsonrpc":"2.0","method":"tools/list","params":{"_meta":{"sessionId":"m4"}}}}`, "m4"},
		{"mcp without session", `{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"message":{"jsonrpc":"2.0","method":"tools/list","params":{"sessionId":"not-meta"}}}}`, ""},
		{"a2a without context id", `{"jsonrpc":"2.0","id":1,"method":"protocols/A2A","params":{"message":{"role":"user","parts":[]}}}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, parse(t, json.RawMessage(tc.msg)).SessionHint())
		})
	}
}

func TestMCPText(t *testing.T) {
	tests := []struct {
		name    string
		message string
		text    string
		isError bool
	}{
		{"prompt arguments", `{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p","arguments":{"b":"2","a":"1"}}}`, "a=1\nb=2", false},
		// The agent's digits, not the nearest float64.
		{"long numbers in tool arguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"amount":12345678901234567891,"n":{"x":[98765432109876543210]},"small":1.50e+3}}}`,
			"pay\namount=12345678901234567891\nn={\"x\":[98765432109876543210]}\nsmall=1500", false},
		{"resource read", `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///etc/passwd"}}`, "file:///etc/passwd", false},
		{"sampling", `{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"summarise"}}]}}`, "summarise", false},
		{"resource contents", `{"jsonrpc":"2.0","id":1,"result":{"contents":[{"uri":"file:///a","text":"file body"}]}}`, "file body", false},
		{"embedded resource", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"resource","resource":{"uri":"x","text":"inner"}}]}}`, "inner", false},
		{"structured", `{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"ok":true}}}`, `{"ok":true}`, false},
		{"tool error", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"disk full"}],"isError":true}}`, "disk full", true},
		{"rpc error", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"boom"}}`, "boom", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := parse(t, json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"message":`+tc.message+`}}`))
			require.Equal(t, tc.text, s.Text())
			require.Equal(t, tc.isError, s.IsError())
		})
	}
}
