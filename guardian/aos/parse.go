package aos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Decoding a request body:
//
//	msgs, batch, err := aos.SplitBody(body) // -32700, or -32600 for an empty batch
//	for _, m := range msgs {
//		step, err := aos.ParseStep(m)       // -32700, -32600, -32601 or -32602, path in err.Data
//		...                                 // on error, answer with aos.IDOf(m), null for -32700
//	}
//
// A Step refers to the bytes it was parsed from (Raw, ID, Params and the raw protocol
// messages are sub-slices): do not reuse the body buffer while the step is in use.

// SplitBody splits a request body into its requests: one object, or the elements of a
// batch array. It checks the JSON syntax of a batch (-32700 "Parse error"); a single object
// is returned as it is, whitespace and all, since ParseStep checks its syntax anyway, in the
// same pass that reads it (and reports -32700 with the same offset). An empty batch, a
// batch of more than MaxElements requests, or a body that is neither an object nor an array
// is one -32600 error. Batch elements that are not requests are returned as they are, for
// ParseStep to answer each.
func SplitBody(body []byte) (msgs []json.RawMessage, batch bool, err *Error) {
	d := decoder{buf: body, noLimits: true}
	d.ws()
	if d.pos == len(body) {
		d.syntaxErr("empty body")
		return nil, false, d.err
	}
	if body[d.pos] == '{' {
		return []json.RawMessage{body}, false, nil
	}
	if body[d.pos] != '[' {
		// A scalar: a syntax error comes first, then the -32600.
		start := d.pos
		d.skip()
		d.end()
		if d.err != nil {
			return nil, false, d.err
		}
		return nil, false, fieldError(CodeInvalidRequest, "", "a request must be a JSON object, not "+kindName(body[start]))
	}
	d.pos++
	d.push(true)
	if d.cur() == ']' {
		d.pos++
		d.end()
		if d.err != nil {
			return nil, true, d.err
		}
		return nil, true, fieldError(CodeInvalidRequest, "", "empty batch")
	}
	for {
		d.ws()
		start := d.pos
		d.skip()
		if d.err != nil {
			return nil, true, d.err
		}
		msgs = append(msgs, body[start:d.pos])
		if len(msgs) > MaxElements {
			return nil, true, fieldError(CodeInvalidRequest, "", "a batch may hold at most "+strconv.Itoa(MaxElements)+" requests")
		}
		switch d.cur() {
		case ',':
			d.pos++
			continue
		case ']':
			d.pos++
			d.end()
			if d.err != nil {
				return nil, true, d.err
			}
			return msgs, true, nil
		}
		d.syntaxErr("expected ',' or ']' in batch")
		return nil, true, d.err
	}
}

// envelope is the top level of a request: the raw value of each member that matters.
type envelope struct {
	object                                 bool
	jsonrpc, id, method, params, timestamp []byte
}

// envelope reads the top-level object, skipping (and checking) member values. Syntax
// errors go to d.err, limit violations to d.limit.
func (d *decoder) envelope() (e envelope) {
	if d.cur() != '{' {
		d.skip()
		d.end()
		return e
	}
	e.object = true
	d.pos++
	d.push(false)
	for {
		c := d.cur()
		if c == '}' {
			d.pos++
			d.pop()
			break
		}
		if d.stack[0].n > 0 {
			if c != ',' {
				d.syntaxErr("expected ',' or '}' in object")
				return e
			}
			d.pos++
		}
		key := d.readKey()
		if d.err != nil {
			return e
		}
		d.ws()
		start := d.pos
		d.skip()
		if d.err != nil {
			return e
		}
		v := d.buf[start:d.pos]
		switch string(key) {
		case "jsonrpc":
			e.jsonrpc = v
		case "id":
			e.id = v
		case "method":
			e.method = v
		case "params":
			e.params = v
		case "timestamp":
			e.timestamp = v
		}
	}
	d.end()
	return e
}

func validID(id []byte) bool {
	switch c := id[0]; {
	case c == '"', c == 'n', c == '-', isDigit(c):
		return true
	}
	return false
}

// stringValue decodes a raw JSON string value; ok is false for any other value.
func stringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	for _, c := range inner {
		if c == '\\' || c >= 0x80 {
			return string(unquote(inner)), true
		}
	}
	return string(inner), true
}

// kindOf maps a method to its step kind.
func kindOf(method string) (Kind, bool) {
	switch method {
	case MethodAgentTrigger:
		return KindTrigger, true
	case MethodKnowledgeRetrieval:
		return KindKnowledge, true
	case MethodMemoryStore:
		return KindMemoryStore, true
	case MethodMemoryContextRetrieval:
		return KindMemoryRetrieval, true
	case MethodMessage:
		return KindMessage, true
	case MethodToolCallRequest:
		return KindToolCall, true
	case MethodToolCallResult:
		return KindToolResult, true
	case MethodA2A, "message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe",
		"tasks/pushNotificationConfig/get", "tasks/pushNotificationConfig/set":
		return KindA2A, true
	case MethodMCP:
		return KindMCP, true
	case MethodPing:
		return KindPing, true
	}
	return "", false
}

