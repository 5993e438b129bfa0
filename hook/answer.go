package hook

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/vigil-guardian/vigil/guardian/aos"
)

// Output is the hook's answer to the agent: what it prints and how it exits.
type Output struct {
	Stdout string
	// Stderr is for the developer (agents show it in verbose or debug views); the model
	// reads the reason inside Stdout.
	Stderr string
	Code   int
}

// Kind is the verdict as the hook applies it.
type Kind int

// The verdict kinds.
const (
	// Pass lets the agent go on by its own rules: nothing matched in Vigil, so Vigil neither
	// grants nor refuses anything (the agent's own permission prompts still apply).
	Pass Kind = iota
	// Grant is an explicit allow: a rule allowed the step, or an operator approved a hold.
	// Agents that can skip their own permission prompt do (Codex cannot: see Answer).
	Grant
	Deny
	// Ask hands the decision to the developer through the agent's own prompt.
	Ask
	// Modify carries a changed tool input, prompt or tool output.
	Modify
)

// Verdict is the guardian's result reduced to what a hook can express.
type Verdict struct {
	Kind Kind
	// Reason is shown to the model (and the developer): the guardian's message and the rule.
	Reason string
	// Input is the modified tool input (Modify of a tool call).
	Input map[string]any
	// Text is the modified prompt or tool output (Modify of a message or result).
	Text string
}

// VerdictOf reduces the guardian's result for c. A modify whose params cannot be read
// fails closed.
func VerdictOf(c *Call, res *aos.Result) Verdict {
	v := Verdict{Reason: reason(res)}
	ruleID, _ := res.Data["ruleId"].(string)
	switch res.Decision {
	case aos.Allow:
		v.Kind = Pass
		if ruleID != "" {
			v.Kind = Grant
		}
	case aos.Modify:
		v.Kind = Modify
		if !v.readModified(c, res) {
			return Verdict{Kind: Deny, Reason: v.Reason + notApplied}
		}
	default:
		v.Kind = Deny
		if asksOnly(res.ReasonCode) {
			v.Kind = Ask
		}
	}
	return v
}

// asksOnly reports whether every reason of a deny is ASK_USER. A reason code from any other
// rule (a deny or a hold of the same step) keeps the deny: the developer's own prompt must
// not overrule what another rule refused or left to the operator.
func asksOnly(codes []string) bool {
	return len(codes) > 0 && !slices.ContainsFunc(codes, func(c string) bool { return c != ReasonAsk })
}

func reason(res *aos.Result) string {
	msg := strings.TrimSpace(res.Message)
	if msg == "" {
		msg = "Decided by policy."
	}
	if id, _ := res.Data["ruleId"].(string); id != "" {
		return msg + " (Vigil rule " + id + ")"
	}
	return msg + " (Vigil)"
}

// modified is the loose shape of the params of a modified request: only what a hook can
// pass back.
type modified struct {
	ToolCallRequest *struct {
		Inputs []aos.ToolArgumentValue `json:"inputs"`
	} `json:"toolCallRequest"`
	Message *struct {
		Content []struct {
			Text *string `json:"text"`
		} `json:"content"`
	} `json:"message"`
	Result *struct {
		Outputs []struct {
			Text string `json:"text"`
		} `json:"outputs"`
	} `json:"result"`
}

func (v *Verdict) readModified(c *Call, res *aos.Result) bool {
	raw, err := res.ModifiedParams()
	if err != nil {
		return false
	}
	var m modified
	if decodeJSON(raw, &m) != nil {
		return false
	}
	switch c.Phase {
	case PhaseBeforeTool:
		if m.ToolCallRequest == nil {
			return false
		}
		// Never nil, even without inputs: an edit that leaves the call no inputs is still a
		// change, and beforeTool tells a nil Input (nothing to apply) from an empty one.
		v.Input = make(map[string]any, len(m.ToolCallRequest.Inputs))
		for _, in := range m.ToolCallRequest.Inputs {
			v.Input[in.Name] = in.Value
		}
		return true
	case PhasePrompt:
		if m.Message == nil {
			return false
		}
		var parts []string
		for _, p := range m.Message.Content {
			if p.Text != nil {
				parts = append(parts, *p.Text)
			}
		}
		v.Text = strings.Join(parts, "\n")
		return true
	case PhaseAfterTool:
		if m.Result == nil {
			return false
		}
		parts := make([]string, len(m.Result.Outputs))
		for i, o := range m.Result.Outputs {
			parts[i] = o.Text
		}
		v.Text = strings.Join(parts, "\n")
		return true
	}
	return false
}

