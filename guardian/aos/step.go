package aos

import "encoding/json"

// Step is one decoded and validated AOS request: a step, a protocol message or a ping.
// Exactly one of the typed params pointers is set, matching Kind.
type Step struct {
	Method string
	Kind   Kind
	// ID is the request id as raw JSON; nil for a notification (ERRATA 14).
	ID json.RawMessage
	// Raw is the request exactly as received, unknown fields included.
	Raw json.RawMessage
	// Params is the params member as received (nil when absent).
	Params json.RawMessage
	// Context is the StepContext; nil for MCP, A2A and ping.
	Context *StepContext

	Trigger    *AgentTriggerParams
	Knowledge  *KnowledgeRetrievalParams
	Memory     *MemoryParams // memoryStore and memoryContextRetrieval
	Message    *MessageParams
	ToolCall   *ToolCallRequestParams
	ToolResult *ToolCallResultParams
	MCP        *MCPParams
	A2A        *A2AParams
	Ping       *PingParams

	// text is Text() as ParseStep joined it (hasText); nothing changes a parsed step's
	// params afterwards. A Step built by hand joins its text on each call.
	text    string
	hasText bool
	// sessionField is SessionField as ParseStep found it (an A2A contextId's path is known
	// only while decoding).
	sessionField string
}

// IsNotification reports whether the request carried no id: it is processed and stored but
// gets no response body.
func (s *Step) IsNotification() bool { return s.ID == nil }
