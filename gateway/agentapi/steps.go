package agentapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
)

// stepper turns the turn's messages into AOS steps of one Vigil session.
type stepper struct {
	session, agentID, agentName, user, turnID string
	n                                         int
	now                                       func() time.Time
}

// stepContext is context every step carries.
func (s *stepper) context() aos.StepContext {
	s.n++
	c := aos.StepContext{
		Agent:     aos.Agent{ID: s.agentID, Name: s.agentName, Provider: aos.AgentProvider{Name: "agentapi"}},
		Session:   aos.Session{ID: s.session},
		TurnID:    s.turnID,
		StepID:    strconv.Itoa(s.n),
		Timestamp: s.now().UTC().Format(time.RFC3339Nano),
	}
	if s.user != "" {
		c.User = &aos.User{ID: s.user}
	}
	return c
}

// build makes the AOS request for method with params (context added) and parses it, so the
// stored step is a normal AOS request.
func (s *stepper) build(method string, params map[string]any) (*aos.Step, error) {
	params["context"] = s.context()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": s.turnID + "-" + strconv.Itoa(s.n), "method": method, "params": params})
	if err != nil {
		return nil, fmt.Errorf("agentapi: build %s step: %w", method, err)
	}
	step, perr := aos.ParseStep(b)
	if perr != nil {
		return nil, fmt.Errorf("agentapi: build %s step: %s (%v)", method, perr.Message, perr.Data)
	}
	return step, nil
}

// messageStep is steps/message for a user's or the agent's message.
func (s *stepper) messageStep(m *message, role string) (*aos.Step, error) {
	cs, err := readParts(m)
	if err != nil {
		return nil, fmt.Errorf("agentapi: message step: %w", err)
	}
	parts := make([]any, 0, len(m.Content))
	for _, c := range cs {
		switch t, isText := c.text(); {
		case isText:
			parts = append(parts, map[string]any{"kind": "text", "text": t})
		case c.Type == "image" && c.URL != nil:
			parts = append(parts, map[string]any{"kind": "file", "file": map[string]any{"uri": *c.URL}})
		default:
			// Every content part has a part, so that a modification maps back by index.
			var data map[string]any
			if json.Unmarshal(c.Data, &data) != nil || data == nil {
				data = map[string]any{}
			}
			parts = append(parts, map[string]any{"kind": "data", "data": data})
		}
	}
	if len(parts) == 0 {
		// The protocol's content is optional; an AOS message needs a part. A message
		// without content (absent, null or []) is judged as one with an empty text, so the
		// rules still see it; a modification of that placeholder maps to no part.
		parts = append(parts, map[string]any{"kind": "text", "text": ""})
	}
	return s.build("steps/message", map[string]any{"message": map[string]any{"id": s.messageID(m), "role": role, "content": parts}})
}

// messageID is the id of m's steps/message: its own, else one the stepper numbers.
func (s *stepper) messageID(m *message) string {
	if m.ID != "" {
		return m.ID
	}
	return "msg-" + strconv.Itoa(s.n+1)
}

// answerStep is the steps/message (role user) of the reasons a client's
// mcp_approval_response gives: one text part for each content part, empty where it gives
// none, so that a modification maps back to its part by index.
func (s *stepper) answerStep(m *message, reasons []*string) (*aos.Step, error) {
	parts := make([]any, len(reasons))
	for j, r := range reasons {
		text := ""
		if r != nil {
			text = *r
		}
		parts[j] = map[string]any{"kind": "text", "text": text}
	}
	return s.build("steps/message", map[string]any{"message": map[string]any{"id": s.messageID(m), "role": "user", "content": parts}})
}

// callOf returns the call data of a tool call or tool output message (the data of its
// first part that has some) and that part's index, -1 when none has. Parts and data are
// read exactly, as the runtime reads them: the call judged is the call the peer runs.
func callOf(m *message) (callData, int, error) {
	parts, err := readParts(m)
	if err != nil {
		return callData{}, -1, err
	}
	for i, c := range parts {
		if len(c.Data) == 0 || isNull(c.Data) {
			continue
		}
		var d callData
		if err := decodeExact(c.Data, &d); err != nil {
			return callData{}, -1, under(fmt.Sprintf("content[%d].data", i), err)
		}
		return d, i, nil
	}
	return callData{}, -1, nil
}

// arguments returns a call's arguments as named inputs, in order: the members of the JSON
// object its arguments string holds, or one input "arguments" with the text as it is.
func arguments(raw json.RawMessage) ([]map[string]any, bool) {
	text := stringOrJSON(raw)
	if kvs, ok := orderedObject([]byte(text)); ok {
		return kvs, true
	}
	if text == "" {
		return []map[string]any{}, false
	}
	return []map[string]any{{"name": "arguments", "value": text}}, false
}

// orderedObject splits a JSON object into name/value inputs in member order.
func orderedObject(b []byte) ([]map[string]any, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []map[string]any
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, map[string]any{"name": kt.(string), "value": v})
	}
	if _, err := dec.Token(); err != nil || dec.More() {
		return nil, false
	}
	if out == nil {
		out = []map[string]any{}
	}
	return out, true
}

