package agentapi

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The Agent API protocol (agentscope-runtime): a request carries input messages; the
// answer is a stream of "data: <json>" events (a response, its messages and their content
// parts, each numbered by sequence_number) or, with "stream": false, the final response.

// Message types the gateway treats specially.
const (
	typeMessage             = "message"
	typeFunctionCall        = "function_call"
	typeFunctionCallOutput  = "function_call_output"
	typePluginCall          = "plugin_call"
	typeComponentCall       = "component_call"
	typeMCPCall             = "mcp_call"
	typeMCPApprovalRequest  = "mcp_approval_request"
	typeMCPApprovalResponse = "mcp_approval_response"
)

// Run statuses.
const (
	statusCreated    = "created"
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusFailed     = "failed"
	statusRejected   = "rejected"
)

// head is what the gateway reads of every event and message to route it.
type head struct {
	Seq       json.RawMessage `json:"sequence_number"`
	Object    string          `json:"object"`
	Status    string          `json:"status"`
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	MsgID     string          `json:"msg_id"`
	SessionID string          `json:"session_id"`
}

// message is a complete message (an input item, an output item, a completed message event).
type message struct {
	ID      string            `json:"id"`
	Type    string            `json:"type"`
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

// content is one content part of a message.
type content struct {
	Type string          `json:"type"`
	Text *string         `json:"text"`
	Data json.RawMessage `json:"data"`
	URL  *string         `json:"image_url"`
}

// callData is the data of a function_call, plugin_call, mcp_call or mcp_approval_request
// content part, and of their outputs.
type callData struct {
	ID          string          `json:"id"`
	CallID      string          `json:"call_id"`
	Name        string          `json:"name"`
	Arguments   json.RawMessage `json:"arguments"`
	Output      json.RawMessage `json:"output"`
	ServerLabel string          `json:"server_label"`
}

// apiError is the protocol's Error model.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes of the gateway's own failures.
const (
	codeInvalidRequest = "INVALID_REQUEST"
	codeTooLarge       = "REQUEST_TOO_LARGE"
	codeUpstream       = "UPSTREAM_UNAVAILABLE"
	codeUpstreamBad    = "UPSTREAM_INVALID_RESPONSE"
	codeGuardian       = "GUARDIAN_ERROR"
	codeUnauthorized   = "UNAUTHORIZED"
	codeRateLimited    = "RATE_LIMITED"
	codeForbidden      = "FORBIDDEN"
)

// responseObject is a response event or a non-streamed response, in the runtime's field
// order.
type responseObject struct {
	Seq         *int64          `json:"sequence_number"`
	Object      string          `json:"object"`
	Status      string          `json:"status"`
	Error       *apiError       `json:"error"`
	ID          string          `json:"id"`
	CreatedAt   int64           `json:"created_at"`
	CompletedAt *int64          `json:"completed_at"`
	Output      json.RawMessage `json:"output"`
	Usage       json.RawMessage `json:"usage"`
	SessionID   *string         `json:"session_id"`
}

// messageObject is a message the gateway writes itself (a rejection, a notice).
type messageObject struct {
	Seq      *int64            `json:"sequence_number"`
	Object   string            `json:"object"`
	Status   string            `json:"status"`
	Error    *apiError         `json:"error"`
	ID       string            `json:"id"`
	Type     string            `json:"type"`
	Role     string            `json:"role"`
	Content  []json.RawMessage `json:"content"`
	Code     *string           `json:"code"`
	Message  *string           `json:"message"`
	Usage    json.RawMessage   `json:"usage"`
	Metadata json.RawMessage   `json:"metadata"`
}

// textContent is a text content part the gateway writes itself.
type textContent struct {
	Seq    *int64  `json:"sequence_number"`
	Object string  `json:"object"`
	Status *string `json:"status"`
	Error  *string `json:"error"`
	Type   string  `json:"type"`
	Index  int     `json:"index"`
	Delta  bool    `json:"delta"`
	MsgID  string  `json:"msg_id"`
	Text   string  `json:"text"`
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func ptr[T any](v T) *T { return &v }

// errorBody is the body of a refused or failed request: a failed response, as the runtime
// reports an agent error, so one client code path reads both.
func errorBody(code, msg, sessionID string, now time.Time) []byte {
	r := responseObject{Object: "response", Status: statusFailed, Error: &apiError{Code: code, Message: msg},
		ID: newID("response_"), CreatedAt: now.Unix()}
	if sessionID != "" {
		r.SessionID = &sessionID
	}
	b, _ := json.Marshal(r)
	return b
}

var errNotObject = errors.New("not a JSON object")

// setKey returns obj (a JSON object) with its top-level member key set to val, replaced in
// place (so the other members keep their order and bytes) or appended.
func setKey(obj []byte, key string, val []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errNotObject
	}
	n := 0
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := kt.(string)
		start := int(dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		end := int(dec.InputOffset())
		n++
		if k != key {
			continue
		}
		vs := start
		for vs < end && (obj[vs] == ':' || obj[vs] == ' ' || obj[vs] == '\t' || obj[vs] == '\n' || obj[vs] == '\r') {
			vs++
		}
		out := make([]byte, 0, len(obj)-(end-vs)+len(val))
		out = append(append(append(out, obj[:vs]...), val...), obj[end:]...)
		return out, nil
	}
	i := bytes.LastIndexByte(obj, '}')
	out := make([]byte, 0, len(obj)+len(key)+len(val)+4)
	out = append(out, bytes.TrimRight(obj[:i], " \t\r\n")...)
	if n > 0 {
		out = append(out, ',')
	}
	kb, _ := json.Marshal(key)
	out = append(append(append(out, kb...), ':'), val...)
	return append(out, obj[i:]...), nil
}

// setSeq numbers an event, leaving its bytes alone when it already has that number.
func setSeq(ev []byte, h *head, seq int64) []byte {
	want := strconv.AppendInt(nil, seq, 10)
	if bytes.Equal(h.Seq, want) {
		return ev
	}
	out, err := setKey(ev, "sequence_number", want)
	if err != nil {
		return ev
	}
	return out
}

// fieldError is a malformed request, named by the JSON path of the member at fault.
type fieldError struct {
	path, msg string
}

func (e *fieldError) Error() string { return e.path + ": " + e.msg }

// request is a validated /process request.
type request struct {
	raw       []byte
	top       map[string]json.RawMessage
	input     []json.RawMessage
	items     []message
	stream    bool
	sessionID string
	userID    string
}

// parseRequest validates a /process body: an object with an "input" array of message
// objects whose content is an array of content objects. Nothing else is checked: the
// upstream owns the rest of its protocol.
func parseRequest(body []byte) (*request, error) {
	req := &request{raw: body, stream: true}
	if err := json.Unmarshal(body, &req.top); err != nil || req.top == nil {
		return nil, &fieldError{"body", "want a JSON object (" + jsonProblem(err) + ")"}
	}
	in, ok := req.top["input"]
	if !ok {
		return nil, &fieldError{"input", "required"}
	}
	if err := json.Unmarshal(in, &req.input); err != nil || req.input == nil {
		return nil, &fieldError{"input", "want an array of messages"}
	}
	req.items = make([]message, len(req.input))
	for i, raw := range req.input {
		path := fmt.Sprintf("input[%d]", i)
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return nil, &fieldError{path, "want a message object"}
		}
		for _, k := range []string{"id", "type", "role"} {
			if v, ok := fields[k]; ok && !isNull(v) && !isString(v) {
				return nil, &fieldError{path + "." + k, "want a string"}
			}
		}
		var m message
		if c, ok := fields["content"]; ok && !isNull(c) {
			var parts []json.RawMessage
			if err := json.Unmarshal(c, &parts); err != nil {
				return nil, &fieldError{path + ".content", "want an array of content parts"}
			}
			for j, p := range parts {
				var cp map[string]json.RawMessage
				if err := json.Unmarshal(p, &cp); err != nil || cp == nil {
					return nil, &fieldError{fmt.Sprintf("%s.content[%d]", path, j), "want a content object"}
				}
				if t, ok := cp["text"]; ok && !isNull(t) && !isString(t) {
					return nil, &fieldError{fmt.Sprintf("%s.content[%d].text", path, j), "want a string"}
				}
				if t, ok := cp["type"]; ok && !isNull(t) && !isString(t) {
					return nil, &fieldError{fmt.Sprintf("%s.content[%d].type", path, j), "want a string"}
				}
			}
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, &fieldError{path, err.Error()}
		}
		if m.Type == "" {
			m.Type = typeMessage
		}
		req.items[i] = m
	}
	if s, ok := req.top["stream"]; ok && !isNull(s) {
		if err := json.Unmarshal(s, &req.stream); err != nil {
			return nil, &fieldError{"stream", "want true or false"}
		}
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"session_id", &req.sessionID}, {"user_id", &req.userID}} {
		if v, ok := req.top[f.name]; ok && !isNull(v) {
			if err := json.Unmarshal(v, f.dst); err != nil {
				return nil, &fieldError{f.name, "want a string"}
			}
		}
	}
	return req, nil
}

func jsonProblem(err error) string {
	if err == nil {
		return "got null"
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
	}
	return err.Error()
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }

func isString(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '"'
}

// text returns a content part's text, and whether it is a text part.
func (c *content) text() (string, bool) {
	if c.Text == nil {
		return "", c.Type == "text"
	}
	return *c.Text, true
}

// stringOrJSON is a JSON value as text: a string's own text, anything else as JSON.
func stringOrJSON(b json.RawMessage) string {
	if len(b) == 0 || isNull(b) {
		return ""
	}
	var s string
	if isString(b) && json.Unmarshal(b, &s) == nil {
		return s
	}
	return string(b)
}
