package aap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The AAP v3 shapes the gateway reads and rewrites. Objects keep the members the gateway
// does not know as raw JSON, so what it forwards is what the client sent, less what it had
// to change: a rule's redaction, a trust flag.

// object is a JSON object decoded one level deep, in member order.
type object struct {
	keys []string
	vals map[string]json.RawMessage
}

func parseObject(b []byte, field string) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %w", fieldName(field), err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%s: must be an object", fieldName(field))
	}
	o := &object{vals: map[string]json.RawMessage{}}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: invalid JSON: %w", fieldName(field), err)
		}
		k, _ := kt.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: invalid JSON: %w", fieldName(joinField(field, k)), err)
		}
		if _, dup := o.vals[k]; !dup {
			o.keys = append(o.keys, k)
		}
		o.vals[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %w", fieldName(field), err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: invalid JSON: data after the object", fieldName(field))
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("%s: invalid JSON: data after the object", fieldName(field))
	}
	return o, nil
}

func fieldName(f string) string {
	if f == "" {
		return "body"
	}
	return f
}

func joinField(base, k string) string {
	if base == "" {
		return k
	}
	return base + "." + k
}

func (o *object) has(k string) bool { _, ok := o.vals[k]; return ok }

func (o *object) raw(k string) json.RawMessage { return o.vals[k] }

// set replaces or appends a member; a nil value removes it.
func (o *object) set(k string, v json.RawMessage) {
	if v == nil {
		if _, ok := o.vals[k]; ok {
			delete(o.vals, k)
			for i, kk := range o.keys {
				if kk == k {
					o.keys = append(o.keys[:i], o.keys[i+1:]...)
					break
				}
			}
		}
		return
	}
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *object) setString(k, v string) { o.set(k, mustJSON(v)) }

