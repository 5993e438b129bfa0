package aos

import (
	"encoding/json"
	"slices"
	"strconv"
)

// MCP and A2A messages are foreign protocols carried as payload. They are decoded
// generically; only what the guardian reads (method, tool name and arguments, message text,
// ids) is type-checked, with the JSON path of anything that is wrong.

// mcpParams reads protocols/MCP params in either layout (ERRATA 3).
func (d *decoder) mcpParams(p *MCPParams) {
	d.ws()
	start := d.pos
	if !d.enterObject() {
		return
	}
	msgAt := -1
	var inline bool
	var reasoning any
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "jsonrpc":
			v, _ := d.anyValue().(string)
			inline = v == "2.0"
		case "message":
			d.ws()
			msgAt = d.pos
			p.Message = d.raw()
		case "reasoning":
			reasoning = d.anyValue()
		case "_meta":
			p.Meta, _ = d.anyValue().(map[string]any)
		default:
			d.skip()
		}
	}
	if d.err != nil {
		return
	}
	if inline {
		p.Inline = true
		p.Message = d.buf[start:d.pos]
		p.Meta = nil
		end := d.pos
		d.pos = start
		d.mcpMessage(p)
		d.pos = end
		return
	}
	p.Reasoning = d.strOf(reasoning, reasoning != nil, false, "reasoning")
	if msgAt < 0 {
		d.missing("message")
		return
	}
	d.at(msgAt, "message", func() { d.mcpMessage(p) })
}

// mcpMessage reads one MCP JSON-RPC message (request, notification or response).
func (d *decoder) mcpMessage(p *MCPParams) {
	if !d.enterObject() {
		return
	}
	long := d.longNumbers
	defer func() { p.longNumbers = d.longNumbers != long }()
	var params any
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "id":
			switch d.cur() {
			case '{', '[', 't', 'f':
				d.invalid("must be a string, a number or null")
				return
			}
			p.ID = d.raw()
		case "method":
			p.Method = d.str()
		case "params":
			params = d.anyValue()
			p.Params, _ = params.(map[string]any)
		case "result":
			p.Result, _ = d.anyValue().(map[string]any)
		case "error":
			p.Error, _ = d.anyValue().(map[string]any)
		default:
			d.skip()
		}
	}
	if d.err != nil || p.Method != "tools/call" {
		return
	}
	if params == nil {
		d.missing("params")
		return
	}
	if p.Params == nil {
		d.invalidField("params", "must be an object, not "+typeOf(params))
		return
	}
	name, hasName := p.Params["name"]
	p.ToolName = d.strOf(name, hasName, true, "params.name")
	switch args := p.Params["arguments"].(type) {
	case nil:
	case map[string]any:
		p.Arguments = args
	default:
		d.invalidField("params.arguments", "must be an object, not "+typeOf(args))
	}
}

// a2aParams reads the params of protocols/A2A or of a native A2A method (ERRATA 7).
func (d *decoder) a2aParams(p *A2AParams, method string) {
	d.ws()
	start := d.pos
	if !d.enterObject() {
		return
	}
	msgAt, payloadAt := -1, -1
	var inline bool
	var reasoning, context any
	var message, payload []byte
	for {
		k, ok := d.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "jsonrpc":
			v, _ := d.anyValue().(string)
			inline = v == "2.0"
		case "message":
			d.ws()
			msgAt = d.pos
			message = d.raw()
		case "payload":
			d.ws()
			payloadAt = d.pos
			payload = d.raw()
		case "context":
			context = d.anyValue()
		case "reasoning":
			reasoning = d.anyValue()
		default:
			d.skip()
		}
	}
	if d.err != nil {
		return
	}
	end := d.pos
	native := method != MethodA2A || payloadAt >= 0
	switch {
	case native:
		p.Native = true
		if method != MethodA2A {
			p.Method = method
		}
		p.Reasoning = d.strOf(reasoning, reasoning != nil, false, "reasoning")
		if context != nil {
			ctx, ok := context.(map[string]any)
			if !ok {
				d.invalidField("context", "must be an object, not "+typeOf(context))
				return
			}
			p.Context = ctx
			p.From, p.To = peerName(ctx["from"]), peerName(ctx["to"])
		}
		if payloadAt >= 0 {
			p.Message = payload
			d.at(payloadAt, "payload", func() { d.a2aContent(p) })
			return
		}
		// The A2A request posted unchanged: its params are the payload.
		p.Message = d.buf[start:end]
		d.pos = start
		d.a2aContent(p)
		d.pos = end
	case inline:
		p.Inline = true
		p.Message = d.buf[start:end]
		d.pos = start
		d.a2aContent(p)
		d.pos = end
	default:
		p.Reasoning = d.strOf(reasoning, reasoning != nil, false, "reasoning")
		if msgAt < 0 {
			d.missing("message")
			return
		}
		p.Message = message
		d.at(msgAt, "message", func() { d.a2aContent(p) })
	}
}

