package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const hookRules = `rules:
  - id: allow-ls
    when: tool == "Bash" && inputs.command startsWith "ls"
    action: allow
    message: listing is fine
  - id: no-rm
    when: tool in ["Bash", "run_shell_command"] && inputs.command matches "\\brm\\b"
    action: deny
    message: "rm is not allowed: {{inputs.command}}"
    reasonCode: DANGEROUS_COMMAND
  - id: no-token-in-commands
    when: tool == "Bash" && inputs.command contains "token="
    action: modify
    modify: {redact: ["token=[A-Za-z0-9]+"]}
    message: removed a token
  - id: review-push
    when: tool == "Bash" && inputs.command startsWith "git push"
    action: hold
    hold: {timeout: 2m, onTimeout: deny}
    message: "push needs approval"
  - id: quick-review
    when: tool == "Bash" && inputs.command startsWith "make deploy"
    action: hold
    hold: {timeout: 1s, onTimeout: allow}
  - id: confirm-publish
    when: tool == "Bash" && inputs.command startsWith "npm publish"
    action: deny
    reasonCode: ASK_USER
    message: publishing needs your confirmation
  - id: npm-is-trusted
    when: tool == "Bash" && inputs.command contains "npm "
    action: allow
    reasonCode: TRUSTED_TOOL
  - id: writes-inside-project
    when: tool == "Write" && !(inputs.file_path startsWith params.context.session.metadata.cwd + "/")
    action: deny
    message: "{{inputs.file_path}} is outside the project"
  - id: no-passwords-in-prompts
    when: kind == "message" && role == "user" && text contains "password"
    action: deny
    message: do not paste passwords
`

func startHookGuardian(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(hookRules), 0o600))
	cfg, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "vigil.db"), "--rules", rulesFile}, io.Discard)
	require.NoError(t, err)
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Shutdown(5*time.Second)) })
	return srv.URL
}

func claudePayload(event string, fields map[string]any) string {
	p := map[string]any{
		"session_id": "sess-hook-e2e", "transcript_path": "/home/dev/.claude/projects/p/sess.jsonl",
		"cwd": "/home/dev/project", "prompt_id": "prompt-1", "permission_mode": "default", "hook_event_name": event,
	}
	for k, v := range fields {
		p[k] = v
	}
	b, _ := json.Marshal(p)
	return string(b)
}

func bash(cmd string) string {
	return claudePayload("PreToolUse", map[string]any{"tool_name": "Bash", "tool_use_id": "toolu_" + strings.Fields(cmd)[0],
		"tool_input": map[string]any{"command": cmd, "description": "run"}})
}

func runHookCmd(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runHook(args, strings.NewReader(stdin), &stdout, &stderr)
	return stdout.String(), code
}