// Answer renders v in c's agent's own terms. Every answer exits 0 with JSON (or nothing):
// the agents read a deny from the JSON and show its reason to the model.
func (c *Call) Answer(v Verdict) Output {
	switch c.Phase {
	case PhaseBeforeTool:
		return c.beforeTool(v)
	case PhaseAfterTool:
		return c.afterTool(v)
	case PhasePrompt:
		return c.prompt(v)
	}
	if c.Agent == Cursor {
		return jsonOut(map[string]any{})
	}
	return Output{}
}

func (c *Call) beforeTool(v Verdict) Output {
	if v.Kind == Modify {
		v = c.expressible(v)
	}
	switch c.Agent {
	case ClaudeCode, Codex:
		type specific struct {
			HookEventName            string `json:"hookEventName"`
			PermissionDecision       string `json:"permissionDecision"`
			PermissionDecisionReason string `json:"permissionDecisionReason"`
			// An interface, not a map: omitempty drops an empty map, and an allow without
			// updatedInput runs the original call (Codex even treats it as a failed hook).
			// Both agents replace the whole input, so {} is a faithful "no inputs".
			UpdatedInput any `json:"updatedInput,omitempty"`
		}
		answer := func(decision, reason string, in any) Output {
			return jsonOut(struct {
				HookSpecificOutput specific `json:"hookSpecificOutput"`
			}{specific{c.Event, decision, reason, in}})
		}
		if c.Agent == Codex {
			// Codex takes "allow" only with an updatedInput (a bare allow or an ask is
			// reported as a failed hook and the tool runs anyway): an allow prints nothing,
			// an ask denies, a modify allows with the changed input.
			switch v.Kind {
			case Pass, Grant:
				return Output{}
			case Modify:
				return answer("allow", v.Reason, v.Input)
			}
			return answer("deny", v.Reason, nil)
		}
		switch v.Kind {
		case Pass:
			return Output{}
		case Grant:
			return answer("allow", v.Reason, nil)
		case Ask:
			return answer("ask", v.Reason, nil)
		case Modify:
			return answer("allow", v.Reason, v.Input)
		}
		return answer("deny", v.Reason, nil)
	case Gemini:
		type specific struct {
			HookEventName string         `json:"hookEventName"`
			ToolInput     map[string]any `json:"tool_input"`
		}
		type answer struct {
			Decision           string    `json:"decision"`
			Reason             string    `json:"reason"`
			HookSpecificOutput *specific `json:"hookSpecificOutput,omitempty"`
		}
		switch v.Kind {
		case Pass:
			return Output{}
		case Grant:
			return jsonOut(answer{Decision: "allow", Reason: v.Reason})
		case Modify:
			return jsonOut(answer{"allow", v.Reason, &specific{c.Event, v.Input}})
		}
		// Gemini CLI's own "ask" ends a non-interactive session silently: deny, so the
		// model reads why.
		return jsonOut(answer{Decision: "deny", Reason: v.Reason})
	case Cursor:
		type answer struct {
			Permission   string `json:"permission"`
			UserMessage  string `json:"user_message,omitempty"`
			AgentMessage string `json:"agent_message,omitempty"`
			// An interface for the same reason as Claude Code's updatedInput.
			UpdatedInput any `json:"updated_input,omitempty"`
		}
		switch v.Kind {
		case Pass, Grant:
			return jsonOut(answer{Permission: "allow"})
		case Ask:
			return jsonOut(answer{Permission: "ask", UserMessage: v.Reason, AgentMessage: v.Reason})
		case Modify:
			if c.Event == "preToolUse" {
				return jsonOut(answer{"allow", v.Reason, v.Reason, v.Input})
			}
			r := v.Reason + " — Cursor cannot change the input of this hook's calls, so the call is denied."
			return jsonOut(answer{Permission: "deny", UserMessage: r, AgentMessage: r})
		}
		return jsonOut(answer{Permission: "deny", UserMessage: v.Reason, AgentMessage: v.Reason})
	}
	return Output{}
}

