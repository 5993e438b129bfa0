package aos

import (
	"encoding/json"
	"time"
)

// The params of each method (§4). Each type decodes with full validation through its
// UnmarshalJSON method (errors are *Error values naming the JSON path under "params"), and
// encodes in the layout the AOS text describes.

// AgentTriggerParams are the params of steps/agentTrigger (§4.1).
type AgentTriggerParams struct {
	Context StepContext  `json:"context"`
	Trigger AgentTrigger `json:"trigger"`
	// Reasoning is not in AOS 0.1.0 but ASOP 1.0.0 has it.
	Reasoning string `json:"reasoning,omitempty"`
}

// KnowledgeRetrievalParams are the params of steps/knowledgeRetrieval (§4.2).
type KnowledgeRetrievalParams struct {
	Context       StepContext                  `json:"context"`
	KnowledgeStep KnowledgeRetrievalStepParams `json:"knowledgeStep"`
	Reasoning     string                       `json:"reasoning,omitempty"`
}

// MemoryParams are the params of steps/memoryStore and steps/memoryContextRetrieval (§4.3,
// §4.4).
type MemoryParams struct {
	Context   StepContext `json:"context"`
	Memory    []string    `json:"memory"`
	Reasoning string      `json:"reasoning,omitempty"`
}

// MessageParams are the params of steps/message (§4.5).
type MessageParams struct {
	Context StepContext `json:"context"`
	Message Message     `json:"message"`
	// Citations: the text names the field citation (required), the schema and the examples
	// citations (optional). Either, both (concatenated) or neither is accepted (ERRATA 5);
	// it is sent as citations.
	Citations []Source `json:"citations,omitempty"`
	Reasoning string   `json:"reasoning,omitempty"`
}

// ToolCallRequestParams are the params of steps/toolCallRequest (§4.6).
type ToolCallRequestParams struct {
	Context         StepContext     `json:"context"`
	ToolCallRequest ToolCallRequest `json:"toolCallRequest"`
	Reasoning       string          `json:"reasoning,omitempty"`
}

// ToolCallResultParams are the params of steps/toolCallResult (§4.6, second of that
// number). The text puts executionId and result directly in params; the schema nests them
// under params.toolCallResult. Both decode into this one form (ERRATA 4); it is sent in the
// text's layout.
type ToolCallResultParams struct {
	Context     StepContext    `json:"context"`
	ExecutionID string         `json:"executionId"`
	Result      ToolCallResult `json:"result"`
	Reasoning   string         `json:"reasoning,omitempty"`
	// Nested is true when the request used the schema's params.toolCallResult layout.
	Nested bool `json:"-"`
}

// MCPParams are the params of protocols/MCP (§4.8). The text wraps the MCP message in
// params.message; published examples send the MCP message itself as params. When
// params.jsonrpc is "2.0" params is the message (Inline), otherwise params.message is
// required (ERRATA 3).
type MCPParams struct {
	// Message is the MCP JSON-RPC message exactly as received.
	Message   json.RawMessage `json:"message"`
	Reasoning string          `json:"reasoning,omitempty"`
	Inline    bool            `json:"-"`
	// longNumbers is set when the message has a number of 16 digits or more, which the
	// step's text shows as Message has it (exactMessage).
	longNumbers bool

	// The decoded message. Method is empty for a response.
	Method string          `json:"-"`
	ID     json.RawMessage `json:"-"`
	// ToolName and Arguments are params.name and params.arguments of tools/call.
	ToolName  string         `json:"-"`
	Arguments map[string]any `json:"-"`
	Params    map[string]any `json:"-"`
	Result    map[string]any `json:"-"`
	Error     map[string]any `json:"-"`
	// Meta is params._meta of the AOS request in the wrapped layout.
	Meta map[string]any `json:"-"`
}

// MarshalJSON sends the layout the params were received in.
func (p MCPParams) MarshalJSON() ([]byte, error) {
	if p.Inline {
		return Marshal(p.Message)
	}
	type wire struct {
		Message   json.RawMessage `json:"message"`
		Reasoning string          `json:"reasoning,omitempty"`
		Meta      map[string]any  `json:"_meta,omitempty"`
	}
	return Marshal(wire{p.Message, p.Reasoning, p.Meta})
}

// A2AParams are the params of an A2A step (§4.7). Three layouts are accepted (ERRATA 7):
// protocols/A2A with params.message (the text); protocols/A2A with params being the A2A
// JSON-RPC message itself, as in the published examples (Inline); and the native A2A method
// names with params.payload and params.context.{from,to} (Native). A native request without
// payload is read as the A2A request posted unchanged, its params being the payload.
type A2AParams struct {
	// Message is the A2A content exactly as received: params.message, params itself
	// (Inline) or params.payload (Native).
	Message   json.RawMessage `json:"message"`
	Reasoning string          `json:"reasoning,omitempty"`
	Inline    bool            `json:"-"`
	Native    bool            `json:"-"`
	// longNumbers is set when the content has a number of 16 digits or more, which the
	// step's text shows as Message has it (exactData).
	longNumbers bool
	// Context is params.context of the native layout; From and To are its from and to
	// members (a string, or the name, id or url of an object).
	Context map[string]any `json:"-"`
	From    string         `json:"-"`
	To      string         `json:"-"`

	// What was read from the A2A content. Method is the native method name or the method of
	// a wrapped A2A JSON-RPC request.
	Method    string `json:"-"`
	Role      string `json:"-"`
	MessageID string `json:"-"`
	ContextID string `json:"-"`
	TaskID    string `json:"-"`
	// Texts are the text parts of every message and artifact found, in order; Data the
	// data parts' payloads.
	Texts []string `json:"-"`
	Data  []any    `json:"-"`
}

