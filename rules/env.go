package rules

import (
	"maps"
	"time"
)

// Env is what a rule condition sees. Its expr names are the lowerCamel `expr` tags; an
// unknown name or a type mismatch is a compile error.
//
// The guardian builds one Env per step. Evaluate does not modify it, so the same Env may be
// evaluated by several Programs (live engine, backtest drafts) at once.
type Env struct {
	// Method is the JSON-RPC method, e.g. "steps/toolCallRequest".
	Method string `expr:"method" json:"method"`
	// Kind is the step category: trigger, message, knowledge, memoryStore, memoryRetrieval,
	// toolCall, toolResult, mcp, a2a.
	Kind    string  `expr:"kind" json:"kind"`
	Agent   Agent   `expr:"agent" json:"agent"`
	User    User    `expr:"user" json:"user"`
	Session Session `expr:"session" json:"session"`
	TurnID  string  `expr:"turnId" json:"turnId,omitempty"`
	StepID  string  `expr:"stepId" json:"stepId,omitempty"`
	// Role is the message role (user, agent, system) of a message step.
	Role string `expr:"role" json:"role,omitempty"`
	// Text is all human-readable text of the step joined by newlines.
	Text string `expr:"text" json:"text,omitempty"`
	// Tool is the tool id of a tool call (or the MCP tool name).
	Tool string `expr:"tool" json:"tool,omitempty"`
	// ToolDef is the tool's definition from the agent's tool list, nil when unknown.
	ToolDef map[string]any `expr:"toolDef" json:"toolDef,omitempty"`
	// Inputs maps argument names to values for tool calls (MCP arguments included).
	Inputs    map[string]any `expr:"inputs" json:"inputs,omitempty"`
	IsError   bool           `expr:"isError" json:"isError,omitempty"`
	Reasoning string         `expr:"reasoning" json:"reasoning,omitempty"`
	MCP       MCP            `expr:"mcp" json:"mcp"`
	A2A       A2A            `expr:"a2a" json:"a2a"`
	// Params is the raw params object, for anything the typed fields do not cover.
	Params map[string]any `expr:"params" json:"params,omitempty"`
	// Now is the evaluation time; Evaluate fills it from Options.Now when zero.
	Now time.Time `expr:"now" json:"now"`

	// state carries per-evaluation caches (pii(text) once per step, session counts). It is
	// only set on the private copy Evaluate makes.
	state *evalState
	// deferred computes Params, ToolDef and Inputs on first need (see Defer).
	deferred *Deferred
}

// Deferred computes the Env fields that cost the most to build, on first need. Evaluate
// calls each function at most once per evaluation, on its private copy of the Env, when a
// rule that reads the field gets past its guards; a step whose rules all stop at their
// guards never builds them. The functions may run concurrently (several Programs may
// evaluate one Env) and must return the same value each time. A nil function leaves its
// field as it is.
type Deferred struct {
	Params, ToolDef, Inputs func() map[string]any
}

// Defer makes Evaluate compute the fields d covers when first needed, replacing whatever
// they hold.
func (e *Env) Defer(d *Deferred) { e.deferred = d }

// fill computes the deferred fields of need not yet computed in this evaluation.
func (e *Env) fill(need reads) {
	d, st := e.deferred, e.state
	if d == nil || st == nil || need&^st.filled == 0 {
		return
	}
	need &^= st.filled
	st.filled |= need
	if need&readsParams != 0 && d.Params != nil {
		e.Params = d.Params()
	}
	if need&readsToolDef != 0 && d.ToolDef != nil {
		e.ToolDef = d.ToolDef()
	}
	if need&readsInputs != 0 && d.Inputs != nil {
		e.Inputs = d.Inputs()
	}
}

// Agent identifies the agent that sent the step.
type Agent struct {
	ID       string `expr:"id" json:"id,omitempty"`
	Name     string `expr:"name" json:"name,omitempty"`
	Version  string `expr:"version" json:"version,omitempty"`
	Provider string `expr:"provider" json:"provider,omitempty"`
	Model    string `expr:"model" json:"model,omitempty"`
}