func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(o.vals[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (o *object) bytes() json.RawMessage {
	b, _ := o.MarshalJSON()
	return b
}

// str reads a string member: ok false when absent, an error when present and not a string
// (or empty while required).
func (o *object) str(field, k string, required bool) (string, error) {
	v, ok := o.vals[k]
	if !ok {
		if required {
			return "", fmt.Errorf("%s: required", joinField(field, k))
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf("%s: must be a string", joinField(field, k))
	}
	if required && s == "" {
		return "", fmt.Errorf("%s: must not be empty", joinField(field, k))
	}
	return s, nil
}

// strPresent reads a string member that must be present but may be empty.
func (o *object) strPresent(field, k string) (string, error) {
	if !o.has(k) {
		return "", fmt.Errorf("%s: required", joinField(field, k))
	}
	return o.str(field, k, false)
}

// array reads an array member as raw elements; nil when absent.
func (o *object) array(field, k string) ([]json.RawMessage, error) {
	v, ok := o.vals[k]
	if !ok || isNull(v) {
		return nil, nil
	}
	var a []json.RawMessage
	if err := json.Unmarshal(v, &a); err != nil {
		return nil, fmt.Errorf("%s: must be an array", joinField(field, k))
	}
	return a, nil
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("aap: encode %T: %v", v, err)) // only built-in types get here
	}
	return b
}

// block is one content block of a message: text, thinking, tool_use or image.
type block struct {
	obj  *object
	typ  string
	text string // text of a text block, thinking of a thinking block, url of an image
}

// content is a message's content: a plain string, or blocks.
type content struct {
	isString bool
	str      string
	blocks   []block
}

func parseContent(field string, raw json.RawMessage) (content, error) {
	if raw == nil {
		return content{}, fmt.Errorf("%s: required", field)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return content{isString: true, str: s}, nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return content{}, fmt.Errorf("%s: must be a string or an array of content blocks", field)
	}
	c := content{blocks: make([]block, 0, len(elems))}
	for i, e := range elems {
		f := fmt.Sprintf("%s[%d]", field, i)
		o, err := parseObject(e, f)
		if err != nil {
			return content{}, err
		}
		typ, err := o.str(f, "type", true)
		if err != nil {
			return content{}, err
		}
		b := block{obj: o, typ: typ}
		switch typ {
		case "text":
			b.text, err = o.strPresent(f, "text")
		case "thinking":
			b.text, err = o.str(f, "thinking", false)
		case "image":
			b.text, err = o.str(f, "url", true)
		case "tool_use":
			_, err = parseToolCall(o, f)
		default:
			err = fmt.Errorf("%s.type: must be text, thinking, tool_use or image, got %q", f, typ)
		}
		if err != nil {
			return content{}, err
		}
		c.blocks = append(c.blocks, b)
	}
	return c, nil
}

func (c content) marshal() json.RawMessage {
	if c.isString {
		return mustJSON(c.str)
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, bl := range c.blocks {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(bl.obj.bytes())
	}
	b.WriteByte(']')
	return b.Bytes()
}

// texts returns the text of the content's text blocks (the string itself for a string).
func (c content) texts() []string {
	if c.isString {
		return []string{c.str}
	}
	var out []string
	for _, b := range c.blocks {
		if b.typ == "text" {
			out = append(out, b.text)
		}
	}
	return out
}

// withTexts replaces the text of the text blocks in order; a missing replacement empties the
// block, and extra replacements are ignored.
func (c content) withTexts(ts []string) content {
	if c.isString {
		if len(ts) > 0 {
			c.str = ts[0]
		} else {
			c.str = ""
		}
		return c
	}
	out := content{blocks: make([]block, len(c.blocks))}
	i := 0
	for j, b := range c.blocks {
		if b.typ == "text" {
			t := ""
			if i < len(ts) {
				t = ts[i]
			}
			i++
			o := cloneObject(b.obj)
			o.setString("text", t)
			b = block{obj: o, typ: b.typ, text: t}
		}
		out.blocks[j] = b
	}
	return out
}

// replaced is the content with all its text replaced by one text: the guardian's message in
// place of a withheld message.
func (c content) replaced(text string) content {
	if c.isString {
		return content{isString: true, str: text}
	}
	out := content{}
	done := false
	for _, b := range c.blocks {
		if b.typ != "text" {
			out.blocks = append(out.blocks, b)
			continue
		}
		if done {
			continue
		}
		o := cloneObject(b.obj)
		o.setString("text", text)
		out.blocks = append(out.blocks, block{obj: o, typ: "text", text: text})
		done = true
	}
	if !done {
		o := &object{vals: map[string]json.RawMessage{}}
		o.setString("type", "text")
		o.setString("text", text)
		out.blocks = append(out.blocks, block{obj: o, typ: "text", text: text})
	}
	return out
}

func cloneObject(o *object) *object {
	c := &object{keys: append([]string(nil), o.keys...), vals: make(map[string]json.RawMessage, len(o.vals))}
	for k, v := range o.vals {
		c.vals[k] = v
	}
	return c
}

// toolCall is a tool call: a tool_call event or a tool_use block.
type toolCall struct {
	ID    string
	Name  string
	Input json.RawMessage
}

func parseToolCall(o *object, field string) (toolCall, error) {
	var tc toolCall
	var err error
	if tc.ID, err = o.str(field, "toolCallId", true); err != nil {
		return tc, err
	}
	if tc.Name, err = o.str(field, "name", true); err != nil {
		return tc, err
	}
	tc.Input = o.raw("input")
	if tc.Input == nil || isNull(tc.Input) {
		tc.Input = json.RawMessage("{}")
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(tc.Input, &in); err != nil {
		return tc, fmt.Errorf("%s.input: must be an object", field)
	}
	return tc, nil
}

// message is one message of a request or an answer.
type message struct {
	obj  *object
	role string
	// content for system, user, assistant and tool messages.
	content content
	// toolCallID for tool and tool_permission messages.
	toolCallID string
}

// parseMessage reads a message and checks it against the roles allowed where it appears.
func parseMessage(raw json.RawMessage, field string, roles ...string) (message, error) {
	o, err := parseObject(raw, field)
	if err != nil {
		return message{}, err
	}
	role, err := o.str(field, "role", true)
	if err != nil {
		return message{}, err
	}
	allowed := false
	for _, r := range roles {
		allowed = allowed || r == role
	}
	if !allowed {
		return message{}, fmt.Errorf("%s.role: must be one of %v, got %q", field, roles, role)
	}
	m := message{obj: o, role: role}
	switch role {
	case "system", "user", "assistant":
		m.content, err = parseContent(field+".content", o.raw("content"))
	case "tool":
		if m.toolCallID, err = o.str(field, "toolCallId", true); err == nil {
			m.content, err = parseContent(field+".content", o.raw("content"))
		}
	case "tool_permission":
		if m.toolCallID, err = o.str(field, "toolCallId", true); err == nil {
			var granted bool
			if gerr := json.Unmarshal(o.raw("granted"), &granted); gerr != nil || o.raw("granted") == nil {
				err = fmt.Errorf("%s.granted: must be true or false", field)
			} else if _, rerr := o.str(field, "reason", false); rerr != nil {
				err = rerr
			}
		}
	}
	return m, err
}

// withContent is the message with new content.
func (m message) withContent(c content) message {
	o := cloneObject(m.obj)
	o.set("content", c.marshal())
	m.obj, m.content = o, c
	return m
}

var errEmptyMessages = errors.New("messages: must hold at least one message")

// toolRef is an entry of agent.tools: a server tool enabled for the session.
type toolRef struct {
	Name  string
	Trust bool
}

// A session keeps the names of its tools (server tools enabled, client tools declared) for
// its whole life in the gateway's session cache, so the lists are bounded: MCP's own
// advice is names of at most 128 characters, and an agent with hundreds of tools is rare.
const (
	maxTools        = 512
	maxToolNameSize = 256 // bytes
)

// checkToolCount refuses a list past maxTools.
func checkToolCount(field string, n int) error {
	if n > maxTools {
		return fmt.Errorf("%s: at most %d tools, got %d", field, maxTools, n)
	}
	return nil
}

// checkToolName refuses a name past maxToolNameSize.
func checkToolName(field string, i int, name string) error {
	if len(name) > maxToolNameSize {
		return fmt.Errorf("%s[%d].name: at most %d bytes, got %d", field, i, maxToolNameSize, len(name))
	}
	return nil
}

// parseToolRefs reads agent.tools.
func parseToolRefs(field string, elems []json.RawMessage) ([]toolRef, []*object, error) {
	if err := checkToolCount(field, len(elems)); err != nil {
		return nil, nil, err
	}
	refs := make([]toolRef, len(elems))
	objs := make([]*object, len(elems))
	for i, e := range elems {
		f := fmt.Sprintf("%s[%d]", field, i)
		o, err := parseObject(e, f)
		if err != nil {
			return nil, nil, err
		}
		name, err := o.str(f, "name", true)
		if err != nil {
			return nil, nil, err
		}
		if err := checkToolName(field, i, name); err != nil {
			return nil, nil, err
		}
		trust := false
		if v := o.raw("trust"); v != nil && !isNull(v) {
			if err := json.Unmarshal(v, &trust); err != nil {
				return nil, nil, fmt.Errorf("%s.trust: must be true or false", f)
			}
		}
		refs[i], objs[i] = toolRef{Name: name, Trust: trust}, o
	}
	return refs, objs, nil
}

// parseToolSpecs reads client-side tool declarations and returns their names.
func parseToolSpecs(field string, elems []json.RawMessage) ([]string, error) {
	if err := checkToolCount(field, len(elems)); err != nil {
		return nil, err
	}
	names := make([]string, len(elems))
	for i, e := range elems {
		f := fmt.Sprintf("%s[%d]", field, i)
		o, err := parseObject(e, f)
		if err != nil {
			return nil, err
		}
		if names[i], err = o.str(f, "name", true); err != nil {
			return nil, err
		}
		if err := checkToolName(field, i, names[i]); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// agentConfig is the agent member of a session or turn request.
type agentConfig struct {
	obj     *object
	name    string
	tools   []toolRef
	hasTool bool
	options map[string]string
}

func parseAgentConfig(raw json.RawMessage, field string, nameRequired bool) (*agentConfig, error) {
	o, err := parseObject(raw, field)
	if err != nil {
		return nil, err
	}
	a := &agentConfig{obj: o}
	if nameRequired {
		if a.name, err = o.str(field, "name", true); err != nil {
			return nil, err
		}
	}
	if o.has("tools") {
		elems, err := o.array(field, "tools")
		if err != nil {
			return nil, err
		}
		refs, objs, err := parseToolRefs(field+".tools", elems)
		if err != nil {
			return nil, err
		}
		a.tools, a.hasTool = refs, true
		// Nothing runs unjudged: the upstream is told every tool needs permission, and the
		// gateway grants it from the verdict (the client's trust only spares the client).
		parts := make([]json.RawMessage, len(objs))
		for i, to := range objs {
			c := cloneObject(to)
			c.set("trust", nil)
			parts[i] = c.bytes()
		}
		o.set("tools", mustJSON(parts))
	}
	if v := o.raw("options"); v != nil && !isNull(v) {
		var opts map[string]string
		if err := json.Unmarshal(v, &opts); err != nil {
			return nil, fmt.Errorf("%s.options: must be an object of strings", field)
		}
		a.options = opts
	}
	return a, nil
}
