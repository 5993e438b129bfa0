// Package hook makes Vigil the guardian behind the hooks of coding agents (Claude Code,
// Codex, Gemini CLI, Cursor): it translates one hook payload into an AOS step, and the
// guardian's verdict into the answer that agent expects on stdout.
//
// Each agent's contract and quirks (shared/spec/peers/hooks/CONTRACTS.md) live here and
// nowhere else: Codex reports any "allow" output as a failed hook and runs the tool anyway,
// so an allow is answered with nothing; Claude Code and Cursor can ask the user themselves;
// Claude Code and Codex replace the tool input with a rewritten one, while Gemini CLI merges
// it into the original (and Cursor may), so a rewrite that removes an input is denied there.
package hook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/guardian/aos"
)

// The agents, by the name the command line uses.
const (
	ClaudeCode = "claude-code"
	Codex      = "codex"
	Gemini     = "gemini"
	Cursor     = "cursor"
)

// Agents lists the supported agents in the order the usage shows them.
var Agents = []string{ClaudeCode, Codex, Gemini, Cursor}

// ReasonAsk is the reason code with which a rule asks for the agent's own "ask the user"
// instead of a deny. The rule's action stays deny, so an agent without a native ask (Codex,
// Gemini CLI, or any other front end) fails closed; Claude Code answers permissionDecision
// "ask" and Cursor permission "ask" with the rule's message. Only a deny whose every reason
// code is ReasonAsk asks: another rule's code in the same deny keeps it a deny.
const ReasonAsk = "ASK_USER"

// Phase is where in the agent's loop a hook event fires.
type Phase int

// The phases the hook translates. PhaseOther events are answered without asking the
// guardian (nothing to decide).
const (
	PhaseOther Phase = iota
	PhaseBeforeTool
	PhaseAfterTool
	PhasePrompt
)

// payload is the union of every field the agents send that the translation uses.
type payload struct {
	Event          string          `json:"hook_event_name"`
	SessionID      string          `json:"session_id"`
	ConversationID string          `json:"conversation_id"`
	GenerationID   string          `json:"generation_id"`
	TranscriptPath string          `json:"transcript_path"`
	Cwd            string          `json:"cwd"`
	PromptID       string          `json:"prompt_id"`
	TurnID         string          `json:"turn_id"`
	PermissionMode string          `json:"permission_mode"`
	Model          string          `json:"model"`
	Prompt         string          `json:"prompt"`
	ToolName       string          `json:"tool_name"`
	ToolInput      json.RawMessage `json:"tool_input"`
	ToolUseID      string          `json:"tool_use_id"`
	ToolResponse   json.RawMessage `json:"tool_response"`
	ToolOutput     json.RawMessage `json:"tool_output"`
	Output         json.RawMessage `json:"output"`
	Command        string          `json:"command"`
	URL            string          `json:"url"`
	WorkspaceRoots []string        `json:"workspace_roots"`
	UserEmail      string          `json:"user_email"`
	CursorVersion  string          `json:"cursor_version"`
	Timestamp      string          `json:"timestamp"`
}

// Env is what the hook knows besides the payload.
type Env struct {
	// User is the developer the agent runs for (the login name); empty leaves the step
	// without a user unless the payload names one.
	User string
	// Now stamps steps whose payload carries no timestamp.
	Now func() time.Time
}

// Call is one hook invocation translated: the AOS step to send, and what is needed to turn
// the verdict into the agent's answer.
type Call struct {
	Agent string
	// Event is the agent's hook_event_name.
	Event string
	Phase Phase
	// Method and Params are the AOS step; Params is nil for PhaseOther.
	Method string
	Params any
	// Tool is the tool name as the agent calls it.
	Tool string
}

// ErrPayload marks a payload the hook cannot read.
var ErrPayload = errors.New("hook payload")

// maxPayload bounds stdin: a Write of a large file carries the file.
const maxPayload = 8 << 20

// Translate reads one hook payload of agent.
func Translate(agent string, data []byte, env Env) (*Call, error) {
	if !slices.Contains(Agents, agent) {
		return nil, fmt.Errorf("unknown agent %q (want %s)", agent, strings.Join(Agents, ", "))
	}
	if len(data) > maxPayload {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrPayload, maxPayload)
	}
	var p payload
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPayload, err)
	}
	if p.Event == "" {
		return nil, fmt.Errorf("%w: hook_event_name is missing", ErrPayload)
	}
	c := &Call{Agent: agent, Event: p.Event, Phase: phaseOf(agent, p.Event)}
	if c.Phase == PhaseOther {
		return c, nil
	}
	sc := stepContext(agent, &p, data, env)
	switch c.Phase {
	case PhasePrompt:
		c.Method = aos.MethodMessage
		c.Params = aos.MessageParams{Context: sc, Message: aos.Message{
			ID: sc.StepID, Role: aos.RoleUser, Content: []aos.Part{aos.TextPart{Text: p.Prompt}}}}
	case PhaseBeforeTool:
		tool, inputs, err := toolCall(agent, &p)
		if err != nil {
			return nil, err
		}
		c.Tool = tool
		c.Method = aos.MethodToolCallRequest
		c.Params = aos.ToolCallRequestParams{Context: sc, ToolCallRequest: aos.ToolCallRequest{
			ExecutionID: executionID(agent, &p, tool), ToolID: tool, Inputs: inputs}}
	case PhaseAfterTool:
		tool, _, err := toolCall(agent, &p)
		if err != nil {
			return nil, err
		}
		c.Tool = tool
		c.Method = aos.MethodToolCallResult
		c.Params = aos.ToolCallResultParams{Context: sc, ExecutionID: executionID(agent, &p, tool),
			Result: toolResult(agent, &p, tool)}
	}
	return c, nil
}

