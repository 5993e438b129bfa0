package hook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func installOpts(agent, dir string) InstallOptions {
	return InstallOptions{Agent: agent, Dir: dir, Command: "/opt/vigil/bin/vigil hook " + agent + " --timeout 10m0s", Timeout: 10 * time.Minute}
}

func TestInstallFresh(t *testing.T) {
	want := map[string]string{
		ClaudeCode: `{"hooks":{
			"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"/opt/vigil/bin/vigil hook claude-code --timeout 10m0s","timeout":600}]}],
			"PostToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"/opt/vigil/bin/vigil hook claude-code --timeout 10m0s","timeout":600}]}],
			"UserPromptSubmit":[{"hooks":[{"type":"command","command":"/opt/vigil/bin/vigil hook claude-code --timeout 10m0s","timeout":600}]}]}}`,
		Codex: `{"hooks":{
			"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"/opt/vigil/bin/vigil hook codex --timeout 10m0s","timeout":600}]}],
			"PostToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"/opt/vigil/bin/vigil hook codex --timeout 10m0s","timeout":600}]}],
			"UserPromptSubmit":[{"hooks":[{"type":"command","command":"/opt/vigil/bin/vigil hook codex --timeout 10m0s","timeout":600}]}]}}`,
		Gemini: `{"hooks":{
			"BeforeTool":[{"matcher":".*","hooks":[{"type":"command","name":"vigil","command":"/opt/vigil/bin/vigil hook gemini --timeout 10m0s","timeout":600000}]}],
			"AfterTool":[{"matcher":".*","hooks":[{"type":"command","name":"vigil","command":"/opt/vigil/bin/vigil hook gemini --timeout 10m0s","timeout":600000}]}],
			"BeforeAgent":[{"hooks":[{"type":"command","name":"vigil","command":"/opt/vigil/bin/vigil hook gemini --timeout 10m0s","timeout":600000}]}]}}`,
		Cursor: `{"version":1,"hooks":{
			"preToolUse":[{"command":"/opt/vigil/bin/vigil hook cursor --timeout 10m0s","timeout":600,"failClosed":true}],
			"postToolUse":[{"command":"/opt/vigil/bin/vigil hook cursor --timeout 10m0s","timeout":600,"failClosed":true}],
			"beforeSubmitPrompt":[{"command":"/opt/vigil/bin/vigil hook cursor --timeout 10m0s","timeout":600,"failClosed":true}]}}`,
	}
	for _, agent := range Agents {
		t.Run(agent, func(t *testing.T) {
			dir := t.TempDir()
			res, err := Install(installOpts(agent, dir))
			require.NoError(t, err)
			require.True(t, res.Changed)
			require.Len(t, res.Changes, 3)
			got, err := os.ReadFile(res.Path)
			require.NoError(t, err)
			require.JSONEq(t, want[agent], string(got))
			fi, err := os.Stat(res.Path)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

			// Again: nothing changes.
			res, err = Install(installOpts(agent, dir))
			require.NoError(t, err)
			require.False(t, res.Changed)
			require.Equal(t, []string{"already up to date"}, res.Changes)

			// Uninstall removes everything Vigil added.
			res, err = Install(InstallOptions{Agent: agent, Dir: dir, Uninstall: true})
			require.NoError(t, err)
			require.True(t, res.Changed)
			require.Len(t, res.Changes, 3)
			got, err = os.ReadFile(res.Path)
			require.NoError(t, err)
			if agent == Cursor {
				require.JSONEq(t, `{"version":1}`, string(got))
			} else {
				require.JSONEq(t, `{}`, string(got))
			}
		})
	}
}

