package aos

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Accessors that give rules, storage and the console one view of every kind of step.

// Text returns the human-readable text of the step, one piece per line: message and
// trigger text parts (data parts as JSON), the knowledge query and retrieved contents,
// memory items, tool inputs as name=value, tool result outputs, MCP tool name, arguments
// and text content, and A2A text and data parts. Reasoning is not included (see Reasoning).
func (s *Step) Text() string {
	if s.hasText {
		return s.text
	}
	return s.joinText()
}

// ForgetText drops the text ParseStep joined; Text joins it again when next asked. A step
// that waits long (a held step) then keeps its content once, in its request, rather than
// twice.
func (s *Step) ForgetText() { s.text, s.hasText = "", false }

func (s *Step) joinText() string {
	var b strings.Builder
	add := func(t string) {
		if t == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(t)
	}
	switch {
	case s.Trigger != nil:
		partsText(s.Trigger.Trigger.Content, add)
	case s.Knowledge != nil:
		add(s.Knowledge.KnowledgeStep.Query)
		for _, r := range s.Knowledge.KnowledgeStep.Results {
			add(r.Content)
		}
	case s.Memory != nil:
		for _, m := range s.Memory.Memory {
			add(m)
		}
	case s.Message != nil:
		partsText(s.Message.Message.Content, add)
	case s.ToolCall != nil:
		for _, in := range s.ToolCall.ToolCallRequest.Inputs {
			add(in.Name + "=" + renderValue(in.exact()))
		}
	case s.ToolResult != nil:
		for _, o := range s.ToolResult.Result.Outputs {
			add(o.Text)
		}
	case s.MCP != nil:
		mcpText(s.MCP, add)
	case s.A2A != nil:
		for _, t := range s.A2A.Texts {
			add(t)
		}
		for _, v := range s.A2A.exactData() {
			add(renderValue(v))
		}
	}
	return b.String()
}

func partsText(parts []Part, add func(string)) {
	for _, p := range parts {
		switch p := p.(type) {
		case TextPart:
			add(p.Text)
		case DataPart:
			add(renderValue(p.exact()))
		}
	}
}

// renderValue writes a JSON value for text: strings as they are, anything else as compact
// JSON (object keys sorted); a json.Number (exactJSON's long numbers) with its digits.
func renderValue(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case json.Number:
		return v.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// exactJSON decodes raw as encoding/json would into an interface, except that its numbers
// of 16 digits or more, which a float64 may not hold, are json.Number with the request's
// digits. The shorter ones are float64 as always, so that the rest of a value with a long
// number reads as it would without: 10.50 as 10.5, 1E2 as 100. ok is false when raw does
// not decode.
func exactJSON(raw []byte) (v any, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return nil, false
	}
	return shortNumbersAsFloat(v), true
}

// shortNumbersAsFloat replaces in v, decoded with UseNumber, each number of fewer than 16
// digits by its float64.
func shortNumbersAsFloat(v any) any {
	switch x := v.(type) {
	case json.Number:
		if f, err := x.Float64(); err == nil && !longNumber([]byte(x)) {
			return f
		}
	case map[string]any:
		for k, e := range x {
			x[k] = shortNumbersAsFloat(e)
		}
	case []any:
		for i, e := range x {
			x[i] = shortNumbersAsFloat(e)
		}
	}
	return v
}

// SessionHint names the session the step belongs to, as far as the request says:
// context.session.id, else the A2A contextId, else the MCP params._meta.sessionId (of the
// MCP message, its result, or the AOS params), else "". ParseStep refuses an empty
// context.session.id, so a step with a context always names its session here.
func (s *Step) SessionHint() string {
	if s.Context != nil && s.Context.Session.ID != "" {
		return s.Context.Session.ID
	}
	if s.A2A != nil && s.A2A.ContextID != "" {
		return s.A2A.ContextID
	}
	if s.MCP != nil {
		id, _ := s.MCP.sessionMeta()
		return id
	}
	return ""
}

// ToolID is the tool of a tool call request, or the tool name of an MCP tools/call.
func (s *Step) ToolID() string {
	switch {
	case s.ToolCall != nil:
		return s.ToolCall.ToolCallRequest.ToolID
	case s.MCP != nil:
		return s.MCP.ToolName
	}
	return ""
}

// Inputs maps the inputs of a tool call request by name (a repeated name keeps the last
// value), or returns the arguments of an MCP tools/call. Nil for other steps.
func (s *Step) Inputs() map[string]any {
	return s.inputs(false)
}

// ExactInputs is Inputs with the numbers a float64 may not hold exactly given with the
// request's digits (json.Number, see exactJSON), for comparing inputs digit for digit.
func (s *Step) ExactInputs() map[string]any {
	return s.inputs(true)
}

func (s *Step) inputs(exact bool) map[string]any {
	switch {
	case s.ToolCall != nil:
		in := s.ToolCall.ToolCallRequest.Inputs
		m := make(map[string]any, len(in))
		for _, v := range in {
			if exact {
				m[v.Name] = v.exact()
			} else {
				m[v.Name] = v.Value
			}
		}
		return m
	case s.MCP != nil && exact:
		return s.MCP.exactArguments()
	case s.MCP != nil:
		return s.MCP.Arguments
	}
	return nil
}

// Role is the sender of a message step (user, agent or system) or of an A2A message.
func (s *Step) Role() string {
	switch {
	case s.Message != nil:
		return s.Message.Message.Role
	case s.A2A != nil:
		return s.A2A.Role
	}
	return ""
}

// Reasoning is the agent's reasoning sent with the step, if any.
func (s *Step) Reasoning() string {
	switch {
	case s.Trigger != nil:
		return s.Trigger.Reasoning
	case s.Knowledge != nil:
		return s.Knowledge.Reasoning
	case s.Memory != nil:
		return s.Memory.Reasoning
	case s.Message != nil:
		return s.Message.Reasoning
	case s.ToolCall != nil:
		return s.ToolCall.Reasoning
	case s.ToolResult != nil:
		return s.ToolResult.Reasoning
	case s.MCP != nil:
		return s.MCP.Reasoning
	case s.A2A != nil:
		return s.A2A.Reasoning
	}
	return ""
}

// IsError reports a tool result with isError set, or an MCP response that is an error or
// a tool result with isError set.
func (s *Step) IsError() bool {
	switch {
	case s.ToolResult != nil:
		return s.ToolResult.Result.IsError
	case s.MCP != nil:
		if s.MCP.Error != nil {
			return true
		}
		isErr, _ := s.MCP.Result["isError"].(bool)
		return isErr
	}
	return false
}
