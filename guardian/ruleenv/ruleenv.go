// Package ruleenv turns an AOS step into the environment rules are evaluated on.
//
// It is the only place that knows both the AOS wire model and the rules' Env, so the
// rules package stays protocol-agnostic: another gateway (MCP proxy, A2A) only needs its
// own builder.
package ruleenv

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/rules"
)

// History is what the guardian knows of the session before this step.
type History struct {
	// SessionID overrides the session id read from the step (context.session.id, the A2A
	// contextId or the MCP _meta.sessionId).
	SessionID string
	// StepCount counts all earlier steps; it may exceed len(Steps) when only the newest
	// steps were loaded. Zero means len(Steps).
	StepCount int
	// Steps are the earlier steps, oldest first.
	Steps []rules.HistoryStep
	// Counts, when not nil, are Steps counted (rules.Session.WithCounts).
	Counts *rules.SessionCounts
}

// Build returns the Env for step. now is the evaluation time (zero: the Program's clock).
// Params are decoded into Env.Params; use BuildFor to skip that when no rule reads them.
func Build(step *aos.Step, hist History, now time.Time) *rules.Env {
	return build(step, hist, now, true, true, true)
}

// BuildFor is Build for one Program: Env.Params, Env.ToolDef and Env.Inputs are built only
// when a rule of prog that reads them gets past its cheap tests on this step (Env.Defer),
// and never when no rule of prog reads them. Evaluate the result with that same prog (not
// Engine.Evaluate, which may have swapped in rules that do read them meanwhile).
func BuildFor(prog *rules.Program, step *aos.Step, hist History, now time.Time) *rules.Env {
	env := build(step, hist, now, false, false, false)
	d := &rules.Deferred{}
	if prog.UsesParams() {
		d.Params = func() map[string]any { return decodeParams(step) }
	}
	if prog.UsesInputs() {
		d.Inputs = step.Inputs
	}
	if prog.UsesToolDef() && env.Tool != "" {
		// The definition an MCP gateway put in _meta wins; else the agent's tool list.
		var tools []aos.ToolDefinition
		if step.Context != nil {
			tools = step.Context.Agent.Tools
		}
		tool, mcp := env.Tool, step.MCP
		d.ToolDef = func() map[string]any {
			if mcp != nil {
				if td, ok := mcp.Meta["toolDef"].(map[string]any); ok {
					return td
				}
			}
			if step.Context == nil {
				return nil
			}
			return toolDef(tools, tool)
		}
	}
	env.Defer(d)
	return env
}

func build(step *aos.Step, hist History, now time.Time, params, toolDefs, inputs bool) *rules.Env {
	env := &rules.Env{
		Method:    step.Method,
		Kind:      string(step.Kind),
		Role:      step.Role(),
		Text:      step.Text(),
		Tool:      step.ToolID(),
		IsError:   step.IsError(),
		Reasoning: step.Reasoning(),
		Now:       now,
	}
	if inputs {
		env.Inputs = step.Inputs()
	}
	if c := step.Context; c != nil {
		a := c.Agent
		env.Agent = rules.Agent{ID: a.ID, Name: a.Name, Version: a.Version, Provider: a.Provider.Name}
		if a.Model != nil {
			env.Agent.Model = firstNonEmpty(a.Model.ID, a.Model.Name)
		}
		if u := c.User; u != nil {
			env.User = rules.User{ID: u.ID, Name: u.Name, Email: u.Email,
				Org: firstNonEmpty(u.Organization.ID, u.Organization.Name)}
		}
		env.TurnID, env.StepID = c.TurnID, c.StepID
		if env.Tool != "" && toolDefs {
			env.ToolDef = toolDef(a.Tools, env.Tool)
		}
	}
	if m := step.MCP; m != nil {
		env.MCP = rules.MCP{Method: m.Method, Tool: m.ToolName, Arguments: m.Arguments}
		mcpMeta(env, m, toolDefs)
	}
	if a := step.A2A; a != nil {
		env.A2A = rules.A2A{Method: a.Method, Text: strings.Join(a.Texts, "\n"), From: a.From,
			To: a.To, ContextID: a.ContextID}
	}
	env.Session = rules.Session{
		ID:        firstNonEmpty(hist.SessionID, step.SessionHint()),
		StepCount: max(hist.StepCount, len(hist.Steps)),
		Steps:     hist.Steps,
	}.WithCounts(hist.Counts)
	if params {
		env.Params = decodeParams(step)
	}
	return env
}

// decodeParams is the step's params as a generic map.
func decodeParams(step *aos.Step) map[string]any {
	if len(step.Params) == 0 {
		return nil
	}
	var m map[string]any
	// ParseStep already validated params as a JSON object; a failure here would be a bug
	// upstream, and rules reading params then see nil.
	if err := json.Unmarshal(step.Params, &m); err != nil {
		return nil
	}
	return m
}

// HistoryStep is how a decided step appears in later steps' session history.
func HistoryStep(step *aos.Step, decision string, seq int64, at time.Time) rules.HistoryStep {
	return rules.HistoryStep{
		Method: step.Method, Kind: string(step.Kind), Tool: step.ToolID(), Decision: decision,
		Text: step.Text(), Seq: seq, ReceivedAt: at,
	}
}

// FromMethodParams decodes a step given as a method and its params (a test case, a draft
// in the console) the way the guardian decodes a request, and builds its Env. It is the
// build function of rules.RunTests.
func FromMethodParams(method string, params json.RawMessage) (*rules.Env, error) {
	req := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      int             `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params,omitempty"`
	}{"2.0", 1, method, params}
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("ruleenv: params are not JSON: %w", err)
	}
	step, aerr := aos.ParseStep(raw)
	if aerr != nil {
		return nil, fmt.Errorf("ruleenv: %w", aerr)
	}
	return Build(step, History{}, time.Time{}), nil
}

// mcpMeta reads what an MCP gateway adds in the AOS params' _meta (the wrapped layout):
// the tool's definition from the server's tools/list (toolDef, with its annotations such as
// readOnlyHint and destructiveHint), and for a response the tool it answers (tool), which
// an MCP response does not name itself. The MCP message is never changed by this.
func mcpMeta(env *rules.Env, m *aos.MCPParams, toolDefs bool) {
	if m.Meta == nil {
		return
	}
	if env.Tool == "" && m.Method == "" {
		if t, ok := m.Meta["tool"].(string); ok {
			env.Tool = t
		}
	}
	if toolDefs && env.Tool != "" {
		if td, ok := m.Meta["toolDef"].(map[string]any); ok {
			env.ToolDef = td
		}
	}
}

// toolDef finds the tool in the agent's tool list (by id, then by name) and returns it as
// a generic map, the shape rules see for any JSON.
func toolDef(tools []aos.ToolDefinition, tool string) map[string]any {
	for i := range tools {
		if tools[i].ID == tool || tools[i].Name == tool {
			b, err := json.Marshal(tools[i])
			if err != nil {
				return nil
			}
			var m map[string]any
			if json.Unmarshal(b, &m) != nil {
				return nil
			}
			return m
		}
	}
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