// peerName names the sender or receiver of a native A2A message.
func peerName(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		for _, k := range []string{"name", "id", "url"} {
			if s, ok := v[k].(string); ok && s != "" {
				return s
			}
		}
	}
	return ""
}

// a2aContent reads A2A content: a JSON-RPC request or response, a Message, a Task, or the
// params of a request, and collects what the guardian reads from it.
func (d *decoder) a2aContent(p *A2AParams) {
	if d.cur() != '{' {
		d.wrongType("an object")
		return
	}
	base := d.path()
	long := d.longNumbers
	body, _ := d.anyValue().(map[string]any)
	if d.err != nil {
		return
	}
	p.longNumbers = d.longNumbers != long
	w := a2aWalker{p: p}
	w.walk(body, gpath{s: base}, 0)
	if w.err != nil {
		d.err = w.err
	}
	d.a2aContext = w.contextAt
}

// gpath is the JSON path of a value in A2A content, and the member names leading to it from
// the content (for a path of members only: idx drops them).
type gpath struct {
	s    string
	keys []string
}

func (g gpath) key(k string) gpath {
	return gpath{joinPath(g.s, k), append(g.keys[:len(g.keys):len(g.keys)], k)}
}
func (g gpath) idx(i int) gpath { return gpath{s: g.s + "[" + strconv.Itoa(i) + "]"} }

type a2aWalker struct {
	p   *A2AParams
	err *Error
	// contextAt is where the contextId was found.
	contextAt gpath
}

func (w *a2aWalker) fail(at gpath, reason string) {
	if w.err == nil {
		w.err = fieldError(CodeInvalidParams, at.s, reason)
	}
}

// walk follows the members where A2A puts messages: params, result, message, a task's
// status.message, artifacts and history are not followed (history repeats earlier turns).
func (w *a2aWalker) walk(v map[string]any, at gpath, depth int) {
	if depth > 8 || w.err != nil {
		return
	}
	if m, ok := v["method"].(string); ok && w.p.Method == "" {
		w.p.Method = m
	}
	if ps, ok := v["params"].(map[string]any); ok {
		w.walk(ps, at.key("params"), depth+1)
	}
	if r, ok := v["result"].(map[string]any); ok {
		w.walk(r, at.key("result"), depth+1)
	}
	if m, ok := v["message"].(map[string]any); ok {
		w.walk(m, at.key("message"), depth+1)
	}
	if st, ok := v["status"].(map[string]any); ok {
		if m, ok := st["message"].(map[string]any); ok {
			w.walk(m, at.key("status").key("message"), depth+1)
		}
	}
	if arts, ok := v["artifacts"].([]any); ok {
		for i, a := range arts {
			if am, ok := a.(map[string]any); ok {
				w.parts(am["parts"], at.key("artifacts").idx(i).key("parts"))
			}
		}
	}
	if parts, ok := v["parts"]; ok {
		w.parts(parts, at.key("parts"))
		w.setStr(&w.p.Role, v["role"])
		w.setStr(&w.p.MessageID, v["messageId"])
		w.setStr(&w.p.TaskID, v["taskId"])
	}
	if id, ok := v["contextId"].(string); ok && w.p.ContextID == "" {
		w.p.ContextID, w.contextAt = id, at.key("contextId")
	}
	if kind, _ := v["kind"].(string); kind == "task" {
		w.setStr(&w.p.TaskID, v["id"])
	}
}

func (w *a2aWalker) setStr(dst *string, v any) {
	if s, ok := v.(string); ok && *dst == "" {
		*dst = s
	}
}

// parts reads A2A parts: kind (or the older type) text with a string text, or data.
func (w *a2aWalker) parts(v any, at gpath) {
	if v == nil {
		return
	}
	list, ok := v.([]any)
	if !ok {
		w.fail(at, "must be an array, not "+typeOf(v))
		return
	}
	for i, e := range list {
		part, ok := e.(map[string]any)
		if !ok {
			w.fail(at.idx(i), "must be an object, not "+typeOf(e))
			return
		}
		kind, _ := part["kind"].(string)
		if kind == "" {
			kind, _ = part["type"].(string)
		}
		text, hasText := part["text"]
		if kind == "text" || kind == "" && hasText {
			s, ok := text.(string)
			if !ok {
				if !hasText {
					w.fail(at.idx(i).key("text"), "required")
				} else {
					w.fail(at.idx(i).key("text"), "must be a string, not "+typeOf(text))
				}
				return
			}
			w.p.Texts = append(w.p.Texts, s)
			continue
		}
		if data, ok := part["data"]; ok && (kind == "data" || kind == "") {
			w.p.Data = append(w.p.Data, data)
		}
	}
}

// exactArguments is Arguments with the numbers as the message wrote them (json.Number) when
// it has one of 16 digits or more, which a float64 may not hold: for the step's text and a
// comparison of inputs, never for rules, which read Arguments.
func (p *MCPParams) exactArguments() map[string]any {
	if p.Arguments == nil {
		return nil
	}
	return exactMembers(p.Arguments, exactArgs(p.exactMessage()))
}

