package agentapi

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
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
// Its content is absent, null or empty in a message without parts (the protocol's
// Optional content).
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

// outputList is what the gateway reads of a final response: its output items.
type outputList struct {
	Output []json.RawMessage `json:"output"`
}

// appErrorBody is the runtime's application error: an object without "object" whose
// "error" is set.
type appErrorBody struct {
	Object *string         `json:"object"`
	Error  json.RawMessage `json:"error"`
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
	vs, ve, n := -1, -1, 0
	ok := eachMember(obj, func(name []byte, s, e int) bool {
		n++
		if string(name) == key {
			vs, ve = s, e
			return false
		}
		return true
	})
	switch {
	case !ok:
		return nil, errNotObject
	case vs >= 0:
		out := make([]byte, 0, len(obj)-(ve-vs)+len(val))
		return append(append(append(out, obj[:vs]...), val...), obj[ve:]...), nil
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
// objects whose content is an array of content objects, every object the gateway reads
// read exactly as the runtime reads it (see decodeExact). Nothing else is checked: the
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
		m, err := parseItem(raw)
		if err != nil {
			return nil, under(fmt.Sprintf("input[%d]", i), err)
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

// parseItem validates one input message; errors name the field under the message.
func parseItem(raw json.RawMessage) (message, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return message{}, &fieldError{"", "want a message object"}
	}
	if err := checkCase(raw, messageMembers); err != nil {
		return message{}, err
	}
	for _, k := range []string{"id", "type", "role"} {
		if v, ok := fields[k]; ok && !isNull(v) && !isString(v) {
			return message{}, &fieldError{k, "want a string"}
		}
	}
	if c, ok := fields["content"]; ok && !isNull(c) {
		var parts []json.RawMessage
		if err := json.Unmarshal(c, &parts); err != nil {
			return message{}, &fieldError{"content", "want an array of content parts"}
		}
		for j, p := range parts {
			path := fmt.Sprintf("content[%d]", j)
			var cp map[string]json.RawMessage
			if err := json.Unmarshal(p, &cp); err != nil || cp == nil {
				return message{}, &fieldError{path, "want a content object"}
			}
			for _, k := range []string{"text", "type"} {
				if t, ok := cp[k]; ok && !isNull(t) && !isString(t) {
					return message{}, &fieldError{path + "." + k, "want a string"}
				}
			}
		}
	}
	var m message
	if err := decodeExact(raw, &m); err != nil {
		return message{}, err
	}
	if _, err := readParts(&m); err != nil {
		return message{}, err
	}
	if m.Type == "" {
		m.Type = typeMessage
	}
	if m.Type == typeFunctionCallOutput {
		// Its output is judged: read it as the runtime will.
		if _, _, err := callOf(&m); err != nil {
			return message{}, err
		}
	}
	return m, nil
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

// Go's encoding/json matches member names to struct fields ignoring letter case (and
// picks the last of several that match); the runtime's pydantic models read only the exact
// lower-case name. A message carrying "content" and "Content", or a part carrying "text"
// and "Text", would have Vigil judge one value while the peer reads the other. So every
// object the gateway reads into a struct goes through decodeExact, which refuses a member
// whose name differs from one of the struct's fields only in letter case.

// exactObject is a struct the gateway reads with decodeExact: members lists the JSON
// names of its fields, as written in their tags (TestMembersMatchTags holds them to the tags),
// so that no reflection or cache is needed on the per-event path.
type exactObject interface {
	members() []string
}

// The member lists are read only.
var (
	headMembers     = []string{"sequence_number", "object", "status", "id", "type", "role", "msg_id", "session_id"}
	messageMembers  = []string{"id", "type", "role", "content"}
	contentMembers  = []string{"type", "text", "data", "image_url"}
	callDataMembers = []string{"id", "call_id", "name", "arguments", "output", "server_label"}
	outputMembers   = []string{"output"}
	appErrorMembers = []string{"object", "error"}
)

func (*head) members() []string         { return headMembers }
func (*message) members() []string      { return messageMembers }
func (*content) members() []string      { return contentMembers }
func (*callData) members() []string     { return callDataMembers }
func (*outputList) members() []string   { return outputMembers }
func (*appErrorBody) members() []string { return appErrorMembers }

// checkCase refuses the first member of the JSON object obj whose name differs from one
// of names only in letter case (as strings.EqualFold and encoding/json fold them: "Text",
// "TEXT", "ſerver_label"). The error is a *fieldError whose path is the member's name.
func checkCase(obj []byte, names []string) error {
	if i := skipSpace(obj, 0); i >= len(obj) || obj[i] != '{' {
		return errNotObject
	}
	var err error
	// A malformed object stops the scan early: json.Unmarshal, which follows, refuses it.
	eachMember(obj, func(name []byte, _, _ int) bool {
		k := string(name)
		for _, n := range names {
			if k != n && strings.EqualFold(k, n) {
				err = &fieldError{k, fmt.Sprintf("differs from %q only in letter case (the protocol reads only %q)", n, n)}
				return false
			}
		}
		return true
	})
	return err
}

// eachMember calls fn with each top-level member of the JSON object obj, in order: its
// name (unescaped) and the span of its value, until fn returns false. It reports false when
// obj is not an object or is malformed where it looked. It runs on every upstream event,
// so it scans by hand rather than through a json.Decoder (several times slower); for valid
// JSON it finds exactly the members encoding/json does.
func eachMember(obj []byte, fn func(name []byte, vs, ve int) bool) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	if i = skipSpace(obj, i+1); i < len(obj) && obj[i] == '}' {
		return true
	}
	for i < len(obj) && obj[i] == '"' {
		ke := skipString(obj, i)
		if ke < 0 {
			return false
		}
		name := obj[i+1 : ke-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			// An escaped name ("Te\u0078t") counts as the name it spells.
			var s string
			if json.Unmarshal(obj[i:ke], &s) != nil {
				return false
			}
			name = []byte(s)
		}
		if i = skipSpace(obj, ke); i >= len(obj) || obj[i] != ':' {
			return false
		}
		vs := skipSpace(obj, i+1)
		ve := skipValue(obj, vs)
		if ve <= vs {
			return false
		}
		if !fn(name, vs, ve) {
			return true
		}
		switch i = skipSpace(obj, ve); {
		case i >= len(obj):
			return false
		case obj[i] == '}':
			return true
		case obj[i] != ',':
			return false
		}
		i = skipSpace(obj, i+1)
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] (a quote), -1 when it
// does not end.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index after the value starting at b[i], -1 when it does not end.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r', ',', '}', ']':
			return i
		}
		i++
	}
	return i
}