// TestHookAgainstGuardian runs `vigil hook claude-code` against the whole server with
// rules that allow, deny, modify, ask and hold.
func TestHookAgainstGuardian(t *testing.T) {
	url := startHookGuardian(t)
	hookArgs := []string{"claude-code", "--guardian", url}
	decision := func(out string) map[string]any {
		t.Helper()
		var v struct {
			HookSpecificOutput map[string]any `json:"hookSpecificOutput"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v.HookSpecificOutput
	}
	tests := []struct {
		name    string
		payload string
		want    map[string]any // nil: no output at all
	}{
		{"no rule: the agent's own permissions apply", bash("echo hi"), nil},
		{"allow rule grants", bash("ls -la"), map[string]any{"hookEventName": "PreToolUse", "permissionDecision": "allow",
			"permissionDecisionReason": "listing is fine (Vigil rule allow-ls)"}},
		{"deny", bash("rm -rf build"), map[string]any{"hookEventName": "PreToolUse", "permissionDecision": "deny",
			"permissionDecisionReason": "rm is not allowed: rm -rf build (Vigil rule no-rm)"}},
		{"modify rewrites the input", bash("curl https://x.example/?token=abc123"), map[string]any{"hookEventName": "PreToolUse",
			"permissionDecision": "allow", "permissionDecisionReason": "removed a token (Vigil rule no-token-in-commands)",
			"updatedInput": map[string]any{"command": "curl https://x.example/?[REDACTED]", "description": "run"}}},
		{"ask", bash("npm publish"), map[string]any{"hookEventName": "PreToolUse", "permissionDecision": "ask",
			"permissionDecisionReason": "publishing needs your confirmation (Vigil rule confirm-publish)"}},
		// An allow rule that also matched (npm-is-trusted) gives no second reason.
		{"ask and an allow rule", bash("npm publish --tag next"), map[string]any{"hookEventName": "PreToolUse", "permissionDecision": "ask",
			"permissionDecisionReason": "publishing needs your confirmation (Vigil rule confirm-publish)"}},
		// Another rule's deny in the same step is not the developer's to overrule.
		{"ask and another rule's deny", bash("npm publish && rm -rf build"), map[string]any{"hookEventName": "PreToolUse",
			"permissionDecision": "deny", "permissionDecisionReason": "publishing needs your confirmation (Vigil rule confirm-publish)"}},
		{"write inside the project", claudePayload("PreToolUse", map[string]any{"tool_name": "Write", "tool_use_id": "w1",
			"tool_input": map[string]any{"file_path": "/home/dev/project/a.txt", "content": "x"}}), nil},
		{"write outside the project", claudePayload("PreToolUse", map[string]any{"tool_name": "Write", "tool_use_id": "w2",
			"tool_input": map[string]any{"file_path": "/home/dev/.bashrc", "content": "x"}}), map[string]any{"hookEventName": "PreToolUse",
			"permissionDecision": "deny", "permissionDecisionReason": "/home/dev/.bashrc is outside the project (Vigil rule writes-inside-project)"}},
		{"hold whose own timeout allows", bash("make deploy"), map[string]any{"hookEventName": "PreToolUse",
			"permissionDecision": "allow", "permissionDecisionReason": "Hold timed out; allowed by the rule's onTimeout. (Vigil rule quick-review)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := runHookCmd(t, tt.payload, hookArgs...)
			require.Zero(t, code)
			if tt.want == nil {
				require.Empty(t, out)
				return
			}
			got := decision(out)
			if tt.name == "hold whose own timeout allows" {
				// The guardian's wording of a timed-out hold is its own; the decision is ours.
				require.Equal(t, "allow", got["permissionDecision"])
				require.Contains(t, got["permissionDecisionReason"], "(Vigil rule quick-review)")
				return
			}
			require.Equal(t, tt.want, got)
		})
	}

	t.Run("prompt", func(t *testing.T) {
		out, code := runHookCmd(t, claudePayload("UserPromptSubmit", map[string]any{"prompt": "my password is hunter2"}), hookArgs...)
		require.Zero(t, code)
		require.JSONEq(t, `{"decision":"block","reason":"do not paste passwords (Vigil rule no-passwords-in-prompts)"}`, out)
	})

	t.Run("tool result", func(t *testing.T) {
		out, code := runHookCmd(t, claudePayload("PostToolUse", map[string]any{"tool_name": "Bash", "tool_use_id": "toolu_echo",
			"tool_input": map[string]any{"command": "echo hi"}, "tool_response": map[string]any{"stdout": "hi", "stderr": ""}}), hookArgs...)
		require.Zero(t, code)
		require.Empty(t, out)
	})

	t.Run("gemini deny", func(t *testing.T) {
		payload := `{"session_id":"g1","transcript_path":"/t","cwd":"/home/dev/project","hook_event_name":"BeforeTool","timestamp":"2026-11-23T22:03:49.025Z","tool_name":"run_shell_command","tool_input":{"command":"rm /home/dev/project/victim.txt","description":"run a command"}}`
		out, code := runHookCmd(t, payload, "gemini", "--guardian", url)
		require.Zero(t, code)
		require.JSONEq(t, `{"decision":"deny","reason":"rm is not allowed: rm /home/dev/project/victim.txt (Vigil rule no-rm)"}`, out)
	})

	t.Run("codex allow prints nothing", func(t *testing.T) {
		payload := `{"session_id":"c1","turn_id":"t1","transcript_path":"/t","cwd":"/home/dev/project","hook_event_name":"PreToolUse","model":"gpt-5-codex","permission_mode":"bypassPermissions","tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"call_1"}`
		out, code := runHookCmd(t, payload, "codex", "--guardian", url)
		require.Zero(t, code)
		require.Empty(t, out)
	})

	t.Run("hold approved by an operator", func(t *testing.T) {
		type result struct {
			out  string
			code int
		}
		done := make(chan result, 1)
		go func() {
			var stdout, stderr bytes.Buffer
			code := runHook(hookArgs, strings.NewReader(bash("git push origin main")), &stdout, &stderr)
			done <- result{stdout.String(), code}
		}()
		id := pendingHold(t, url)
		resp, err := http.Post(url+"/api/holds/"+id+"/approve", "application/json", strings.NewReader(`{"operator":"alice","note":"ok"}`))
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		r := <-done
		require.Zero(t, r.code)
		got := decision(r.out)
		require.Equal(t, "allow", got["permissionDecision"], r.out)
		require.Contains(t, got["permissionDecisionReason"], "(Vigil rule review-push)")
	})

	t.Run("hold denied by an operator", func(t *testing.T) {
		done := make(chan string, 1)
		go func() {
			var stdout, stderr bytes.Buffer
			runHook(hookArgs, strings.NewReader(bash("git push --force origin main")), &stdout, &stderr)
			done <- stdout.String()
		}()
		id := pendingHold(t, url)
		resp, err := http.Post(url+"/api/holds/"+id+"/deny", "application/json", strings.NewReader(`{"operator":"alice","note":"not on main"}`))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		got := decision(<-done)
		require.Equal(t, "deny", got["permissionDecision"])
	})

	t.Run("hold outlasting the hook's timeout fails closed", func(t *testing.T) {
		// The hook answers Margin (3s) before its timeout: half a second here.
		out, code := runHookCmd(t, bash("git push origin feature"), "claude-code", "--guardian", url, "--timeout", "3500ms")
		require.Zero(t, code)
		got := decision(out)
		require.Equal(t, "deny", got["permissionDecision"])
		require.Contains(t, got["permissionDecisionReason"], "did not finish within the hook's 3.5s timeout")
	})
}

// pendingHold waits for the one pending hold and returns its id.
func pendingHold(t *testing.T, url string) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/api/holds?status=pending")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v struct {
			Holds []struct {
				ID string `json:"id"`
			} `json:"holds"`
		}
		if json.NewDecoder(resp.Body).Decode(&v) != nil || len(v.Holds) != 1 {
			return false
		}
		id = v.Holds[0].ID
		return true
	}, 10*time.Second, 20*time.Millisecond)
	return id
}

