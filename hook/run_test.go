package hook

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
		{ClaudeCode, `{"session_id":"s","cwd":"/p","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"cat .env"},"tool_response":{"stdout":"TOKEN=x"},"tool_use_id":"t1"}`,
			"block", "so it is denied"},
		{Codex, `{"session_id":"s","turn_id":"t","cwd":"/p","hook_event_name":"PostToolUse","model":"gpt-5-codex","tool_name":"Bash","tool_input":{"command":"cat .env"},"tool_response":"TOKEN=x","tool_use_id":"c1"}`,
			"block", "so it is denied"},
		{Gemini, `{"session_id":"s","cwd":"/p","hook_event_name":"AfterTool","timestamp":"2026-11-23T22:03:49.025Z","tool_name":"run_shell_command","tool_input":{"command":"cat .env"},"tool_response":{"llmContent":"TOKEN=x"}}`,
			"deny", "so it is denied"},
		// Cursor's after-hooks only observe: nothing can be withheld, and stderr says so.
		{Cursor, `{"hook_event_name":"postToolUse","conversation_id":"c","generation_id":"g","workspace_roots":["/p"],"tool_name":"Shell","tool_input":{"command":"cat .env"},"tool_use_id":"u1","tool_output":"TOKEN=x"}`,
			"", "Cursor's after-hooks only observe"},
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