func phaseOf(agent, event string) Phase {
	switch agent {
	case ClaudeCode, Codex:
		switch event {
		case "PreToolUse":
			return PhaseBeforeTool
		case "PostToolUse":
			return PhaseAfterTool
		case "UserPromptSubmit":
			return PhasePrompt
		}
	case Gemini:
		switch event {
		case "BeforeTool":
			return PhaseBeforeTool
		case "AfterTool":
			return PhaseAfterTool
		case "BeforeAgent":
			return PhasePrompt
		}
	case Cursor:
		switch event {
		case "preToolUse", "beforeShellExecution", "beforeMCPExecution":
			return PhaseBeforeTool
		case "postToolUse", "afterShellExecution", "afterMCPExecution":
			return PhaseAfterTool
		case "beforeSubmitPrompt":
			return PhasePrompt
		}
	}
	return PhaseOther
}

// agentInfo names each agent as the console shows it.
var agentInfo = map[string]aos.Agent{
	ClaudeCode: {ID: ClaudeCode, Name: "Claude Code", Provider: aos.AgentProvider{Name: "Anthropic", URL: "https://www.anthropic.com"}},
	Codex:      {ID: Codex, Name: "Codex", Provider: aos.AgentProvider{Name: "OpenAI", URL: "https://openai.com"}},
	Gemini:     {ID: Gemini, Name: "Gemini CLI", Provider: aos.AgentProvider{Name: "Google", URL: "https://ai.google.dev"}},
	Cursor:     {ID: Cursor, Name: "Cursor", Provider: aos.AgentProvider{Name: "Anysphere", URL: "https://cursor.com"}},
}

// stepContext builds the context every step carries. Where the agent ran (cwd, the
// transcript, the permission mode, Cursor's workspace roots) goes into
// context.session.metadata, which rules read as params.context.session.metadata.cwd.
func stepContext(agent string, p *payload, data []byte, env Env) aos.StepContext {
	a := agentInfo[agent]
	a.Version = p.CursorVersion
	if p.Model != "" {
		a.Model = &aos.Model{ID: p.Model, Name: p.Model, Provider: aos.LlmProvider{Name: a.Provider.Name}}
	}
	meta := map[string]any{"hookEvent": p.Event}
	cwd := p.Cwd
	if cwd == "" && len(p.WorkspaceRoots) > 0 {
		cwd = p.WorkspaceRoots[0]
	}
	setNonEmpty(meta, "cwd", cwd)
	setNonEmpty(meta, "transcriptPath", p.TranscriptPath)
	setNonEmpty(meta, "permissionMode", p.PermissionMode)
	if len(p.WorkspaceRoots) > 0 {
		roots := make([]any, len(p.WorkspaceRoots))
		for i, r := range p.WorkspaceRoots {
			roots[i] = r
		}
		meta["workspaceRoots"] = roots
	}
	if p.Event == "beforeMCPExecution" || p.Event == "afterMCPExecution" {
		setNonEmpty(meta, "mcpServer", firstNonEmpty(p.URL, p.Command))
	}
	session := firstNonEmpty(p.SessionID, p.ConversationID)
	if session == "" {
		// Without a session id every call would start its own session in the console; one
		// per agent and directory keeps a developer's calls together.
		session = agent + "@" + cwd
	}
	sc := aos.StepContext{
		Agent:     a,
		Session:   aos.Session{ID: session, Metadata: meta},
		TurnID:    firstNonEmpty(p.PromptID, p.TurnID, p.GenerationID),
		StepID:    stepID(p, data),
		Timestamp: p.Timestamp,
	}
	if sc.Timestamp == "" && env.Now != nil {
		sc.Timestamp = env.Now().UTC().Format(time.RFC3339Nano)
	}
	if env.User != "" || p.UserEmail != "" {
		sc.User = &aos.User{ID: firstNonEmpty(p.UserEmail, env.User), Name: env.User, Email: p.UserEmail}
	}
	return sc
}