// MarshalJSON sends the layout the params were received in.
func (p A2AParams) MarshalJSON() ([]byte, error) {
	switch {
	case p.Inline:
		return Marshal(p.Message)
	case p.Native:
		type wire struct {
			Payload   json.RawMessage `json:"payload"`
			Context   map[string]any  `json:"context,omitempty"`
			Reasoning string          `json:"reasoning,omitempty"`
		}
		return Marshal(wire{p.Message, p.Context, p.Reasoning})
	}
	type wire struct {
		Message   json.RawMessage `json:"message"`
		Reasoning string          `json:"reasoning,omitempty"`
	}
	return Marshal(wire{p.Message, p.Reasoning})
}

// PingParams are the params of ping (§4.9). The text puts timestamp in params, the schema
// at the top level of the request; both are read, and a ping without params or timestamp is
// accepted (ERRATA 6).
type PingParams struct {
	Timestamp string         `json:"timestamp,omitempty"`
	Time      time.Time      `json:"-"`
	Timeout   int64          `json:"timeout,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	// TopLevel is true when the timestamp came from the top level of the request.
	TopLevel bool `json:"-"`
}

// bindParams validates data as the params of a method and decodes it with fn.
func bindParams(data []byte, fn func(*decoder)) error {
	if string(data) == "null" {
		return nil
	}
	d := newDecoder(data, "params", 1, CodeInvalidParams)
	d.skip()
	d.end()
	if d.err != nil {
		return d.err
	}
	if d.limit != nil {
		return d.limit
	}
	d.pos, d.nf, d.nd = 0, 0, 0
	fn(d)
	if d.err != nil {
		return d.err
	}
	return nil
}

// UnmarshalJSON decodes and validates.
func (p *AgentTriggerParams) UnmarshalJSON(b []byte) error {
	return bindParams(b, func(d *decoder) { d.agentTriggerParams(p) })
}

// UnmarshalJSON decodes and validates.
func (p *KnowledgeRetrievalParams) UnmarshalJSON(b []byte) error {
	return bindParams(b, func(d *decoder) { d.knowledgeParams(p) })
}

// UnmarshalJSON decodes and validates.
func (p *MemoryParams) UnmarshalJSON(b []byte) error {
	return bindParams(b, func(d *decoder) { d.memoryParams(p) })
}

// UnmarshalJSON decodes and validates.
func (p *MessageParams) UnmarshalJSON(b []byte) error {
	return bindParams(b, func(d *decoder) { d.messageParams(p) })
}

// UnmarshalJSON decodes and validates.
func (p *ToolCallRequestParams) UnmarshalJSON(b []byte) error {
	return bindParams(b, func(d *decoder) { d.toolCallRequestParams(p) })
}

// UnmarshalJSON decodes and validates either layout.
func (p *ToolCallResultParams) UnmarshalJSON(b []byte) error {
	return bindParams(b, func(d *decoder) { d.toolCallResultParams(p) })
}

// UnmarshalJSON decodes and validates either layout.
func (p *MCPParams) UnmarshalJSON(b []byte) error {
	return bindParams(b, func(d *decoder) { d.mcpParams(p) })
}

// UnmarshalJSON decodes and validates the protocols/A2A layouts, or the native layout when
// params.payload is present.
func (p *A2AParams) UnmarshalJSON(b []byte) error {
	return bindParams(b, func(d *decoder) { d.a2aParams(p, MethodA2A) })
}

// UnmarshalJSON decodes and validates.
func (p *PingParams) UnmarshalJSON(b []byte) error {
	return bindParams(b, func(d *decoder) { d.pingParams(p) })
}

// UnmarshalJSON decodes and validates a message with its parts.
func (m *Message) UnmarshalJSON(b []byte) error {
	return bindObject(b, func(d *decoder) { d.message(m) })
}

// UnmarshalJSON decodes and validates a trigger with its parts.
func (t *AgentTrigger) UnmarshalJSON(b []byte) error {
	return bindObject(b, func(d *decoder) { d.trigger(t) })
}

// bindObject is bindParams for an object that is not params: paths start at its root.
func bindObject(data []byte, fn func(*decoder)) error {
	if string(data) == "null" {
		return nil
	}
	d := newDecoder(data, "", 0, CodeInvalidParams)
	d.skip()
	d.end()
	if d.err != nil {
		return d.err
	}
	if d.limit != nil {
		return d.limit
	}
	d.pos, d.nf, d.nd = 0, 0, 0
	fn(d)
	if d.err != nil {
		return d.err
	}
	return nil
}