// ParseStep validates one JSON-RPC request and decodes its params. Checks run in order:
// JSON syntax (-32700), size and nesting limits, the envelope (-32600: jsonrpc exactly
// "2.0", method a string, id a string, number or null, params an object when present),
// the method (-32601, data {"method": …}), then the params (-32602, data FieldError with
// the JSON path, e.g. params.message.content[0].text).
//
// An absent id makes the step a notification (ID nil); "id":null is kept as the raw null.
//
// The Step's strings may share msg's memory, so msg must not change afterwards; and what
// keeps one of them beyond the request (a cache key, a session's history) should clone it,
// or it keeps all of msg alive.
func ParseStep(msg json.RawMessage) (*Step, *Error) {
	return parseStep(msg, false)
}

// ParseStoredStep is ParseStep for a request the guardian stored earlier, for backtests
// and rule tests by seq: a step it accepted then is read the same way although it would be
// refused now (an empty context.session.id, stored as it was before it was refused; its
// stored row names the session it went to).
func ParseStoredStep(msg json.RawMessage) (*Step, *Error) {
	return parseStep(msg, true)
}

func parseStep(msg json.RawMessage, stored bool) (*Step, *Error) {
	var d decoder
	d.stored = stored
	d.buf = msg
	d.share = true
	d.code = CodeInvalidRequest
	e := d.envelope()
	if d.err != nil {
		return nil, d.err
	}
	if !e.object {
		return nil, fieldError(CodeInvalidRequest, "", "a request must be a JSON object, not "+kindName(msg[firstNonSpace(msg)]))
	}
	if d.limit != nil {
		return nil, d.limit
	}
	if e.jsonrpc == nil {
		return nil, fieldError(CodeInvalidRequest, "jsonrpc", "required")
	}
	if string(e.jsonrpc) != `"2.0"` {
		if v, _ := stringValue(e.jsonrpc); v != "2.0" {
			return nil, fieldError(CodeInvalidRequest, "jsonrpc", `must be "2.0"`)
		}
	}
	if e.id != nil && !validID(e.id) {
		return nil, fieldError(CodeInvalidRequest, "id", "must be a string, a number or null, not "+kindName(e.id[0]))
	}
	if e.method == nil {
		return nil, fieldError(CodeInvalidRequest, "method", "required")
	}
	method, ok := stringValue(e.method)
	if !ok {
		return nil, fieldError(CodeInvalidRequest, "method", "must be a string, not "+kindName(e.method[0]))
	}
	params := e.params
	if params != nil {
		switch params[0] {
		case '{', '[':
		case 'n':
			params = nil // null params: as if absent
		default:
			return nil, fieldError(CodeInvalidRequest, "params", "must be an object, not "+kindName(params[0]))
		}
	}
	kind, ok := kindOf(method)
	if !ok {
		return nil, &Error{Code: CodeMethodNotFound, Message: "Method not found", Data: map[string]any{"method": method}}
	}
	if params != nil && params[0] == '[' {
		return nil, fieldError(CodeInvalidParams, "params", "must be an object, not an array")
	}
	s := &Step{Method: method, Kind: kind, ID: echoID(e.id), Raw: msg, Params: params}
	if params == nil && kind != KindPing {
		return nil, fieldError(CodeInvalidParams, "params", "required")
	}

	d.buf, d.pos, d.nf, d.nd = params, 0, 0, 0
	d.base, d.baseDepth, d.code = "params", 1, CodeInvalidParams
	switch kind {
	case KindTrigger:
		p := new(AgentTriggerParams)
		d.agentTriggerParams(p)
		s.Trigger, s.Context = p, &p.Context
	case KindKnowledge:
		p := new(KnowledgeRetrievalParams)
		d.knowledgeParams(p)
		s.Knowledge, s.Context = p, &p.Context
	case KindMemoryStore, KindMemoryRetrieval:
		p := new(MemoryParams)
		d.memoryParams(p)
		s.Memory, s.Context = p, &p.Context
	case KindMessage:
		p := new(MessageParams)
		d.messageParams(p)
		s.Message, s.Context = p, &p.Context
	case KindToolCall:
		p := new(ToolCallRequestParams)
		d.toolCallRequestParams(p)
		s.ToolCall, s.Context = p, &p.Context
	case KindToolResult:
		p := new(ToolCallResultParams)
		d.toolCallResultParams(p)
		s.ToolResult, s.Context = p, &p.Context
	case KindMCP:
		p := new(MCPParams)
		d.mcpParams(p)
		s.MCP = p
	case KindA2A:
		p := new(A2AParams)
		d.a2aParams(p, method)
		s.A2A = p
	case KindPing:
		p := new(PingParams)
		if params != nil {
			d.pingParams(p)
		}
		if d.err == nil && p.Timestamp == "" && e.timestamp != nil && string(e.timestamp) != "null" {
			// ERRATA 6: the schema's top-level timestamp.
			d.buf, d.pos, d.nf, d.nd = e.timestamp, 0, 0, 0
			d.base, d.baseDepth = "timestamp", 0
			p.Timestamp, p.Time = d.timestamp()
			p.TopLevel = true
		}
		s.Ping = p
	}
	if d.err != nil {
		return nil, d.err
	}
	if kind == KindMCP || kind == KindA2A {
		if err := s.checkProtocolIDs(d.a2aContext); err != nil {
			return nil, err
		}
	} else if s.Context != nil && s.Context.Session.ID != "" {
		s.sessionField = contextSessionField
	}
	if id := s.SessionHint(); id == "." || id == ".." {
		// Browsers resolve such a path segment (also as %2E%2E), so the console could
		// never open the session: it is refused rather than stored unreachable.
		return nil, fieldError(CodeInvalidParams, s.SessionField(), sessionDots)
	}
	// The rules, the history and the stored row all read the text; join it once.
	s.text, s.hasText = s.joinText(), true
	return s, nil
}