// decodeExact reads the JSON object b into the struct v points to, as the runtime reads
// it: a member whose name differs from a field's only in letter case is refused, not read.
func decodeExact(b []byte, v exactObject) error {
	if err := checkCase(b, v.members()); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// under returns err with its field path under path (a *fieldError's path joined, any other
// error named at path).
func under(path string, err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		switch {
		case fe.path == "":
			return &fieldError{path, fe.msg}
		case strings.HasPrefix(fe.path, "["):
			return &fieldError{path + fe.path, fe.msg}
		}
		return &fieldError{path + "." + fe.path, fe.msg}
	}
	if errors.Is(err, errNotObject) {
		return &fieldError{path, "want an object"}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &fieldError{path + "." + te.Field, "want " + jsonKind(te.Type) + ", not " + te.Value}
	}
	return &fieldError{path, jsonProblem(err)}
}

// jsonKind names the JSON value a Go type reads.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// readParts reads a message's content parts, each an object read exactly.
func readParts(m *message) ([]content, error) {
	parts := make([]content, len(m.Content))
	for i, raw := range m.Content {
		if err := decodeExact(raw, &parts[i]); err != nil {
			return nil, under(fmt.Sprintf("content[%d]", i), err)
		}
	}
	return parts, nil
}

// readMessage reads a complete message the upstream sent (an output item, a completed
// message event) and its content parts, exactly as the runtime's client would.
func readMessage(raw []byte) (message, error) {
	var m message
	if err := decodeExact(raw, &m); err != nil {
		return message{}, err
	}
	if _, err := readParts(&m); err != nil {
		return message{}, err
	}
	return m, nil
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
