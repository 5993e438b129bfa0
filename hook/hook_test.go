package hook

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/aos"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var testEnv = Env{User: "dev", Now: func() time.Time { return time.Date(2026, 11, 23, 22, 0, 0, 0, time.UTC) }}

type goldenAnswer struct {
	Stdout json.RawMessage `json:"stdout,omitempty"`
	Stderr string          `json:"stderr,omitempty"`
	Code   int             `json:"code"`
}

type goldenCase struct {
	File    string                  `json:"file"`
	Line    int                     `json:"line"`
	Event   string                  `json:"event"`
	Method  string                  `json:"method,omitempty"`
	Params  json.RawMessage         `json:"params,omitempty"`
	Answers map[string]goldenAnswer `json:"answers"`
}

// verdicts are the guardian results every payload is answered with in the golden files.
func verdicts(t *testing.T, c *Call) map[string]*aos.Result {
	t.Helper()
	out := map[string]*aos.Result{
		"pass":  {Decision: aos.Allow, Message: "No rule matched; allowed by default."},
		"grant": {Decision: aos.Allow, Message: "Approved by alice", Data: map[string]any{"ruleId": "review-rm"}},
		"deny":  {Decision: aos.Deny, Message: "rm is not allowed", ReasonCode: []string{"DANGEROUS_COMMAND"}, Data: map[string]any{"ruleId": "destructive-shell"}},
		"ask":   {Decision: aos.Deny, Message: "Pushing needs your confirmation", ReasonCode: []string{ReasonAsk}, Data: map[string]any{"ruleId": "confirm-push"}},
	}
	if c.Params != nil {
		out["modify"] = &aos.Result{Decision: aos.Modify, Message: "Redacted a secret", ReasonCode: []string{"SECRET_LEAK"},
			Data: map[string]any{"ruleId": "redact-secrets"}, ModifiedRequest: redacted(t, c)}
	}
	return out
}

// redacted is the modified request a redaction rule would send: every string the rules
// could change replaced.
func redacted(t *testing.T, c *Call) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(c.Params)
	require.NoError(t, err)
	var p map[string]any
	require.NoError(t, json.Unmarshal(b, &p))
	if tc, ok := p["toolCallRequest"].(map[string]any); ok {
		for _, in := range tc["inputs"].([]any) {
			in := in.(map[string]any)
			if _, ok := in["value"].(string); ok {
				in["value"] = "[REDACTED]"
			}
		}
	}
	if m, ok := p["message"].(map[string]any); ok {
		for _, part := range m["content"].([]any) {
			part.(map[string]any)["text"] = "[REDACTED]"
		}
	}
	if r, ok := p["result"].(map[string]any); ok {
		for _, o := range r["outputs"].([]any) {
			o.(map[string]any)["text"] = "[REDACTED]"
		}
	}
	pb, err := json.Marshal(p)
	require.NoError(t, err)
	req, err := json.Marshal(aos.Request{JSONRPC: "2.0", ID: json.RawMessage("1"), Method: c.Method, Params: pb})
	require.NoError(t, err)
	return req
}

func answerOf(o Output) goldenAnswer {
	a := goldenAnswer{Stderr: o.Stderr, Code: o.Code}
	if s := strings.TrimSpace(o.Stdout); s != "" {
		a.Stdout = json.RawMessage(s)
	}
	return a
}