// sessionDots is why a session id "." or ".." is refused.
const sessionDots = `must not be "." or "..": no URL can name such a session`

// sessionEmpty is why an empty context.session.id is refused.
const sessionEmpty = "must not be empty: it names the step's session"

func firstNonSpace(b []byte) int {
	for i, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return 0
}

// IDOf returns the id of a request when it can be read and is a string, number or null,
// else the JSON null an error response carries (JSON-RPC 2.0 §5).
func IDOf(msg json.RawMessage) json.RawMessage {
	var d decoder
	d.buf = msg
	d.noLimits = true
	e := d.envelope()
	if d.err != nil || !e.object || e.id == nil || !validID(e.id) {
		return json.RawMessage("null")
	}
	return echoID(e.id)
}

// echoID is the id a response echoes: the request's bytes, except that a string id with
// invalid UTF-8 has each run of it replaced by U+FFFD, as a JSON decoder reads it. The decoder accepts
// such strings as encoding/json does, but what Vigil sends must be valid JSON text (RFC
// 8259 §8.1), or a strict client cannot read the answer at all.
func echoID(id json.RawMessage) json.RawMessage {
	if id == nil || id[0] != '"' || utf8.Valid(id) {
		return id
	}
	return bytes.ToValidUTF8(id, []byte("\uFFFD"))
}

// IsNotification reports whether msg is a well-formed JSON object without an id member: a
// JSON-RPC notification, which gets no response even when its params are invalid.
func IsNotification(msg json.RawMessage) bool {
	var d decoder
	d.buf = msg
	d.noLimits = true
	e := d.envelope()
	return d.err == nil && e.object && e.id == nil
}

// NewModifiedRequest builds the modifiedRequest of a modify decision: the whole JSON-RPC
// request with the step's id and method and the new params (ERRATA 10). The result must
// itself be a valid request for the method; the error says why when it is not.
func NewModifiedRequest(s *Step, params json.RawMessage) (json.RawMessage, error) {
	if s == nil {
		return nil, errors.New("aos: modified request: no step")
	}
	d := decoder{buf: params, base: "params", baseDepth: 1, code: CodeInvalidParams}
	d.ws()
	if d.pos == len(params) || params[d.pos] != '{' {
		return nil, errors.New("aos: modified request: params must be a JSON object")
	}
	d.skip()
	d.end()
	if d.err != nil {
		return nil, fmt.Errorf("aos: modified request: params: %w", d.err)
	}
	method, err := json.Marshal(s.Method)
	if err != nil {
		return nil, fmt.Errorf("aos: modified request: %w", err)
	}
	out := make([]byte, 0, len(params)+len(s.ID)+len(method)+48)
	out = append(out, `{"jsonrpc":"2.0",`...)
	if s.ID != nil {
		out = append(out, `"id":`...)
		out = append(out, s.ID...)
		out = append(out, ',')
	}
	out = append(out, `"method":`...)
	out = append(out, method...)
	out = append(out, `,"params":`...)
	out = append(out, params...)
	out = append(out, '}')
	if _, perr := ParseStep(out); perr != nil {
		return nil, fmt.Errorf("aos: modified request is invalid: %w", perr)
	}
	return out, nil
}