// User is the person the agent acts for, when known.
type User struct {
	ID    string `expr:"id" json:"id,omitempty"`
	Name  string `expr:"name" json:"name,omitempty"`
	Email string `expr:"email" json:"email,omitempty"`
	Org   string `expr:"org" json:"org,omitempty"`
}

// Session is the session so far. Steps are the earlier steps, oldest first, without the
// step being evaluated; StepCount counts all earlier steps even when Steps is truncated.
type Session struct {
	ID        string        `expr:"id" json:"id,omitempty"`
	StepCount int           `expr:"stepCount" json:"stepCount"`
	Steps     []HistoryStep `expr:"steps" json:"steps,omitempty"`
	// counts, when set, are Steps counted (see WithCounts).
	counts *SessionCounts
}

// WithCounts returns s carrying c, the counts of exactly s.Steps, which the counting
// helpers then use instead of counting the steps on each evaluation. A caller that keeps a
// session's history can keep its counts up to date as steps come and go (SessionCounts.Add).
func (s Session) WithCounts(c *SessionCounts) Session {
	s.counts = c
	return s
}

// SessionCounts counts history steps by tool (tool calls only, as countTool does), method,
// kind and decision.
type SessionCounts struct {
	Tools, Methods, Kinds, Decisions map[string]int
	// memo answers the helpers that scan the history (see sessionMemo). Clones share it:
	// it knows steps by their position in the session, which no window changes.
	memo *sessionMemo
}

// CountSteps counts steps.
func CountSteps(steps []HistoryStep) *SessionCounts {
	c := &SessionCounts{Tools: map[string]int{}, Methods: map[string]int{}, Kinds: map[string]int{},
		Decisions: map[string]int{}, memo: newSessionMemo()}
	for i := range steps {
		c.Add(&steps[i], 1)
	}
	return c
}

// Add counts h (delta 1) or forgets it (delta -1).
func (c *SessionCounts) Add(h *HistoryStep, delta int) {
	add := func(m map[string]int, k string) {
		if n := m[k] + delta; n > 0 {
			m[k] = n
		} else {
			delete(m, k)
		}
	}
	if isToolCall(h) {
		add(c.Tools, h.Tool)
	}
	add(c.Methods, h.Method)
	add(c.Kinds, h.Kind)
	add(c.Decisions, h.Decision)
}

// Clone copies c, for a snapshot that later Adds must not change.
func (c *SessionCounts) Clone() *SessionCounts {
	return &SessionCounts{Tools: maps.Clone(c.Tools), Methods: maps.Clone(c.Methods),
		Kinds: maps.Clone(c.Kinds), Decisions: maps.Clone(c.Decisions), memo: c.memo}
}

// HistoryStep is one earlier step of the session as the rules see it.
type HistoryStep struct {
	Method     string    `expr:"method" json:"method,omitempty" yaml:"method,omitempty"`
	Kind       string    `expr:"kind" json:"kind,omitempty" yaml:"kind,omitempty"`
	Tool       string    `expr:"tool" json:"tool,omitempty" yaml:"tool,omitempty"`
	Decision   string    `expr:"decision" json:"decision,omitempty" yaml:"decision,omitempty"`
	Text       string    `expr:"text" json:"text,omitempty" yaml:"text,omitempty"`
	Seq        int64     `expr:"seq" json:"seq,omitempty" yaml:"seq,omitempty"`
	ReceivedAt time.Time `expr:"receivedAt" json:"receivedAt,omitzero" yaml:"receivedAt,omitempty"`
}

// MCP is the MCP message of a protocols/MCP step.
type MCP struct {
	// Method is the MCP method, e.g. "tools/call".
	Method    string         `expr:"method" json:"method,omitempty"`
	Tool      string         `expr:"tool" json:"tool,omitempty"`
	Arguments map[string]any `expr:"arguments" json:"arguments,omitempty"`
}

// A2A is the A2A message of an agent-to-agent step.
type A2A struct {
	Method    string `expr:"method" json:"method,omitempty"`
	Text      string `expr:"text" json:"text,omitempty"`
	From      string `expr:"from" json:"from,omitempty"`
	To        string `expr:"to" json:"to,omitempty"`
	ContextID string `expr:"contextId" json:"contextId,omitempty"`
}
