package hook

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/aos"
)

// editingGuardian answers every tool call request with a modify whose inputs are edit's
// result (an operator's edit of a held step, or a modify rule), built as the guardian builds
// one; a tool result is allowed. It records each request body as it arrived.
type editingGuardian struct {
	t    *testing.T
	edit func(inputs []any) []any

	mu     sync.Mutex
	bodies []string
}

func (g *editingGuardian) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.bodies = append(g.bodies, string(body))
	g.mu.Unlock()
	s, perr := aos.ParseStep(body)
	if perr != nil {
		// Not require: this runs on the server's goroutine.
		g.t.Errorf("the guardian refuses the step: %v", perr)
		http.Error(w, perr.Error(), http.StatusBadRequest)
		return
	}
	res, err := g.decide(s)
	if err != nil {
		g.t.Errorf("decide: %v", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(aos.Response{JSONRPC: "2.0", ID: s.ID, Result: res})
}

func (g *editingGuardian) decide(s *aos.Step) (aos.Result, error) {
	if s.ToolCall == nil {
		return aos.Result{Decision: aos.Allow, Message: "No rule matched; allowed by default."}, nil
	}
	// Decoded as the guardian's own modify does: numbers come back exactly as sent.
	var params map[string]any
	dec := json.NewDecoder(bytes.NewReader(s.Params))
	dec.UseNumber()
	if err := dec.Decode(&params); err != nil {
		return aos.Result{}, err
	}
	call := params["toolCallRequest"].(map[string]any)
	call["inputs"] = g.edit(call["inputs"].([]any))
	edited, err := json.Marshal(params)
	if err != nil {
		return aos.Result{}, err
	}
	mr, err := aos.NewModifiedRequest(s, edited)
	if err != nil {
		return aos.Result{}, err
	}
	return aos.Result{Decision: aos.Modify, Message: "Modified by qa", ModifiedRequest: mr}, nil
}

// run answers payload as agent's hook with g as the guardian.
func (g *editingGuardian) run(agent, payload string) (stdout string) {
	g.t.Helper()
	srv := httptest.NewServer(g)
	defer srv.Close()
	var out, errOut bytes.Buffer
	code := Run(g.t.Context(), agent, strings.NewReader(payload), &out, &errOut, Config{Guardian: srv.URL, Timeout: time.Minute, Env: testEnv})
	require.Zero(g.t, code, errOut.String())
	return out.String()
}

func dropInputs(inputs []any) []any { return []any{} }

func dropInput(name string) func([]any) []any {
	return func(inputs []any) []any {
		var kept []any
		for _, in := range inputs {
			if in.(map[string]any)["name"] != name {
				kept = append(kept, in)
			}
		}
		return kept
	}
}

func setInput(name string, value any) func([]any) []any {
	return func(inputs []any) []any {
		for _, in := range inputs {
			if in := in.(map[string]any); in["name"] == name {
				in["value"] = value
			}
		}
		return inputs
	}
}

// The pre-tool payloads of `rm -rf build` each agent sends.
const (
	claudeRm = `{"session_id":"s","cwd":"/p","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"rm -rf build","description":"clean"},"tool_use_id":"t1"}`
	codexRm  = `{"session_id":"s","turn_id":"t","cwd":"/p","hook_event_name":"PreToolUse","model":"gpt-5-codex","tool_name":"Bash","tool_input":{"command":"rm -rf build"},"tool_use_id":"c1"}`
	geminiRm = `{"session_id":"s","cwd":"/p","hook_event_name":"BeforeTool","timestamp":"2026-11-23T22:03:49.025Z","tool_name":"run_shell_command","tool_input":{"command":"rm -rf build","description":"clean"}}`
	cursorRm = `{"hook_event_name":"preToolUse","conversation_id":"c","generation_id":"g","workspace_roots":["/p"],"tool_name":"Shell","tool_input":{"command":"rm -rf build","description":"clean"},"tool_use_id":"u1"}`
)

// TestModifyNeverAllowsTheOriginal: a changed tool call is answered with exactly the changed
// input, or denied where the agent cannot be made to run exactly that. An edit that leaves no
// inputs is still a change: Claude Code and Codex replace the whole input, so they get
// updatedInput {}; Gemini CLI merges tool_input into the call's arguments (and Cursor may), so
// an edit that removes an input, or all of them, is denied there rather than answered with an
// allow that runs the original.
func TestModifyNeverAllowsTheOriginal(t *testing.T) {
	const reason = "Modified by qa (Vigil)"
	tests := []struct {
		name, agent, payload string
		edit                 func([]any) []any
		// want is the whole answer of an allow; wantDeny a part of a deny's reason.
		want, wantDeny string
	}{
		{"claude no inputs", ClaudeCode, claudeRm, dropInputs,
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"` + reason + `","updatedInput":{}}}`, ""},
		{"claude one input removed", ClaudeCode, claudeRm, dropInput("description"),
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"` + reason + `","updatedInput":{"command":"rm -rf build"}}}`, ""},
		{"codex no inputs", Codex, codexRm, dropInputs,
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"` + reason + `","updatedInput":{}}}`, ""},
		{"gemini no inputs", Gemini, geminiRm, dropInputs, "",
			`the change removes "command", "description" from the call, but Gemini CLI merges a hook's tool_input into the call's own arguments`},
		{"gemini one input removed", Gemini, geminiRm, dropInput("description"), "",
			`the change removes "description" from the call, but Gemini CLI merges`},
		{"gemini rewrite keeps every input", Gemini, geminiRm, setInput("command", "rm -rf build/tmp"),
			`{"decision":"allow","reason":"` + reason + `","hookSpecificOutput":{"hookEventName":"BeforeTool","tool_input":{"command":"rm -rf build/tmp","description":"clean"}}}`, ""},
		{"cursor no inputs", Cursor, cursorRm, dropInputs, "",
			`the change removes "command", "description" from the call, but Cursor may merge`},
		{"cursor one input removed", Cursor, cursorRm, dropInput("command"), "",
			`the change removes "command" from the call, but Cursor may merge`},
		{"cursor rewrite keeps every input", Cursor, cursorRm, setInput("command", "rm -rf build/tmp"),
			`{"permission":"allow","user_message":"` + reason + `","agent_message":"` + reason + `","updated_input":{"command":"rm -rf build/tmp","description":"clean"}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &editingGuardian{t: t, edit: tt.edit}
			out := g.run(tt.agent, tt.payload)
			require.Len(t, g.bodies, 1)
			if tt.want != "" {
				require.JSONEq(t, tt.want, out)
				return
			}
			var a struct {
				HookSpecificOutput struct {
					PermissionDecision       string `json:"permissionDecision"`
					PermissionDecisionReason string `json:"permissionDecisionReason"`
				} `json:"hookSpecificOutput"`
				Decision     string `json:"decision"`
				Reason       string `json:"reason"`
				Permission   string `json:"permission"`
				AgentMessage string `json:"agent_message"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &a), out)
			decision := a.HookSpecificOutput.PermissionDecision + a.Decision + a.Permission
			require.Equal(t, "deny", decision, out)
			require.Contains(t, a.HookSpecificOutput.PermissionDecisionReason+a.Reason+a.AgentMessage, reason+" — "+tt.wantDeny)
			var fields map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &fields))
			require.NotContains(t, fields, "updated_input", "a deny carries no input")
			require.NotContains(t, fields, "hookSpecificOutput", "a deny carries no input")
		})
	}
}

// TestLargeNumbersPassThrough: numbers in a tool's input and output reach the guardian, and
// come back in the rewritten input, with every digit they had; float64 would turn
// 12345678901234567891 into 12345678901234567000 and 9007199254740993 into 9007199254740992.
func TestLargeNumbersPassThrough(t *testing.T) {
	const input = `{"command":"touch original.txt","id":12345678901234567891,"small":9007199254740993,"nested":{"max":18446744073709551615,"ratio":0.10000000000000000555,"list":[-9223372036854775809,1.0]}}`
	// What a float64 would change, as the step and the answer must carry it.
	exact := []string{`12345678901234567891`, `9007199254740993`, `18446744073709551615`, `0.10000000000000000555`, `-9223372036854775809`, `1.0]`}
	tests := []struct {
		name, agent, payload string
		// inAnswer: the rewritten input comes back to the agent (Cursor's MCP hook is denied).
		inAnswer bool
	}{
		{"codex", Codex, `{"session_id":"s-bigint","turn_id":"t","cwd":"/p","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"bi1","tool_input":` + input + `}`, true},
		{"claude", ClaudeCode, `{"session_id":"s","cwd":"/p","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"bi2","tool_input":` + input + `}`, true},
		{"gemini", Gemini, `{"session_id":"s","cwd":"/p","hook_event_name":"BeforeTool","tool_name":"run_shell_command","tool_input":` + input + `}`, true},
		{"cursor", Cursor, `{"hook_event_name":"preToolUse","conversation_id":"c","generation_id":"g","workspace_roots":["/p"],"tool_name":"Shell","tool_use_id":"bi3","tool_input":` + input + `}`, true},
		// Cursor sends an MCP tool's input as a JSON string.
		{"cursor mcp", Cursor, `{"hook_event_name":"beforeMCPExecution","conversation_id":"c","generation_id":"g","workspace_roots":["/p"],"tool_name":"query","tool_input":` + jsonString(input) + `,"url":"http://mcp.example"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &editingGuardian{t: t, edit: setInput("command", "touch rewritten.txt")}
			out := g.run(tt.agent, tt.payload)
			require.Len(t, g.bodies, 1)
			for _, n := range exact {
				require.Contains(t, g.bodies[0], n, "the step the guardian stores")
			}
			if !tt.inAnswer {
				return
			}
			require.Contains(t, out, "touch rewritten.txt")
			for _, n := range exact {
				require.Contains(t, out, n, "the rewritten input")
			}
		})
	}

	// A tool's output, which the guardian reads as text.
	results := []struct {
		name, agent, payload string
	}{
		{"gemini", Gemini, `{"session_id":"s","cwd":"/p","hook_event_name":"AfterTool","tool_name":"read_file","tool_input":{"path":"a.json"},"tool_response":{"llmContent":` + input + `}}`},
		{"cursor", Cursor, `{"hook_event_name":"postToolUse","conversation_id":"c","generation_id":"g","workspace_roots":["/p"],"tool_name":"Shell","tool_input":{"command":"x"},"tool_use_id":"u1","tool_output":` + input + `}`},
	}
	for _, tt := range results {
		t.Run(tt.name+" result", func(t *testing.T) {
			g := &editingGuardian{t: t}
			g.run(tt.agent, tt.payload)
			require.Len(t, g.bodies, 1)
			for _, n := range exact {
				require.Contains(t, g.bodies[0], n, "the output the guardian stores")
			}
		})
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