// stepID is the tool use id when the agent gives one, else a digest of the payload: stable,
// so a golden test and a retried hook name the same step.
func stepID(p *payload, data []byte) string {
	if p.ToolUseID != "" {
		return p.ToolUseID
	}
	sum := sha256.Sum256(data)
	return p.Event + "-" + hex.EncodeToString(sum[:6])
}

// executionID links a tool call to its result. Gemini CLI and Cursor's shell events carry
// no tool use id; the digest of session, tool and input is the same before and after.
func executionID(agent string, p *payload, tool string) string {
	if p.ToolUseID != "" {
		return p.ToolUseID
	}
	h := sha256.New()
	for _, s := range []string{firstNonEmpty(p.SessionID, p.ConversationID), p.GenerationID, tool, string(p.ToolInput), p.Command} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return agent + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// toolCall returns the tool name and its inputs, one AOS input per key of the agent's tool
// input object (sorted, so the step is the same for the same call).
func toolCall(agent string, p *payload) (string, []aos.ToolArgumentValue, error) {
	if agent == Cursor {
		switch p.Event {
		case "beforeShellExecution", "afterShellExecution":
			return "Shell", []aos.ToolArgumentValue{{Name: "command", Value: p.Command}}, nil
		case "beforeMCPExecution", "afterMCPExecution":
			// Cursor sends the MCP tool's input as a JSON string.
			var s string
			if len(p.ToolInput) > 0 && json.Unmarshal(p.ToolInput, &s) == nil {
				in, err := inputs([]byte(s))
				return p.ToolName, in, err
			}
		}
	}
	if p.ToolName == "" {
		return "", nil, fmt.Errorf("%w: tool_name is missing", ErrPayload)
	}
	in, err := inputs(p.ToolInput)
	return p.ToolName, in, err
}

func inputs(raw []byte) ([]aos.ToolArgumentValue, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return []aos.ToolArgumentValue{}, nil
	}
	var v any
	if err := decodeJSON(raw, &v); err != nil {
		return nil, fmt.Errorf("%w: tool_input: %w", ErrPayload, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return []aos.ToolArgumentValue{{Name: "input", Value: v}}, nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]aos.ToolArgumentValue, len(keys))
	for i, k := range keys {
		out[i] = aos.ToolArgumentValue{Name: k, Value: m[k]}
	}
	return out, nil
}

// toolResult turns the agent's tool response into AOS outputs: Claude Code's stdout and
// stderr, Gemini CLI's llmContent (what the model reads), Codex's string as it is, anything
// else as JSON. Each part names the tool in its metadata (a result step has no tool field).
func toolResult(agent string, p *payload, tool string) aos.ToolCallResult {
	raw := p.ToolResponse
	for _, r := range []json.RawMessage{p.ToolOutput, p.Output} {
		if len(raw) == 0 {
			raw = r
		}
	}
	meta := func(stream string) map[string]any {
		m := map[string]any{"tool": tool}
		if stream != "" {
			m["stream"] = stream
		}
		return m
	}
	res := aos.ToolCallResult{Outputs: []aos.TextPart{}}
	var v any
	if len(raw) == 0 || decodeJSON(raw, &v) != nil || v == nil {
		return res
	}
	switch v := v.(type) {
	case string:
		res.Outputs = append(res.Outputs, aos.TextPart{Text: v, Metadata: meta("")})
	case map[string]any:
		stdout, hasOut := v["stdout"].(string)
		stderr, hasErr := v["stderr"].(string)
		llm, hasLLM := v["llmContent"]
		switch {
		case hasOut || hasErr:
			if stdout != "" || !hasErr || stderr == "" {
				res.Outputs = append(res.Outputs, aos.TextPart{Text: stdout, Metadata: meta("stdout")})
			}
			if stderr != "" {
				res.Outputs = append(res.Outputs, aos.TextPart{Text: stderr, Metadata: meta("stderr")})
			}
		case hasLLM:
			res.Outputs = append(res.Outputs, aos.TextPart{Text: textOf(llm), Metadata: meta("")})
		default:
			res.Outputs = append(res.Outputs, aos.TextPart{Text: textOf(v), Metadata: meta("")})
		}
		for _, k := range []string{"is_error", "isError"} {
			if b, ok := v[k].(bool); ok && b {
				res.IsError = true
			}
		}
		if e, ok := v["error"]; ok && e != nil && e != "" {
			res.IsError = true
		}
	default:
		res.Outputs = append(res.Outputs, aos.TextPart{Text: textOf(v), Metadata: meta("")})
	}
	return res
}

// decodeJSON is json.Unmarshal that keeps numbers as json.Number. A tool's input goes to the
// guardian, into its store and back to the agent as the rewritten input: as float64, every
// integer past 2^53 (an id, a nanosecond timestamp) would come back as another number.
func decodeJSON(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Unmarshal refuses anything after the value; so must this, or `{"a":1} x` would pass.
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid data after the JSON value")
	}
	return nil
}

func textOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func setNonEmpty(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