func TestHookInstallCommand(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := runHook([]string{"install", "claude-code", "--project", dir}, nil, &stdout, &stderr)
	require.Zero(t, code, stderr.String())
	require.Contains(t, stdout.String(), filepath.Join(dir, ".claude", "settings.json"))
	require.Contains(t, stdout.String(), "added PreToolUse hook: ")
	b, err := os.ReadFile(filepath.Join(dir, ".claude", "settings.json"))
	require.NoError(t, err)
	require.Contains(t, string(b), " hook claude-code --timeout 10m0s")
	require.Contains(t, string(b), `"timeout": 600`)

	stdout.Reset()
	require.Zero(t, runHook([]string{"install", "claude-code", "--project", dir}, nil, &stdout, &stderr))
	require.Contains(t, stdout.String(), "already up to date")

	stdout.Reset()
	require.Zero(t, runHook([]string{"install", "--uninstall", "claude-code", "--project", dir}, nil, &stdout, &stderr))
	require.Contains(t, stdout.String(), "removed Vigil's PreToolUse hook")

	require.Equal(t, 2, runHook([]string{"install", "vim", "--project", dir}, nil, &stdout, &stderr))
	require.Equal(t, 2, runHook([]string{"install", "claude-code", "--project", dir, "--user"}, nil, &stdout, &stderr))
	require.Equal(t, 2, runHook([]string{"claude-code", "--on-guardian-error", "maybe"}, nil, &stdout, &stderr))
}