// callStep is steps/toolCallRequest for a function, plugin, MCP or component call, or an
// MCP approval request.
func (s *stepper) callStep(d callData) (*aos.Step, error) {
	inputs, _ := arguments(d.Arguments)
	exec := d.CallID
	if exec == "" {
		exec = d.ID
	}
	tool := d.Name
	if tool == "" {
		tool = "unknown"
	}
	return s.build("steps/toolCallRequest", map[string]any{"toolCallRequest": map[string]any{
		"executionId": exec, "toolId": tool, "inputs": inputs}})
}

// outputStep is steps/toolCallResult for a tool's output.
func (s *stepper) outputStep(d callData) (*aos.Step, error) {
	return s.build("steps/toolCallResult", map[string]any{"executionId": d.CallID,
		"result": map[string]any{"outputs": []any{map[string]any{"kind": "text", "text": stringOrJSON(d.Output)}}, "isError": false}})
}

// notice is what the client sees in place of what a verdict withheld.
func notice(v guardian.Verdict) string {
	if v.Message != "" {
		return "Withheld by Vigil: " + v.Message
	}
	return "Withheld by Vigil: denied by policy."
}

// modifiedTexts returns the text of each part of a modified steps/message, by index ("",
// false for a part that is not text).
func modifiedTexts(params json.RawMessage) ([]*string, error) {
	var p struct {
		Message struct {
			Content []struct {
				Kind string  `json:"kind"`
				Text *string `json:"text"`
			} `json:"content"`
		} `json:"message"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("agentapi: modified message: %w", err)
	}
	out := make([]*string, len(p.Message.Content))
	for i, c := range p.Message.Content {
		if c.Kind == "text" {
			out[i] = c.Text
		}
	}
	return out, nil
}

// rewriteMessage returns the message object raw with each text part's text replaced by
// texts[i] (parts without a new text keep theirs).
func rewriteMessage(raw []byte, m *message, texts []*string) ([]byte, error) {
	parts := make([]json.RawMessage, len(m.Content))
	for i, c := range m.Content {
		parts[i] = c
		if i < len(texts) && texts[i] != nil {
			t, _ := json.Marshal(*texts[i])
			nc, err := setKey(c, "text", t)
			if err != nil {
				return nil, err
			}
			parts[i] = nc
		}
	}
	return setContent(raw, parts)
}

func setContent(raw []byte, parts []json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(parts)
	if err != nil {
		return nil, err
	}
	return setKey(raw, "content", b)
}

// withNotice replaces a message's content with one text part saying what was withheld.
func withNotice(raw []byte, id, text string) ([]byte, error) {
	c, _ := json.Marshal(textContent{Object: "content", Type: "text", MsgID: id, Text: text})
	return setContent(raw, []json.RawMessage{c})
}

// rewriteCall returns a call or output message with member key ("arguments", "output") of
// its call data at part index set to val.
func rewriteCall(raw []byte, m *message, index int, key string, val string) ([]byte, error) {
	part, err := setDataMember(m.Content[index], key, val)
	if err != nil {
		return nil, err
	}
	parts := append([]json.RawMessage(nil), m.Content...)
	parts[index] = part
	return setContent(raw, parts)
}

// setDataMember returns the content part part with member key of its data set to val.
func setDataMember(part json.RawMessage, key, val string) (json.RawMessage, error) {
	var c map[string]json.RawMessage
	if err := json.Unmarshal(part, &c); err != nil {
		return nil, err
	}
	v, _ := json.Marshal(val)
	data, err := setKey(c["data"], key, v)
	if err != nil {
		return nil, err
	}
	return setKey(part, "data", data)
}

// modifiedArguments is the arguments text of a modified steps/toolCallRequest: a JSON
// object of its inputs when the call's arguments were one, else the "arguments" input.
func modifiedArguments(params json.RawMessage, wasObject bool) (string, error) {
	var p struct {
		ToolCallRequest struct {
			Inputs []struct {
				Name  string          `json:"name"`
				Value json.RawMessage `json:"value"`
			} `json:"inputs"`
		} `json:"toolCallRequest"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return "", fmt.Errorf("agentapi: modified tool call: %w", err)
	}
	if !wasObject {
		for _, in := range p.ToolCallRequest.Inputs {
			if in.Name == "arguments" {
				return stringOrJSON(in.Value), nil
			}
		}
		return "", nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, in := range p.ToolCallRequest.Inputs {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(in.Name)
		b.Write(k)
		b.WriteString(": ")
		if len(in.Value) == 0 {
			b.WriteString("null")
		} else {
			b.Write(in.Value)
		}
	}
	b.WriteByte('}')
	return b.String(), nil
}

// modifiedOutput is the output text of a modified steps/toolCallResult.
func modifiedOutput(params json.RawMessage) (string, error) {
	type result struct {
		Outputs []struct {
			Text string `json:"text"`
		} `json:"outputs"`
	}
	var p struct {
		Result         *result `json:"result"`
		ToolCallResult *struct {
			Result *result `json:"result"`
		} `json:"toolCallResult"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return "", fmt.Errorf("agentapi: modified tool result: %w", err)
	}
	r := p.Result
	if r == nil && p.ToolCallResult != nil {
		r = p.ToolCallResult.Result
	}
	if r == nil {
		return "", nil
	}
	var b bytes.Buffer
	for _, o := range r.Outputs {
		b.WriteString(o.Text)
	}
	return b.String(), nil
}
