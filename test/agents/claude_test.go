//go:build agents

package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeAnthropic serves POST /v1/messages like the Messages API: a request that has not yet
// seen a tool result gets a Bash tool use running s.command; one that has gets a text
// answer quoting the result. Everything else (token counting, titles) gets a short text.
func fakeAnthropic(t *testing.T, s *script) *httptest.Server {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/messages") {
			http.NotFound(w, r)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/count_tokens") {
			_ = json.NewEncoder(w).Encode(map[string]any{"input_tokens": 10})
			return
		}
		var req struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Tools    []struct{ Name string }
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		s.watch(r)
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hasBash := false
		for _, tool := range req.Tools {
			hasBash = hasBash || tool.Name == "Bash"
		}
		var result string
		sawResult := false
		if len(req.Messages) > 0 {
			var blocks []struct {
				Type    string          `json:"type"`
				Content json.RawMessage `json:"content"`
			}
			if json.Unmarshal(req.Messages[len(req.Messages)-1].Content, &blocks) == nil {
				for _, b := range blocks {
					if b.Type == "tool_result" {
						sawResult = true
						result = contentText(b.Content)
					}
				}
			}
		}
		var block map[string]any
		stop := "end_turn"
		switch {
		case sawResult:
			s.mu.Lock()
			s.seen = append(s.seen, result)
			s.mu.Unlock()
			block = map[string]any{"type": "text", "text": "Tool said: " + result}
		case hasBash:
			s.mu.Lock()
			cmd := s.command
			s.mu.Unlock()
			block = map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_fake_%d", n.Add(1)), "name": "Bash",
				"input": map[string]any{"command": cmd, "description": "run a command"}}
			stop = "tool_use"
		default:
			block = map[string]any{"type": "text", "text": "ok"}
		}
		model := req.Model
		if model == "" {
			model = "claude-sonnet-4-5"
		}
		usage := map[string]any{"input_tokens": 10, "output_tokens": 5}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
				"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(event string, data map[string]any) {
			b, _ := json.Marshal(data)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		}
		send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_fake", "type": "message",
			"role": "assistant", "model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}})
		if block["type"] == "tool_use" {
			input, _ := json.Marshal(block["input"])
			send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{
				"type": "tool_use", "id": block["id"], "name": "Bash", "input": map[string]any{}}})
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		} else {
			send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
				"content_block": map[string]any{"type": "text", "text": ""}})
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "text_delta", "text": block["text"]}})
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": 5}})
		send("message_stop", map[string]any{"type": "message_stop"})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// contentText flattens a tool_result's content (a string or text blocks).
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks)
	parts := make([]string, len(blocks))
	for i, b := range blocks {
		parts[i] = b.Text
	}
	return strings.Join(parts, "\n")
}

func TestClaudeCode(t *testing.T) {
	claude := agentBin(t, "claude")
	g := startGuardian(t)
	s := &script{}
	model := fakeAnthropic(t, s)
	home := filepath.Join(t.TempDir(), "home")
	project := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.MkdirAll(home, 0o700))
	require.NoError(t, os.MkdirAll(project, 0o700))
	out := install(t, g, "claude-code", "--project", project)
	require.Contains(t, out, "added PreToolUse hook")

	runCases(t, g, s, project, "the prompt carried a key (Vigil rule no-secret-in-prompt)", func(t *testing.T, prompt string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, claude, "-p", prompt, "--output-format", "json", "--model", "claude-sonnet-4-5")
		cmd.Dir = project
		cmd.Env = append(os.Environ(), "HOME="+home, "ANTHROPIC_BASE_URL="+model.URL, "ANTHROPIC_API_KEY=sk-ant-fake",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1")
		b, err := cmd.CombinedOutput()
		if prompt == defaultPrompt {
			require.NoError(t, err, string(b))
		}
		t.Logf("claude: err=%v\n%s", err, b)
		return string(b)
	})
}