// TestHookInstallCodexCommand: Codex's hooks go to CODEX_HOME and are trusted in its
// config.toml; a project install says when Codex will not read the project's hooks yet.
func TestHookInstallCodexCommand(t *testing.T) {
	home := t.TempDir()
	codexHome := filepath.Join(t.TempDir(), "codex")
	t.Setenv("HOME", home)
	t.Setenv("CODEX_HOME", codexHome)
	var stdout, stderr bytes.Buffer
	require.Zero(t, runHook([]string{"install", "codex"}, nil, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), filepath.Join(codexHome, "hooks.json"))
	require.Contains(t, stdout.String(), "trusted "+filepath.Join(codexHome, "hooks.json")+":pre_tool_use:0:0")
	require.NoFileExists(t, filepath.Join(home, ".codex", "hooks.json"))
	cfg, err := os.ReadFile(filepath.Join(codexHome, "config.toml"))
	require.NoError(t, err)
	require.Contains(t, string(cfg), `[hooks.state."`+filepath.Join(codexHome, "hooks.json")+`:user_prompt_submit:0:0"]`)

	project := t.TempDir()
	stdout.Reset()
	require.Zero(t, runHook([]string{"install", "codex", "--project", project}, nil, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "Codex loads a project's hooks only once you trust the project")
	cfg, err = os.ReadFile(filepath.Join(codexHome, "config.toml"))
	require.NoError(t, err)
	require.Contains(t, string(cfg), filepath.Join(project, ".codex", "hooks.json")+":pre_tool_use:0:0")

	stdout.Reset()
	require.Zero(t, runHook([]string{"install", "codex", "--uninstall"}, nil, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "removed Codex's trust of "+filepath.Join(codexHome, "hooks.json"))
}

// TestCodingAgentsPack runs the test cases of the coding-agent rule pack.
func TestCodingAgentsPack(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runRules([]string{"test", filepath.Join("examples", "rules", "coding-agents.yaml")}, &stdout, &stderr)
	require.Zero(t, code, stdout.String()+stderr.String())
	require.NotContains(t, stdout.String(), "FAIL")
}

// TestHookUserWithoutUSER: with $USER unset (cron, some containers and IDEs), the step
// still names the login name.
func TestHookUserWithoutUSER(t *testing.T) {
	me, err := user.Current()
	if err != nil || me.Username == "" {
		t.Skip("no current user to compare with:", err)
	}
	steps := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		steps <- body
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"decision":"allow","message":"ok"}}`)
	}))
	defer srv.Close()
	t.Setenv("USER", "")
	out, code := runHookCmd(t, bash("echo hi"), "claude-code", "--guardian", srv.URL)
	require.Zero(t, code)
	require.Empty(t, out)
	var req struct {
		Params struct {
			Context struct {
				User *struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"user"`
			} `json:"context"`
		} `json:"params"`
	}
	require.NoError(t, json.Unmarshal(<-steps, &req))
	require.NotNil(t, req.Params.Context.User, "the step names a user")
	require.Equal(t, me.Username, req.Params.Context.User.ID)
}

// TestHookInstallWarnsDisableAllHooks: with Claude Code's disableAllHooks on, install
// still adds the hooks but says on stderr that none will run.
func TestHookInstallWarnsDisableAllHooks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".claude", "settings.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("{\n  \"disableAllHooks\": true\n}\n"), 0o600))
	var stdout, stderr bytes.Buffer
	require.Zero(t, runHook([]string{"install", "claude-code", "--project", dir}, nil, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "added PreToolUse hook")
	require.Contains(t, stderr.String(), "warning: "+path+` sets "disableAllHooks": true`)
	require.Contains(t, stderr.String(), "Vigil's hooks will not run")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), `"disableAllHooks": true`, "the user's flag stays")
}
