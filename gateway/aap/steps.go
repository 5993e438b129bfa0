package aap

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/record"
)

// Decider runs Vigil's decision pipeline for one step: rules, hold (blocking until an
// operator or the hold's timeout decides; ctx ending abandons it), store, publish. It is
// (*guardian.Guardian).DecideStep.
type Decider interface {
	DecideStep(ctx context.Context, step *aos.Step, meta guardian.RequestMeta) (guardian.Verdict, record.StepRecord, error)
	// SessionRefusal is why a request with API key keyID (scoped to agent keyAgent) may
	// not touch a session another key or agent owns, "" when it may; it adds no step and
	// claims nothing. It is (*guardian.Guardian).SessionRefusal.
	SessionRefusal(ctx context.Context, sessionID, keyID, keyAgent string) string
}

// Decisions as the pipeline spells them.
const (
	allow  = "allow"
	deny   = "deny"
	modify = "modify"
)

// stepper builds the AOS steps of one session's traffic.
type stepper struct {
	sessionID string
	upstream  string
	agent     aos.Agent
	turnID    string
	next      int
}

func (s *stepper) context(now string) aos.StepContext {
	s.next++
	return aos.StepContext{
		Agent:     s.agent,
		Session:   aos.Session{ID: s.sessionID, Metadata: map[string]any{"protocol": "aap", "upstream": s.upstream}},
		TurnID:    s.turnID,
		StepID:    "s" + strconv.Itoa(s.next),
		Timestamp: now,
	}
}

func buildStep(method string, params any) (*aos.Step, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode %s params: %w", method, err)
	}
	raw, err := json.Marshal(aos.Request{JSONRPC: "2.0", ID: json.RawMessage("1"), Method: method, Params: p})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", method, err)
	}
	step, perr := aos.ParseStep(raw)
	if perr != nil {
		return nil, fmt.Errorf("build %s step: %w", method, perr)
	}
	return step, nil
}

func textParts(texts []string) []aos.Part {
	parts := make([]aos.Part, 0, len(texts))
	for _, t := range texts {
		parts = append(parts, aos.TextPart{Text: t})
	}
	if len(parts) == 0 {
		// A message of images only still is a step; its text is empty.
		parts = append(parts, aos.TextPart{Text: ""})
	}
	return parts
}

// messageStep is steps/message for a message's text; role is user, agent or system.
func (s *stepper) messageStep(now, role, msgID string, texts []string) (*aos.Step, error) {
	return buildStep("steps/message", aos.MessageParams{
		Context: s.context(now),
		Message: aos.Message{ID: msgID, Role: role, Content: textParts(texts)},
	})
}

// openStep is the steps/agentTrigger of a session opened without seed messages by a
// client with an agent key: stored, it makes the key the session's owner (as the first
// seed message's step would), in the guardian's store and not only in a cache, so no other
// key can take the session by sending its first turn, even after a restart.
func (s *stepper) openStep(now, sessionID string) (*aos.Step, error) {
	return buildStep(aos.MethodAgentTrigger, aos.AgentTriggerParams{
		Context: s.context(now),
		Trigger: aos.AgentTrigger{Type: aos.TriggerAutonomous, Event: aos.AgentTriggerEvent{Type: openEvent, ID: sessionID},
			Content: textParts(nil)},
	})
}

// openEvent is the trigger event of an opened session.
const openEvent = "aap.session.open"

// toolCallStep is steps/toolCallRequest for a tool call; the input's members are its inputs,
// in name order.
func (s *stepper) toolCallStep(now string, tc toolCall) (*aos.Step, error) {
	var in map[string]any
	if err := json.Unmarshal(tc.Input, &in); err != nil {
		return nil, fmt.Errorf("tool call %s: input: %w", tc.ID, err)
	}
	names := make([]string, 0, len(in))
	for k := range in {
		names = append(names, k)
	}
	sort.Strings(names)
	inputs := make([]aos.ToolArgumentValue, len(names))
	for i, k := range names {
		inputs[i] = aos.ToolArgumentValue{Name: k, Value: in[k]}
	}
	return buildStep("steps/toolCallRequest", aos.ToolCallRequestParams{
		Context:         s.context(now),
		ToolCallRequest: aos.ToolCallRequest{ExecutionID: tc.ID, ToolID: tc.Name, Inputs: inputs},
	})
}

// toolResultStep is steps/toolCallResult for a tool's result.
func (s *stepper) toolResultStep(now, callID string, c content) (*aos.Step, error) {
	texts := c.texts()
	outs := make([]aos.TextPart, len(texts))
	for i, t := range texts {
		outs[i] = aos.TextPart{Text: t}
	}
	return buildStep("steps/toolCallResult", aos.ToolCallResultParams{
		Context:     s.context(now),
		ExecutionID: callID,
		Result:      aos.ToolCallResult{Outputs: outs},
	})
}

// modifiedTexts reads the text parts of a modify verdict's steps/message params.
func modifiedTexts(params json.RawMessage) ([]string, error) {
	var p aos.MessageParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("modified message: %w", err)
	}
	var out []string
	for _, part := range p.Message.Content {
		if t, ok := part.(aos.TextPart); ok {
			out = append(out, t.Text)
		}
	}
	return out, nil
}

// modifiedInput reads a modify verdict's steps/toolCallRequest params back into a tool input.
func modifiedInput(params json.RawMessage) (json.RawMessage, error) {
	var p aos.ToolCallRequestParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("modified tool call: %w", err)
	}
	in := make(map[string]any, len(p.ToolCallRequest.Inputs))
	for _, a := range p.ToolCallRequest.Inputs {
		in[a.Name] = a.Value
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("modified tool call: encode input: %w", err)
	}
	return b, nil
}

// modifiedOutputs reads a modify verdict's steps/toolCallResult params back into texts.
func modifiedOutputs(params json.RawMessage) ([]string, error) {
	var p aos.ToolCallResultParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("modified tool result: %w", err)
	}
	out := make([]string, len(p.Result.Outputs))
	for i, o := range p.Result.Outputs {
		out[i] = o.Text
	}
	return out, nil
}

// verdictMessage is the guardian's message of a verdict, never empty.
func verdictMessage(v guardian.Verdict) string {
	if v.Message != "" {
		return v.Message
	}
	if v.Decision == deny {
		return "Denied by policy."
	}
	return "Allowed."
}

// Short names for the pipeline's types.
type (
	verdict      = guardian.Verdict
	requestMetaT = guardian.RequestMeta
)
