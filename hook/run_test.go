package hook

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// afterToolPayloads is a tool output of each agent; its output is the text "TOKEN=x".
var afterToolPayloads = map[string]string{
	ClaudeCode: `{"session_id":"s","cwd":"/p","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"cat .env"},"tool_response":{"stdout":"TOKEN=x"},"tool_use_id":"t1"}`,
	Codex:      `{"session_id":"s","turn_id":"t","cwd":"/p","hook_event_name":"PostToolUse","model":"gpt-5-codex","tool_name":"Bash","tool_input":{"command":"cat .env"},"tool_response":"TOKEN=x","tool_use_id":"c1"}`,
	Gemini:     `{"session_id":"s","cwd":"/p","hook_event_name":"AfterTool","timestamp":"2026-11-23T22:03:49.025Z","tool_name":"run_shell_command","tool_input":{"command":"cat .env"},"tool_response":{"llmContent":"TOKEN=x"}}`,
	Cursor:     `{"hook_event_name":"postToolUse","conversation_id":"c","generation_id":"g","workspace_roots":["/p"],"tool_name":"Shell","tool_input":{"command":"cat .env"},"tool_use_id":"u1","tool_output":"TOKEN=x"}`,
}

// TestAfterToolHoldTimeout: a tool result the guardian still holds when the hook's own
// deadline comes is denied, as a deny verdict of a result is for that agent, and stderr
// says what the agent was told.
func TestAfterToolHoldTimeout(t *testing.T) {
	// A guardian holding every step until the hook gives up.
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read first: the server notices the hook hanging up only once the body is read.
		_, _ = io.ReadAll(r.Body)
		<-r.Context().Done()
	}))
	defer hold.Close()
	tests := []struct {
		agent, payload string
		// wantDecision is the answer's decision; "" for an agent that cannot deny a result.
		wantDecision string
		wantStderr   string
	}{
		{ClaudeCode, afterToolPayloads[ClaudeCode], "block", "so it is denied"},
		{Codex, afterToolPayloads[Codex], "block", "so it is denied"},
		{Gemini, afterToolPayloads[Gemini], "deny", "so it is denied"},
		// Cursor's after-hooks only observe: nothing can be withheld, and stderr says so.
		{Cursor, afterToolPayloads[Cursor], "", "Cursor's after-hooks only observe"},
	}
	for _, tt := range tests {
		t.Run(tt.agent, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Run(t.Context(), tt.agent, strings.NewReader(tt.payload), &stdout, &stderr,
				Config{Guardian: hold.URL, Timeout: Margin + 200*time.Millisecond})
			require.Zero(t, code)
			require.Contains(t, stderr.String(), "did not finish within the hook's")
			require.Contains(t, stderr.String(), tt.wantStderr)
			if tt.wantDecision == "" {
				require.JSONEq(t, `{}`, stdout.String())
				require.NotContains(t, stderr.String(), "so it is denied", "Cursor cannot deny a result")
				return
			}
			call, err := Translate(tt.agent, []byte(tt.payload), Env{})
			require.NoError(t, err)
			want := call.Answer(Verdict{Kind: Deny, Reason: strings.TrimSpace(stderr.String())})
			require.JSONEq(t, want.Stdout, stdout.String(), "the answer of a denied result")
			require.Contains(t, stdout.String(), `"decision":"`+tt.wantDecision+`"`)
		})
	}
}

// TestAfterToolTooLarge: a tool output over the guardian's --max-body (a limit below the
// hook's own) is withheld as a too-large tool call is denied, with a reason that names
// --max-body; Cursor cannot withhold it, and stderr says so. --on-guardian-error allow lets
// it through, as it does a too-large tool call.
func TestAfterToolTooLarge(t *testing.T) {
	const maxBody = 4 << 10
	// The guardian's answer to a body over its --max-body.
	small := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody)); err == nil {
			t.Error("the step fits: the test is wrong")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"request too large: the body exceeds %d bytes","data":{"limitBytes":%d}}}`, maxBody, maxBody)
	}))
	defer small.Close()
	large := strings.Repeat("x", 2*maxBody)
	tests := []struct {
		agent, onErr string
		// wantDecision is the answer's decision; "" for none (the output goes on).
		wantDecision string
		wantStderr   []string
	}{
		{ClaudeCode, "deny", "block", []string{"too large for the guardian to review", "so it is withheld", "--max-body"}},
		{Codex, "deny", "block", []string{"too large for the guardian to review", "so it is withheld", "--max-body"}},
		{Gemini, "deny", "deny", []string{"too large for the guardian to review", "so it is withheld", "--max-body"}},
		{Cursor, "deny", "", []string{"too large for the guardian to review", "Cursor's after-hooks only observe", "reached the model unreviewed", "--max-body"}},
		{ClaudeCode, "allow", "", []string{"too large for the guardian to review", "(allowed: --on-guardian-error allow)"}},
		{Codex, "allow", "", []string{"(allowed: --on-guardian-error allow)"}},
		{Gemini, "allow", "", []string{"(allowed: --on-guardian-error allow)"}},
		{Cursor, "allow", "", []string{"(allowed: --on-guardian-error allow)"}},
	}
	for _, tt := range tests {
		t.Run(tt.agent+"/"+tt.onErr, func(t *testing.T) {
			payload := strings.Replace(afterToolPayloads[tt.agent], "TOKEN=x", "TOKEN=x"+large, 1)
			var stdout, stderr bytes.Buffer
			code := Run(t.Context(), tt.agent, strings.NewReader(payload), &stdout, &stderr,
				Config{Guardian: small.URL, Timeout: time.Minute, OnGuardianError: tt.onErr})
			require.Zero(t, code)
			for _, want := range tt.wantStderr {
				require.Contains(t, stderr.String(), want)
			}
			call, err := Translate(tt.agent, []byte(payload), Env{})
			require.NoError(t, err)
			if tt.wantDecision == "" {
				require.Equal(t, call.Answer(Verdict{Kind: Pass}).Stdout, stdout.String(), "the output goes on")
				// Cursor cannot withhold an output, and one that --on-guardian-error allow
				// lets through was not withheld either: stderr must not say it was.
				require.NotContains(t, stderr.String(), "withheld", "the output reached the model")
				return
			}
			want := call.Answer(Verdict{Kind: Deny, Reason: strings.TrimSpace(stderr.String())})
			require.JSONEq(t, want.Stdout, stdout.String(), "the answer of a denied result")
			require.Contains(t, stdout.String(), `"decision":"`+tt.wantDecision+`"`)
		})
	}
}
