package aos

import (
	"encoding/json"
	"time"
)

// The objects of AOS 0.1.0 §3. Optional fields are omitted when empty; required fields are
// always sent, so a value built in Go is valid on the wire once its required fields are set.
// Decoding goes through ParseStep (or the UnmarshalJSON methods of the params types), which
// validates every required field and allowed value.

// Agent describes the observed agent (§3.1).
type Agent struct {
	Name         string `json:"name"`
	ID           string `json:"id"`
	Description  string `json:"description,omitempty"`
	Instructions string `json:"instructions"`
	// URL is the agent's A2A base URL. The AOS schema requires it, the text and ASOP 1.0.0
	// make it optional (ERRATA 2).
	URL          string           `json:"url,omitempty"`
	Version      string           `json:"version"`
	Provider     AgentProvider    `json:"provider"`
	Model        *Model           `json:"model,omitempty"`
	Tools        []ToolDefinition `json:"tools,omitempty"`
	MCPServers   []MCPServer      `json:"mcpServers,omitempty"`
	Resources    []Resource       `json:"resources,omitempty"`
	Organization *Organization    `json:"organization,omitempty"`
	Metadata     map[string]any   `json:"metadata,omitempty"`
}

// AgentProvider is the organization providing the agent (§3.1.1).
type AgentProvider struct {
	Name     string         `json:"name"`
	URL      string         `json:"url"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Model is the agent's underlying LLM (§3.1.2).
type Model struct {
	Name     string      `json:"name"`
	ID       string      `json:"id"`
	Provider LlmProvider `json:"provider"`
	// Type is chat, completion or embedding in the schema; the text does not have it.
	Type          string         `json:"type,omitempty"`
	MaxTokens     int64          `json:"maxTokens,omitempty"`
	ContextWindow int64          `json:"contextWindow,omitempty"`
	StopSequences []string       `json:"stopSequences,omitempty"`
	DefaultParams map[string]any `json:"defaultParams,omitempty"`
	Metadata      map[string]any `json:"metadata,omitempty"`
}

// LlmProvider is the organization providing the LLM (§3.1.3).
type LlmProvider struct {
	Name     string         `json:"name"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// MCPServer is an MCP server available to the agent (§3.1.4).
type MCPServer struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Resource is a resource available to the agent (§3.1.5).
type Resource struct {
	Name        string         `json:"name"`
	ID          string         `json:"id"`
	Description string         `json:"description,omitempty"`
	Content     string         `json:"content"`
	MimeType    string         `json:"mimeType,omitempty"`
	Metadata    map[string]any `json:"metadata,omitempty"`
}

// ToolDefinition describes a tool the agent may call (§3.2). Arguments and Outputs are
// required but may be null, which is what a nil slice encodes to.
type ToolDefinition struct {
	Name        string                   `json:"name"`
	ID          string                   `json:"id"`
	Description string                   `json:"description,omitempty"`
	Type        string                   `json:"type"`
	Arguments   []ToolArgumentDefinition `json:"arguments"`
	Outputs     []ToolOutputDefinition   `json:"outputs"`
	Metadata    map[string]any           `json:"metadata,omitempty"`
}

// ToolArgumentDefinition describes one argument of a tool (§3.2.1).
type ToolArgumentDefinition struct {
	Name        string `json:"name"`
	ID          string `json:"id,omitempty"`
	Description string `json:"description,omitempty"`
	// Type is string, number, integer, boolean, object, array or null when set ("integer"
	// is not in the spec but JSON Schema, and so most tool schemas, use it).
	Type     string `json:"type,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
	Required bool   `json:"required"`
}

// ToolOutputDefinition describes one output of a tool (§3.2.2).
type ToolOutputDefinition struct {
	Name        string `json:"name"`
	ID          string `json:"id,omitempty"`
	Description string `json:"description,omitempty"`
	// Type takes the same values as ToolArgumentDefinition.Type.
	Type     string `json:"type,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
}

// Roles of a message sender (§3.3).
const (
	RoleUser   = "user"
	RoleAgent  = "agent"
	RoleSystem = "system"
)

// Message is one message between a user, the agent or the system (§3.3).
type Message struct {
	ID       string         `json:"id"`
	Role     string         `json:"role"`
	Content  []Part         `json:"content"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Part is one piece of content (§3.4): a TextPart, FilePart or DataPart.
type Part interface {
	// PartKind is "text", "file" or "data".
	PartKind() string
}

// TextPart is plain text content (§3.4.1).
type TextPart struct {
	Text     string         `json:"text"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// FilePart is file content (§3.4.2).
type FilePart struct {
	File     FileContent    `json:"file"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// DataPart is structured data (§3.4.3): an object (map[string]any) or an array ([]any).
type DataPart struct {
	Data     any            `json:"data"`
	Metadata map[string]any `json:"metadata,omitempty"`
	// raw is the data as the request wrote it, kept (a slice of the request) only when it
	// has a number a float64 may not hold: the step's text shows the agent's digits.
	raw json.RawMessage
}

// PartKind implements Part.
func (TextPart) PartKind() string { return "text" }

// PartKind implements Part.
func (FilePart) PartKind() string { return "file" }

// PartKind implements Part.
func (DataPart) PartKind() string { return "data" }

// MarshalJSON adds the kind discriminator.
func (p TextPart) MarshalJSON() ([]byte, error) {
	type wire TextPart
	return Marshal(struct {
		Kind string `json:"kind"`
		wire
	}{"text", wire(p)})
}

// MarshalJSON adds the kind discriminator.
func (p FilePart) MarshalJSON() ([]byte, error) {
	type wire FilePart
	return Marshal(struct {
		Kind string `json:"kind"`
		wire
	}{"file", wire(p)})
}

// MarshalJSON adds the kind discriminator.
func (p DataPart) MarshalJSON() ([]byte, error) {
	type wire DataPart
	return Marshal(struct {
		Kind string `json:"kind"`
		wire
	}{"data", wire(p)})
}

// FileContent is the file of a FilePart (§3.5): FileWithBytes or FileWithURI.
type FileContent interface {
	// FileName is the original file name, if known.
	FileName() string
}

// FileWithBytes carries the file inline, base64 encoded (§3.5.1).
type FileWithBytes struct {
	Name     string `json:"name,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
	Bytes    string `json:"bytes"`
}

// FileWithURI refers to the file by URI (§3.5.2, FileWithUri).
type FileWithURI struct {
	Name     string `json:"name,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
	URI      string `json:"uri"`
}

// FileName implements FileContent.
func (f FileWithBytes) FileName() string { return f.Name }

// FileName implements FileContent.
func (f FileWithURI) FileName() string { return f.Name }

// TriggerAutonomous is the only trigger type AOS defines.
const TriggerAutonomous = "autonomous"

// AgentTrigger is what activated the agent, other than a user prompt (§3.6).
type AgentTrigger struct {
	Type     string            `json:"type"`
	Event    AgentTriggerEvent `json:"event"`
	Content  []Part            `json:"content"`
	Metadata map[string]any    `json:"metadata,omitempty"`
}

// AgentTriggerEvent is the event behind a trigger (§3.6.1).
type AgentTriggerEvent struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// Source is a cited source (§3.7): a FileSource or SiteSource.
type Source interface {
	// SourceKind is "file" or "site".
	SourceKind() string
}

// FileSource cites a file (§3.7.1).
type FileSource struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
}

// SiteSource cites a web site (§3.7.2).
type SiteSource struct {
	URL string `json:"url"`
}

// SourceKind implements Source.
func (FileSource) SourceKind() string { return "file" }

// SourceKind implements Source.
func (SiteSource) SourceKind() string { return "site" }

// MarshalJSON adds the kind discriminator.
func (s FileSource) MarshalJSON() ([]byte, error) {
	type wire FileSource
	return Marshal(struct {
		Kind string `json:"kind"`
		wire
	}{"file", wire(s)})
}

// MarshalJSON adds the kind discriminator.
func (s SiteSource) MarshalJSON() ([]byte, error) {
	type wire SiteSource
	return Marshal(struct {
		Kind string `json:"kind"`
		wire
	}{"site", wire(s)})
}

// StepContext is the context every step carries (§3.8).
type StepContext struct {
	Agent   Agent   `json:"agent"`
	Session Session `json:"session"`
	TurnID  string  `json:"turnId"`
	StepID  string  `json:"stepId"`
	// Timestamp is ISO 8601, UTC recommended. Time is its parsed value after decoding.
	Timestamp string    `json:"timestamp"`
	Time      time.Time `json:"-"`
	User      *User     `json:"user,omitempty"`
}

// Session identifies the conversation (§3.9).
type Session struct {
	ID       string         `json:"id"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// User is the person the agent acts for (§3.10).
type User struct {
	ID           string         `json:"id"`
	Name         string         `json:"name,omitempty"`
	Email        string         `json:"email,omitempty"`
	Organization Organization   `json:"organization"`
	Metadata     map[string]any `json:"metadata,omitempty"`
}

// Organization owns an agent or employs a user (§3.11).
type Organization struct {
	ID       string         `json:"id"`
	Name     string         `json:"name,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// KnowledgeRetrievalStepParams describes a knowledge retrieval (§3.14).
type KnowledgeRetrievalStepParams struct {
	Query    string                     `json:"query,omitempty"`
	Keywords []string                   `json:"keywords,omitempty"`
	Results  []KnowledgeRetrievalResult `json:"results"`
}

// KnowledgeRetrievalResult is one retrieved piece of knowledge (§3.14.1).
type KnowledgeRetrievalResult struct {
	ID       string         `json:"id"`
	Content  string         `json:"content"`
	MimeType string         `json:"mimeType,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// ToolCallRequest is a tool call the agent is about to make (§3.15).
type ToolCallRequest struct {
	ExecutionID string              `json:"executionId"`
	ToolID      string              `json:"toolId"`
	Inputs      []ToolArgumentValue `json:"inputs"`
}

// ToolArgumentValue is one input of a tool call (§3.15.1). Value is any JSON value,
// decoded as encoding/json would into an interface.
type ToolArgumentValue struct {
	Name  string `json:"name"`
	ID    string `json:"id,omitempty"`
	Value any    `json:"value"`
	// raw is the value as the request wrote it, kept (a slice of the request, which the
	// step holds anyway) when it has a number a float64 does not hold exactly: the step's
	// text and a comparison of inputs must show the agent's digits, not Value's.
	raw json.RawMessage
}

// exact is the input's value for text and comparison: Value, with its long numbers as the
// request wrote them (exactJSON) when it has any.
func (v ToolArgumentValue) exact() any { return exactValue(v.Value, v.raw) }

// exact is the part's data for text: Data, with its long numbers as the request wrote them.
func (p DataPart) exact() any { return exactValue(p.Data, p.raw) }

// exactValue is v, decoded from raw, with its long numbers as raw has them (exactJSON); v
// itself when raw is nil, as it is for a value without such a number.
func exactValue(v any, raw json.RawMessage) any {
	if raw != nil {
		if x, ok := exactJSON(raw); ok {
			return x
		}
	}
	return v
}

// ToolCallResult is the outcome of a tool call (§4.6.1.1). Outputs may be empty, never null
// on the wire.
type ToolCallResult struct {
	Outputs []TextPart `json:"outputs"`
	IsError bool       `json:"isError"`
}

// MarshalJSON sends an empty outputs array rather than null.
func (r ToolCallResult) MarshalJSON() ([]byte, error) {
	type wire ToolCallResult
	if r.Outputs == nil {
		r.Outputs = []TextPart{}
	}
	return Marshal(wire(r))
}