// TestInstallExisting merges with a real-looking settings file: other settings, another
// tool's hooks in the same event (and in the same matcher group), an older Vigil entry.
func TestInstallExisting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".claude", "settings.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	existing := `{
  "model": "opus",
  "permissions": {"allow": ["Bash(npm test:*)"], "deny": ["Read(./.env)"]},
  "hooks": {
    "PreToolUse": [
      {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/audit-bash.sh"}]},
      {"matcher": "*", "hooks": [
        {"type": "command", "command": "/usr/bin/vigil hook claude-code", "timeout": 60},
        {"type": "command", "command": "notify-send tool"}]}
    ],
    "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]
  }
}`
	require.NoError(t, os.WriteFile(path, []byte(existing), 0o644))
	res, err := Install(installOpts(ClaudeCode, dir))
	require.NoError(t, err)
	require.True(t, res.Changed)
	require.Equal(t, []string{
		"updated PreToolUse hook: /opt/vigil/bin/vigil hook claude-code --timeout 10m0s",
		"added PostToolUse hook: /opt/vigil/bin/vigil hook claude-code --timeout 10m0s",
		"added UserPromptSubmit hook: /opt/vigil/bin/vigil hook claude-code --timeout 10m0s",
	}, res.Changes)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.JSONEq(t, `{
  "model": "opus",
  "permissions": {"allow": ["Bash(npm test:*)"], "deny": ["Read(./.env)"]},
  "hooks": {
    "PreToolUse": [
      {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/audit-bash.sh"}]},
      {"matcher": "*", "hooks": [{"type": "command", "command": "notify-send tool"}]},
      {"matcher": "*", "hooks": [{"type": "command", "command": "/opt/vigil/bin/vigil hook claude-code --timeout 10m0s", "timeout": 600}]}
    ],
    "PostToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "/opt/vigil/bin/vigil hook claude-code --timeout 10m0s", "timeout": 600}]}],
    "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "/opt/vigil/bin/vigil hook claude-code --timeout 10m0s", "timeout": 600}]}],
    "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]
  }
}`, string(got))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "an existing file keeps its mode")

	res, err = Install(InstallOptions{Agent: ClaudeCode, Dir: dir, Uninstall: true})
	require.NoError(t, err)
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	require.JSONEq(t, `{
  "model": "opus",
  "permissions": {"allow": ["Bash(npm test:*)"], "deny": ["Read(./.env)"]},
  "hooks": {
    "PreToolUse": [
      {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/audit-bash.sh"}]},
      {"matcher": "*", "hooks": [{"type": "command", "command": "notify-send tool"}]}
    ],
    "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]
  }
}`, string(got))
}

func TestInstallCursorKeepsOtherHooks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".cursor", "hooks.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(`{"version":1,"hooks":{"preToolUse":[{"command":"./audit.sh"}],"afterFileEdit":[{"command":"./fmt.sh"}]}}`), 0o644))
	_, err := Install(installOpts(Cursor, dir))
	require.NoError(t, err)
	_, err = Install(InstallOptions{Agent: Cursor, Dir: dir, Uninstall: true})
	require.NoError(t, err)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.JSONEq(t, `{"version":1,"hooks":{"preToolUse":[{"command":"./audit.sh"}],"afterFileEdit":[{"command":"./fmt.sh"}]}}`, string(got))
}

func TestInstallRefusesBadFiles(t *testing.T) {
	for name, content := range map[string]string{
		"not json":      `{"hooks": `,
		"not an object": `[1,2]`,
		"hooks a list":  `{"hooks": []}`,
		"event a map":   `{"hooks": {"PreToolUse": {}}}`,
		// Claude Code reads plain JSON: a comment is an error to it too.
		"comment": "{\n  // mine\n  \"model\": \"opus\"\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, ".claude", "settings.json")
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
			_, err := Install(installOpts(ClaudeCode, dir))
			require.Error(t, err)
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, content, string(got), "a file Vigil cannot read is left alone")
		})
	}
}

// TestInstallGeminiCommentsOnly: a Gemini CLI settings file of comments alone keeps them,
// each on its own line, above the object install writes; an open block comment is refused.
func TestInstallGeminiCommentsOnly(t *testing.T) {
	for _, tt := range []struct{ name, content, wantErr string }{
		{"line comment without newline", "// nothing yet", ""},
		{"block comment", "/* nothing\n yet */\n", ""},
		{"open block comment", "{/* \"theme\": 1}", "a /* comment is not closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path, err := SettingsPath(Gemini, dir)
			require.NoError(t, err)
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o644))
			_, err = Install(installOpts(Gemini, dir))
			got, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, tt.content, string(got))
				return
			}
			require.NoError(t, err)
			plain, closed := stripComments(got)
			require.True(t, closed)
			var v map[string]any
			require.NoError(t, json.Unmarshal(plain, &v), "%s", got)
			require.Contains(t, v, "hooks")
			require.True(t, strings.HasPrefix(string(got), strings.TrimRight(tt.content, "\n")+"\n"), "%s", got)
		})
	}
}

func TestUninstallMissingFile(t *testing.T) {
	res, err := Install(InstallOptions{Agent: Gemini, Dir: t.TempDir(), Uninstall: true})
	require.NoError(t, err)
	require.False(t, res.Changed)
	require.NoFileExists(t, res.Path)
}

func TestIsVigilCommand(t *testing.T) {
	tests := []struct {
		cmd  string
		want bool
	}{
		{"/usr/local/bin/vigil hook claude-code", true},
		{"vigil hook claude-code --timeout 10m", true},
		{"'/Users/a b/bin/vigil' hook claude-code --guardian http://x", true},
		{`C:\vigil\vigil.exe hook codex`, false}, // another agent
		{"/usr/local/bin/vigil hook codex", false},
		{"/usr/local/bin/notvigil hook claude-code", false},
		{"vigil hooks claude-code", false},
		{"echo vigil hook claude-code", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, IsVigilCommand(tt.cmd, ClaudeCode), tt.cmd)
	}
}

func TestQuoteArg(t *testing.T) {
	require.Equal(t, "/usr/bin/vigil", QuoteArg("/usr/bin/vigil"))
	require.Equal(t, "'/Users/a b/vigil'", QuoteArg("/Users/a b/vigil"))
	require.Equal(t, `'it'\''s'`, QuoteArg("it's"))
	require.Equal(t, "''", QuoteArg(""))
}
