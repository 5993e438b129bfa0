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
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeResponses serves the OpenAI Responses API (POST /v1/responses, streamed) the way
// Codex reads it: a turn whose input does not yet end in a function call output gets a call
// of Codex's shell tool running s.command; one that does gets text quoting the output.
func fakeResponses(t *testing.T, s *script) *httptest.Server {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/responses") {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Tools []struct {
				Type string `json:"type"`
				Name string `json:"name"`
			} `json:"tools"`
			Input []struct {
				Type   string          `json:"type"`
				Output json.RawMessage `json:"output"`
			} `json:"input"`
		}
		s.watch(r)
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var names []string
		for _, tool := range req.Tools {
			names = append(names, tool.Name)
		}
		id := n.Add(1)
		var item map[string]any
		if k := len(req.Input); k > 0 && req.Input[k-1].Type == "function_call_output" {
			out := contentText(req.Input[k-1].Output)
			s.mu.Lock()
			s.seen = append(s.seen, out)
			s.mu.Unlock()
			item = map[string]any{"type": "message", "role": "assistant", "id": fmt.Sprintf("msg_%d", id),
				"content": []any{map[string]any{"type": "output_text", "text": "Tool said: " + out, "annotations": []any{}}}}
		} else {
			s.mu.Lock()
			cmd := s.command
			s.mu.Unlock()
			var name string
			var args map[string]any
			switch {
			case slices.Contains(names, "exec_command"):
				name, args = "exec_command", map[string]any{"cmd": cmd}
			case slices.Contains(names, "shell_command"):
				name, args = "shell_command", map[string]any{"command": cmd}
			case slices.Contains(names, "shell"):
				name, args = "shell", map[string]any{"command": []string{"bash", "-lc", cmd}}
			default:
				t.Errorf("no shell tool among %v", names)
				http.Error(w, "no shell tool", http.StatusBadRequest)
				return
			}
			a, _ := json.Marshal(args)
			item = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", id), "call_id": fmt.Sprintf("call_%d", id),
				"name": name, "arguments": string(a)}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(data map[string]any) {
			b, _ := json.Marshal(data)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", data["type"], b)
		}
		resp := map[string]any{"id": fmt.Sprintf("resp_%d", id), "object": "response", "status": "in_progress", "output": []any{}}
		send(map[string]any{"type": "response.created", "response": resp})
		send(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
		send(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
		done := map[string]any{"id": resp["id"], "object": "response", "status": "completed", "output": []any{item},
			"usage": map[string]any{"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
				"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}}
		send(map[string]any{"type": "response.completed", "response": done})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestCodex(t *testing.T) {
	codex := agentBin(t, "codex")
	g := startGuardian(t)
	s := &script{}
	model := fakeResponses(t, s)
	home := filepath.Join(t.TempDir(), "home")
	project := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".codex"), 0o700))
	require.NoError(t, os.MkdirAll(project, 0o700))
	config := fmt.Sprintf(`model = "gpt-5-codex"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.fake]
name = "fake"
base_url = "%s/v1"
wire_api = "responses"
env_key = "FAKE_OPENAI_KEY"
`, model.URL)
	require.NoError(t, os.WriteFile(filepath.Join(home, ".codex", "config.toml"), []byte(config), 0o600))
	vigil := func(args ...string) string {
		cmd := exec.Command(os.Getenv("VIGIL_BIN"), append([]string{"hook", "install", "codex", "--guardian", g.URL}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "CODEX_HOME="+filepath.Join(home, ".codex"))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		t.Logf("vigil hook install codex %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	require.Contains(t, vigil("--user"), "trusted "+filepath.Join(home, ".codex", "hooks.json")+":pre_tool_use:0:0")
	run := func(t *testing.T, prompt string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// No --dangerously-bypass-hook-trust: Codex runs the hooks because the installer
		// trusted them in config.toml.
		cmd := exec.CommandContext(ctx, codex, "exec", "--skip-git-repo-check", prompt)
		cmd.Dir = project
		cmd.Env = append(os.Environ(), "HOME="+home, "CODEX_HOME="+filepath.Join(home, ".codex"), "FAKE_OPENAI_KEY=sk-fake", "NO_COLOR=1")
		b, err := cmd.CombinedOutput()
		t.Logf("codex: err=%v\n%s", err, b)
		return string(b)
	}
	// codex exec reports a blocked prompt without the hook's reason.
	runCases(t, g, s, project, "hook: UserPromptSubmit Blocked", run)

	// The same from the project's .codex/hooks.json: Codex reads a project's hooks once the
	// project is trusted, and their trust from the user's config.toml, where the installer
	// wrote it.
	t.Run("a project install is trusted too", func(t *testing.T) {
		vigil("--uninstall")
		f, err := os.OpenFile(filepath.Join(home, ".codex", "config.toml"), os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = fmt.Fprintf(f, "\n[projects.%q]\ntrust_level = \"trusted\"\n", project)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		out := vigil("--project", project)
		require.Contains(t, out, "trusted "+filepath.Join(project, ".codex", "hooks.json")+":pre_tool_use:0:0")
		require.NotContains(t, out, "only once you trust the project")
		s.set("rm victim.txt")
		victim := filepath.Join(project, "victim.txt")
		require.NoError(t, os.WriteFile(victim, []byte("keep me"), 0o600))
		out = run(t, defaultPrompt)
		require.FileExists(t, victim, "the denied rm must not run\n%s", out)
		require.Contains(t, strings.Join(s.results(), "\n"), "rm is not allowed here (Vigil rule no-rm)")
	})
}