// TestGolden translates every captured payload of every agent into its step and answers it
// with each kind of verdict; the steps must pass the guardian's own parser.
func TestGolden(t *testing.T) {
	for _, agent := range Agents {
		t.Run(agent, func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join("testdata", "payloads", agent, "*.jsonl"))
			require.NoError(t, err)
			require.NotEmpty(t, files)
			var cases []goldenCase
			for _, file := range files {
				f, err := os.Open(file)
				require.NoError(t, err)
				sc := bufio.NewScanner(f)
				sc.Buffer(nil, 1<<20)
				for line := 1; sc.Scan(); line++ {
					data := append([]byte(nil), sc.Bytes()...)
					c, err := Translate(agent, data, testEnv)
					require.NoError(t, err, "%s:%d", file, line)
					require.NotEqual(t, PhaseOther, c.Phase, "%s:%d: every captured event is translated", file, line)
					gc := goldenCase{File: filepath.Base(file), Line: line, Event: c.Event, Method: c.Method,
						Answers: map[string]goldenAnswer{}}
					params, err := json.Marshal(c.Params)
					require.NoError(t, err)
					gc.Params = params
					req, err := json.Marshal(aos.Request{JSONRPC: "2.0", ID: json.RawMessage("1"), Method: c.Method, Params: params})
					require.NoError(t, err)
					step, aerr := aos.ParseStep(req)
					require.Nil(t, aerr, "%s:%d: the guardian refuses the step: %v", file, line, aerr)
					require.Equal(t, c.Tool, step.ToolID()+toolOfResult(step))
					for name, res := range verdicts(t, c) {
						gc.Answers[name] = answerOf(c.Answer(VerdictOf(c, res)))
					}
					cfg := Config{Guardian: "http://127.0.0.1:7878", Timeout: 10 * time.Minute}
					gc.Answers["unreachable"] = answerOf(guardianError(c, cfg, errors.New("connection refused"), false))
					gc.Answers["holdTimeout"] = answerOf(guardianError(c, cfg, errors.New("context deadline exceeded"), true))
					cfg.OnGuardianError = "allow"
					gc.Answers["unreachableAllow"] = answerOf(guardianError(c, cfg, errors.New("connection refused"), false))
					for name, a := range gc.Answers {
						if a.Stdout != nil {
							require.True(t, json.Valid(a.Stdout), "%s:%d %s: stdout is not JSON", file, line, name)
						}
					}
					cases = append(cases, gc)
				}
				require.NoError(t, sc.Err())
				require.NoError(t, f.Close())
			}
			got, err := json.MarshalIndent(cases, "", "  ")
			require.NoError(t, err)
			got = append(got, '\n')
			golden := filepath.Join("testdata", "golden", agent+".json")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, got, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.JSONEq(t, string(want), string(got))
		})
	}
}

// toolOfResult reads the tool name a result step carries in its outputs' metadata.
func toolOfResult(s *aos.Step) string {
	if s.ToolResult == nil || len(s.ToolResult.Result.Outputs) == 0 {
		return ""
	}
	tool, _ := s.ToolResult.Result.Outputs[0].Metadata["tool"].(string)
	return tool
}

// TestQuirks pins the answers the agents' contracts make critical, independent of the
// golden files.
func TestQuirks(t *testing.T) {
	pre := func(agent, event string) *Call {
		return &Call{Agent: agent, Event: event, Phase: PhaseBeforeTool}
	}
	deny := Verdict{Kind: Deny, Reason: "no (Vigil rule r)"}
	tests := []struct {
		name string
		call *Call
		v    Verdict
		want string
	}{
		{"codex allow prints nothing", pre(Codex, "PreToolUse"), Verdict{Kind: Grant, Reason: "ok"}, ""},
		{"codex ask denies", pre(Codex, "PreToolUse"), Verdict{Kind: Ask, Reason: "confirm"},
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"confirm"}}`},
		// Codex rejects a bare allow but takes one that carries updatedInput (verified with
		// codex-cli 0.169.0: the rewritten command runs).
		{"codex modify allows with the new input", pre(Codex, "PreToolUse"), Verdict{Kind: Modify, Reason: "x", Input: map[string]any{"command": "ls"}},
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"x","updatedInput":{"command":"ls"}}}`},
		{"claude pass leaves its own permissions", pre(ClaudeCode, "PreToolUse"), Verdict{Kind: Pass}, ""},
		{"claude deny", pre(ClaudeCode, "PreToolUse"), deny,
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no (Vigil rule r)"}}`},
		{"claude modify", pre(ClaudeCode, "PreToolUse"), Verdict{Kind: Modify, Reason: "x", Input: map[string]any{"command": "ls"}},
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"x","updatedInput":{"command":"ls"}}}`},
		// A modify with no input to hand over must not become an allow of the original call.
		{"claude modify with nothing to apply denies", pre(ClaudeCode, "PreToolUse"), Verdict{Kind: Modify, Reason: "x"},
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"x` + notApplied + `"}}`},
		{"codex modify with nothing to apply denies", pre(Codex, "PreToolUse"), Verdict{Kind: Modify, Reason: "x"},
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"x` + notApplied + `"}}`},
		{"gemini modify with nothing to apply denies", pre(Gemini, "BeforeTool"), Verdict{Kind: Modify, Reason: "x"},
			`{"decision":"deny","reason":"x` + notApplied + `"}`},
		{"gemini ask denies", pre(Gemini, "BeforeTool"), Verdict{Kind: Ask, Reason: "confirm"}, `{"decision":"deny","reason":"confirm"}`},
		{"cursor shell modify denies", pre(Cursor, "beforeShellExecution"), Verdict{Kind: Modify, Reason: "x"},
			`{"permission":"deny","user_message":"x — Cursor cannot change the input of this hook's calls, so the call is denied.","agent_message":"x — Cursor cannot change the input of this hook's calls, so the call is denied."}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := tt.call.Answer(tt.v)
			require.Zero(t, out.Code)
			if tt.want == "" {
				require.Empty(t, out.Stdout)
				return
			}
			require.JSONEq(t, tt.want, out.Stdout)
		})
	}
}

