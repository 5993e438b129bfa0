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
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeGemini serves the Gemini API's generateContent, streamGenerateContent (SSE) and
// countTokens: a turn that has not yet seen a function response gets a run_shell_command
// call of s.command; one that has gets text quoting the response. JSON-mode requests (the
// CLI's routing and next-speaker checks) get a JSON answer that satisfies them.
func fakeGemini(t *testing.T, s *script) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, ":countTokens"):
			_ = json.NewEncoder(w).Encode(map[string]any{"totalTokens": 10})
			return
		case strings.HasSuffix(r.URL.Path, ":generateContent"), strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
		default:
			http.NotFound(w, r)
			return
		}
		var req struct {
			Contents []struct {
				Role  string `json:"role"`
				Parts []struct {
					Text             string          `json:"text"`
					FunctionResponse json.RawMessage `json:"functionResponse"`
				} `json:"parts"`
			} `json:"contents"`
			Tools []struct {
				FunctionDeclarations []struct {
					Name string `json:"name"`
				} `json:"functionDeclarations"`
			} `json:"tools"`
			GenerationConfig struct {
				ResponseMimeType string `json:"responseMimeType"`
			} `json:"generationConfig"`
		}
		s.watch(r)
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hasShell := false
		for _, tool := range req.Tools {
			for _, f := range tool.FunctionDeclarations {
				hasShell = hasShell || f.Name == "run_shell_command"
			}
		}
		var response string
		sawResponse := false
		if n := len(req.Contents); n > 0 {
			for _, p := range req.Contents[n-1].Parts {
				if len(p.FunctionResponse) > 0 {
					sawResponse = true
					response = string(p.FunctionResponse)
				}
			}
		}
		var part map[string]any
		switch {
		case req.GenerationConfig.ResponseMimeType == "application/json":
			part = map[string]any{"text": `{"reasoning":"scripted","next_speaker":"user","model_choice":"flash"}`}
		case sawResponse:
			s.mu.Lock()
			s.seen = append(s.seen, response)
			s.mu.Unlock()
			part = map[string]any{"text": "Tool said: " + response}
		case hasShell:
			s.mu.Lock()
			cmd := s.command
			s.mu.Unlock()
			part = map[string]any{"functionCall": map[string]any{"name": "run_shell_command",
				"args": map[string]any{"command": cmd, "description": "run a command"}}}
		default:
			part = map[string]any{"text": "ok"}
		}
		resp := map[string]any{
			"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{part}}, "finishReason": "STOP", "index": 0}},
			"usageMetadata": map[string]any{"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
			"modelVersion":  "gemini-2.5-flash",
		}
		b, _ := json.Marshal(resp)
		if strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: %s\r\n\r\n", b)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestGeminiCLI(t *testing.T) {
	gemini := agentBin(t, "gemini")
	g := startGuardian(t)
	s := &script{}
	model := fakeGemini(t, s)
	home := filepath.Join(t.TempDir(), "home")
	project := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".gemini"), 0o700))
	require.NoError(t, os.MkdirAll(project, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".gemini", "settings.json"),
		[]byte(`{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false}}`), 0o600))
	cmd := exec.Command(os.Getenv("VIGIL_BIN"), "hook", "install", "gemini", "--user", "--guardian", g.URL)
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	t.Logf("vigil hook install gemini:\n%s", out)
	settings, err := os.ReadFile(filepath.Join(home, ".gemini", "settings.json"))
	require.NoError(t, err)
	require.Contains(t, string(settings), `"selectedType": "gemini-api-key"`, "install keeps the other settings")

	runCases(t, g, s, project, "the prompt carried a key (Vigil rule no-secret-in-prompt)", func(t *testing.T, prompt string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, gemini, "-p", prompt, "--yolo", "-m", "gemini-2.5-flash")
		cmd.Dir = project
		cmd.Env = append(os.Environ(), "HOME="+home, "GOOGLE_GEMINI_BASE_URL="+model.URL, "GEMINI_API_KEY=fake-key",
			"GEMINI_CLI_TRUST_WORKSPACE=true", "NO_COLOR=1")
		b, err := cmd.CombinedOutput()
		t.Logf("gemini: err=%v\n%s", err, b)
		return string(b)
	})
}