// exactMessage is the message decoded by exactJSON, or nil when it has no number of 16
// digits or more (the common case, which costs nothing more).
func (p *MCPParams) exactMessage() map[string]any {
	if !p.longNumbers {
		return nil
	}
	x, _ := exactJSON(p.Message)
	m, _ := x.(map[string]any)
	return m
}

// exactArgs is params.arguments of a message decoded by exactJSON (nil for nil).
func exactArgs(msg map[string]any) map[string]any {
	params, _ := msg["params"].(map[string]any)
	args, _ := params["arguments"].(map[string]any)
	return args
}

// exactMembers is m with each member that has a number of 16 digits or more in exact (the
// same object decoded by exactJSON) taken from exact. Only those change, so that the others
// read as before; m itself when exact is nil.
func exactMembers(m, exact map[string]any) map[string]any {
	if exact == nil {
		return m
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if x, ok := exact[k]; ok && hasLongNumber(x) {
			v = x
		}
		out[k] = v
	}
	return out
}

// exactOr is exact (a value decoded by exactJSON) when it has a number of 16 digits or
// more, else v.
func exactOr(v, exact any) any {
	if hasLongNumber(exact) {
		return exact
	}
	return v
}

// exactData is Data with each payload that has a number of 16 digits or more as the content
// wrote it, for the step's text; rules read Data. Only content that has such a number is
// decoded again.
func (p *A2AParams) exactData() []any {
	if len(p.Data) == 0 || !p.longNumbers {
		return p.Data
	}
	x, _ := exactJSON(p.Message)
	body, ok := x.(map[string]any)
	if !ok {
		return p.Data
	}
	// The same walk over the same content finds the same parts in the same order.
	var again A2AParams
	w := a2aWalker{p: &again}
	w.walk(body, gpath{}, 0)
	if w.err != nil || len(again.Data) != len(p.Data) {
		return p.Data
	}
	out := make([]any, len(p.Data))
	for i, v := range p.Data {
		out[i] = exactOr(v, again.Data[i])
	}
	return out
}

// hasLongNumber reports whether v, decoded with UseNumber, holds a json.Number of 16 digits
// or more.
func hasLongNumber(v any) bool {
	switch v := v.(type) {
	case json.Number:
		return longNumber([]byte(v))
	case map[string]any:
		for _, x := range v {
			if hasLongNumber(x) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if hasLongNumber(x) {
				return true
			}
		}
	}
	return false
}

// mcpText collects the readable text of an MCP message: tool arguments, prompt arguments,
// resource URIs, sampling messages and the text content of results and errors.
func mcpText(p *MCPParams, add func(string)) {
	if p.ToolName != "" {
		add(p.ToolName)
	}
	// The values written as JSON (arguments, structured content) show a long number with
	// the message's digits: one more decode, only for a message that has such a number.
	var exact map[string]any
	if p.Arguments != nil || p.Method != "tools/call" && p.Params["arguments"] != nil ||
		p.Result["structuredContent"] != nil {
		exact = p.exactMessage()
	}
	addArgs(exactMembers(p.Arguments, exactArgs(exact)), add)
	if p.Params != nil && p.Method != "tools/call" {
		if args, ok := p.Params["arguments"].(map[string]any); ok {
			addArgs(exactMembers(args, exactArgs(exact)), add)
		}
		if uri, ok := p.Params["uri"].(string); ok {
			add(uri)
		}
		contentTexts(p.Params["messages"], add)
	}
	if r := p.Result; r != nil {
		contentTexts(r["content"], add)
		contentTexts(r["contents"], add)
		contentTexts(r["messages"], add)
		if sc, ok := r["structuredContent"]; ok && sc != nil {
			result, _ := exact["result"].(map[string]any)
			add(renderValue(exactOr(sc, result["structuredContent"])))
		}
	}
	if e := p.Error; e != nil {
		if m, ok := e["message"].(string); ok {
			add(m)
		}
	}
}

// contentTexts reads the text out of MCP content lists: {type:"text",text}, resources
// with text, and messages whose content is such an item.
func contentTexts(v any, add func(string)) {
	list, _ := v.([]any)
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		if t, ok := m["text"].(string); ok {
			add(t)
		}
		if r, ok := m["resource"].(map[string]any); ok {
			if t, ok := r["text"].(string); ok {
				add(t)
			}
		}
		if c, ok := m["content"].(map[string]any); ok {
			if t, ok := c["text"].(string); ok {
				add(t)
			}
		} else if c, ok := m["content"].([]any); ok {
			contentTexts(c, add)
		}
	}
}

func addArgs(args map[string]any, add func(string)) {
	if len(args) == 0 {
		return
	}
	names := make([]string, 0, len(args))
	for k := range args {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		add(k + "=" + renderValue(args[k]))
	}
}