func TestBadPayloadBlocks(t *testing.T) {
	for _, in := range []string{"", "not json", `{"session_id":"s"}`, `{"hook_event_name":"PreToolUse","tool_input":{}}`} {
		var stdout, stderr bytes.Buffer
		code := Run(t.Context(), ClaudeCode, strings.NewReader(in), &stdout, &stderr, Config{Guardian: "http://127.0.0.1:1"})
		require.Equal(t, 2, code, in)
		require.Empty(t, stdout.String())
		require.Contains(t, stderr.String(), "vigil hook:")
	}
}

// TestToolInputIsOneValue: a tool input with anything after its JSON value is unreadable,
// as json.Unmarshal had it, although the hook now decodes it keeping numbers exact.
func TestToolInputIsOneValue(t *testing.T) {
	for _, in := range []string{`{"q":1} {"q":2}`, `{"q":1} x`, `{"q":1`} {
		payload := `{"hook_event_name":"beforeMCPExecution","conversation_id":"c","tool_name":"query","tool_input":` + jsonString(in) + `}`
		_, err := Translate(Cursor, []byte(payload), testEnv)
		require.ErrorIs(t, err, ErrPayload, in)
	}
	c, err := Translate(Cursor, []byte(`{"hook_event_name":"beforeMCPExecution","conversation_id":"c","tool_name":"query","tool_input":"{\"q\":1} \n"}`), testEnv)
	require.NoError(t, err, "whitespace after the value is fine")
	require.Equal(t, []aos.ToolArgumentValue{{Name: "q", Value: json.Number("1")}}, c.Params.(aos.ToolCallRequestParams).ToolCallRequest.Inputs)
}

func TestOtherEventsPass(t *testing.T) {
	var stdout, stderr bytes.Buffer
	// No guardian is listening: an event the hook does not decide must not need one.
	code := Run(t.Context(), ClaudeCode, strings.NewReader(`{"hook_event_name":"Stop","session_id":"s"}`), &stdout, &stderr,
		Config{Guardian: "http://127.0.0.1:1"})
	require.Zero(t, code)
	require.Empty(t, stdout.String())
}

func TestGuardianAnswers(t *testing.T) {
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32004,"message":"unauthorized"}}`, req.ID)
	}))
	defer refuse.Close()
	// The guardian's answer to a body over its --max-body, and a proxy's in front of it.
	tooLarge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		fmt.Fprint(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"request too large: the body exceeds 10485760 bytes","data":{"limitBytes":10485760}}}`)
	}))
	defer tooLarge.Close()
	proxyTooLarge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		fmt.Fprint(w, `<html><body>413 Request Entity Too Large</body></html>`)
	}))
	defer proxyTooLarge.Close()
	pre := `{"session_id":"s","cwd":"/p","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"t1"}`
	post := `{"session_id":"s","cwd":"/p","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_response":{"stdout":"a"},"tool_use_id":"t1"}`
	tests := []struct {
		name, url, payload, onErr string
		wantOut                   string // substring; "" means no output
	}{
		{"refused step is denied", refuse.URL, pre, "deny", "Vigil refused the step: unauthorized (JSON-RPC -32004)"},
		{"refused step with allow passes", refuse.URL, pre, "allow", ""},
		{"unreachable result passes", "http://127.0.0.1:1", post, "deny", ""},
		{"unreachable request is denied", "http://127.0.0.1:1", pre, "deny", "is not reachable (connection refused)"},
		{"too large step is denied", tooLarge.URL, pre, "deny", "this step is too large for the guardian"},
		{"too large for a proxy is denied", proxyTooLarge.URL, pre, "deny", "this step is too large for the guardian"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Run(t.Context(), ClaudeCode, strings.NewReader(tt.payload), &stdout, &stderr,
				Config{Guardian: tt.url, Timeout: time.Minute, OnGuardianError: tt.onErr})
			require.Zero(t, code)
			if tt.wantOut == "" {
				require.Empty(t, stdout.String())
				require.NotEmpty(t, stderr.String(), "the developer still learns why")
				return
			}
			require.Contains(t, stdout.String(), `"permissionDecision":"deny"`)
			require.Contains(t, stdout.String(), tt.wantOut)
			if strings.Contains(tt.wantOut, "too large") {
				require.NotContains(t, stdout.String(), "VIGIL_API_KEY", "the key is not what is wrong")
				require.NotContains(t, stderr.String(), "VIGIL_API_KEY")
			}
		})
	}
}