// expressible returns v, or a deny when c's agent cannot be made to run exactly v's input.
// An allow that carries no input, or one the agent merges into the original, lets (part of)
// the original call run: the one thing a modify must never do.
func (c *Call) expressible(v Verdict) Verdict {
	if c.Agent == Cursor && c.Event != "preToolUse" {
		// Denied whatever the change: only Cursor's preToolUse takes an input back.
		return v
	}
	if v.Input == nil {
		return Verdict{Kind: Deny, Reason: v.Reason + notApplied}
	}
	if !c.mergesInput() {
		return v
	}
	// The whole input goes back, so every input the change keeps or adds is set either way;
	// only one it removes would stay in the agent's copy.
	gone, known := c.removedInputs(v.Input)
	if !known {
		return Verdict{Kind: Deny, Reason: v.Reason + notApplied}
	}
	if len(gone) > 0 {
		how := "Gemini CLI merges a hook's tool_input into the call's own arguments"
		if c.Agent == Cursor {
			how = "Cursor may merge a hook's updated_input into the call's own arguments"
		}
		return Verdict{Kind: Deny, Reason: v.Reason + " — the change removes " + strings.Join(gone, ", ") +
			" from the call, but " + how + ", so the call would still get them: it is denied."}
	}
	return v
}

// notApplied ends the reason of a modify that is denied because it cannot be applied.
const notApplied = " — Vigil changed this step but the change could not be applied, so it is denied."

// mergesInput reports whether c's agent may merge a rewritten tool input into the original
// instead of replacing it. Gemini CLI does (Object.assign onto the call's arguments). Claude
// Code documents that updatedInput replaces the whole input, and Codex rebuilds the call from
// updatedInput alone. Cursor's contract names updated_input without saying which, and no
// Cursor runs here to find out: it is treated as merging, which is safe either way.
func (c *Call) mergesInput() bool {
	return c.Agent == Gemini || c.Agent == Cursor
}

// removedInputs lists, quoted and sorted, the inputs of c's step that in lacks; known is
// false when c carries no tool call step to compare with.
func (c *Call) removedInputs(in map[string]any) (gone []string, known bool) {
	p, ok := c.Params.(aos.ToolCallRequestParams)
	if !ok {
		return nil, false
	}
	for _, a := range p.ToolCallRequest.Inputs {
		if _, kept := in[a.Name]; !kept {
			gone = append(gone, strconv.Quote(a.Name))
		}
	}
	slices.Sort(gone)
	return slices.Compact(gone), true
}

// afterTool answers a tool's result. The tool already ran: a deny or a redaction can only
// tell the model not to use what it returned.
func (c *Call) afterTool(v Verdict) Output {
	context := ""
	switch v.Kind {
	case Deny, Ask:
		context = "Vigil flagged this tool's output; do not use it. " + v.Reason
	case Modify:
		context = "Vigil redacted this tool's output; use only this redacted version: " + v.Text + "\n" + v.Reason
	default:
		if c.Agent == Cursor {
			return jsonOut(map[string]any{})
		}
		return Output{}
	}
	// Claude Code and Codex block with "block", Gemini with "deny"; a redaction goes back as
	// additional context in the same shape for all three.
	block := ""
	switch c.Agent {
	case ClaudeCode, Codex:
		block = "block"
	case Gemini:
		block = "deny"
	}
	if block != "" {
		type specific struct {
			HookEventName     string `json:"hookEventName"`
			AdditionalContext string `json:"additionalContext"`
		}
		if v.Kind == Modify {
			return jsonOut(struct {
				HookSpecificOutput specific `json:"hookSpecificOutput"`
			}{specific{c.Event, context}})
		}
		return jsonOut(struct {
			Decision string `json:"decision"`
			Reason   string `json:"reason"`
		}{block, context})
	}
	// Cursor's after-hooks only observe.
	return jsonOut(map[string]any{})
}

// prompt answers a user prompt. No agent lets a hook rewrite the prompt, so a modify
// (a redaction) blocks it with the reason: the developer edits and sends it again.
func (c *Call) prompt(v Verdict) Output {
	r := v.Reason
	switch v.Kind {
	case Pass, Grant:
		if c.Agent == Cursor {
			return jsonOut(struct {
				Continue bool `json:"continue"`
			}{true})
		}
		return Output{}
	case Modify:
		r += " — the prompt must change before it is sent; edit it and send it again."
	}
	switch c.Agent {
	case Cursor:
		return jsonOut(struct {
			Continue    bool   `json:"continue"`
			UserMessage string `json:"user_message"`
		}{false, r})
	case Gemini:
		return jsonOut(struct {
			Decision string `json:"decision"`
			Reason   string `json:"reason"`
		}{"deny", r})
	}
	return jsonOut(struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}{"block", r})
}

func jsonOut(v any) Output {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain maps and strings are encoded here; a failure is a bug, and the answer
		// must still block.
		return Output{Stderr: "vigil hook: encode answer: " + err.Error(), Code: 2}
	}
	return Output{Stdout: string(b) + "\n"}
}
