// Package aos holds the AOS 0.1.0 wire types (ASOP 1.0.0 shares the wire format), their
// decoding and validation, and a small client for agents written in Go.
//
// The guardian is liberal in what it accepts (see shared/spec/ERRATA.md) and strict in what
// it sends: every answer is a JSON-RPC 2.0 response built from the types in this file.
package aos

import (
	"encoding/json"
	"fmt"
)

// Method names. ASOP 1.0.0 uses the same names.
const (
	MethodAgentTrigger           = "steps/agentTrigger"
	MethodKnowledgeRetrieval     = "steps/knowledgeRetrieval"
	MethodMemoryStore            = "steps/memoryStore"
	MethodMemoryContextRetrieval = "steps/memoryContextRetrieval"
	MethodMessage                = "steps/message"
	MethodToolCallRequest        = "steps/toolCallRequest"
	MethodToolCallResult         = "steps/toolCallResult"
	MethodA2A                    = "protocols/A2A"
	MethodMCP                    = "protocols/MCP"
	MethodPing                   = "ping"
)

// A2AMethods are the native A2A method names accepted as A2A steps (ERRATA 7).
var A2AMethods = []string{
	"message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe",
	"tasks/pushNotificationConfig/get", "tasks/pushNotificationConfig/set",
}

// Kind is the coarse category of a step, used by rules, storage and the console.
type Kind string

// The kinds of step.
const (
	KindTrigger         Kind = "trigger"
	KindMessage         Kind = "message"
	KindKnowledge       Kind = "knowledge"
	KindMemoryStore     Kind = "memoryStore"
	KindMemoryRetrieval Kind = "memoryRetrieval"
	KindToolCall        Kind = "toolCall"
	KindToolResult      Kind = "toolResult"
	KindMCP             Kind = "mcp"
	KindA2A             Kind = "a2a"
	KindPing            Kind = "ping"
)

// Decision is the guardian's answer to a step.
type Decision string

// The decisions AOS defines.
const (
	Allow  Decision = "allow"
	Deny   Decision = "deny"
	Modify Decision = "modify"
)

// JSON-RPC 2.0 and AOS error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// Server-defined range -32000..-32099.
	CodeRequestTooLarge = -32001
	CodeUnavailable     = -32002
	CodeRateLimited     = -32003
	CodeUnauthorized    = -32004
)

// Error is a JSON-RPC error object. It implements error so it can travel through Go code.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("jsonrpc %d: %s", e.Code, e.Message) }

// FieldError is the Data of an invalid-params error: the JSON path of the offending field.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// Request is one JSON-RPC request as it appears on the wire. ID is kept as raw JSON so large
// integers come back unchanged (ERRATA 13); a nil ID means a notification (ERRATA 14).
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// Response is one JSON-RPC response. Exactly one of Result and Error is set.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Result is the AOSSuccessResult of every step method.
type Result struct {
	Decision   Decision       `json:"decision"`
	Reasoning  string         `json:"reasoning,omitempty"`
	ReasonCode []string       `json:"reasonCode,omitempty"`
	Message    string         `json:"message"`
	Data       map[string]any `json:"data,omitempty"`
	// ModifiedRequest is the whole JSON-RPC request with the same id and method and modified
	// params (ERRATA 10); set only when Decision is modify.
	ModifiedRequest json.RawMessage `json:"modifiedRequest,omitempty"`
}

// PingResult answers ping.
type PingResult struct {
	Status    string         `json:"status"`
	Version   string         `json:"version"`
	Timestamp string         `json:"timestamp"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}
