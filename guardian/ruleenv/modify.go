package ruleenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/rules"
)

// structural are params keys whose values are protocol structure, not the step's content:
// redaction leaves them alone so the modified request stays valid (a redaction pattern
// that happens to match "2.0" or "text" must not rewrite the jsonrpc version or a part
// kind). The step context (agent, user, session) is not content either.
var structural = map[string]bool{
	"context": true, "jsonrpc": true, "method": true, "id": true, "kind": true, "role": true,
	"name": true, "executionId": true, "toolId": true, "messageId": true, "contextId": true,
	"taskId": true, "mimeType": true, "type": true, "isError": true, "_meta": true,
}

// content are params keys whose values are the agent's data through and through: a tool
// call's input values and MCP arguments, data parts, MCP structured results. Everything in
// them is redacted, keys included, even a key that is structural elsewhere (an argument
// named "name" or "id" is still data).
var content = map[string]bool{
	"value": true, "arguments": true, "data": true, "structuredContent": true,
}

// ErrSetNotSupported is returned when a modify rule sets inputs on a step without inputs.
var ErrSetNotSupported = errors.New("modify.set applies to tool calls (steps/toolCallRequest and MCP tools/call) only")

// ModifiedRequest applies m to the step's content and returns the whole JSON-RPC request
// with the same id and method and the modified params (ERRATA 10): every string of the
// content redacted, and the inputs named in m.Set replaced (or added). The result is checked
// with aos.ParseStep, so the guardian never sends a request it would itself reject.
func ModifiedRequest(step *aos.Step, m *rules.Modification) (json.RawMessage, error) {
	var params any
	if len(step.Params) > 0 {
		dec := json.NewDecoder(bytes.NewReader(step.Params))
		dec.UseNumber() // numbers come back exactly as sent
		if err := dec.Decode(&params); err != nil {
			return nil, fmt.Errorf("ruleenv: decode params: %w", err)
		}
	}
	out, _ := m.ApplyTo(params, rules.Structure{
		Skip:    func(k string) bool { return structural[k] },
		Content: func(k string) bool { return content[k] },
	})
	if m != nil && len(m.Set) > 0 {
		obj, ok := out.(map[string]any)
		if !ok {
			return nil, ErrSetNotSupported
		}
		var err error
		m.Apply(nil, func(name string, value any) {
			if err == nil {
				err = setInput(step, obj, name, value)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	req := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id,omitempty"`
		Method  string          `json:"method"`
		Params  any             `json:"params,omitempty"`
	}{"2.0", step.ID, step.Method, out}
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("ruleenv: encode modified request: %w", err)
	}
	if _, aerr := aos.ParseStep(raw); aerr != nil {
		return nil, fmt.Errorf("ruleenv: modified request is invalid: %w", aerr)
	}
	return raw, nil
}

// setInput sets one input of a tool call in the params as AOS lays them out.
func setInput(step *aos.Step, params map[string]any, name string, value any) error {
	switch {
	case step.ToolCall != nil:
		tcr, _ := params["toolCallRequest"].(map[string]any)
		if tcr == nil {
			return ErrSetNotSupported
		}
		inputs, _ := tcr["inputs"].([]any)
		for _, in := range inputs {
			if in, ok := in.(map[string]any); ok && in["name"] == name {
				in["value"] = value
				return nil
			}
		}
		tcr["inputs"] = append(inputs, map[string]any{"name": name, "value": value})
		return nil
	case step.MCP != nil && step.MCP.Method == "tools/call":
		msg := params
		if !step.MCP.Inline {
			msg, _ = params["message"].(map[string]any)
		}
		p, _ := msg["params"].(map[string]any)
		if p == nil {
			return ErrSetNotSupported
		}
		args, _ := p["arguments"].(map[string]any)
		if args == nil {
			args = map[string]any{}
			p["arguments"] = args
		}
		args[name] = value
		return nil
	}
	return ErrSetNotSupported
}
