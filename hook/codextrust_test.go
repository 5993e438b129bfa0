package hook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/require"
)

// TestCodexHookHash checks the hash against the currentHash codex-cli 0.169.0 itself
// reported (app-server hooks/list) for the hooks.json `vigil hook install codex` wrote.
func TestCodexHookHash(t *testing.T) {
	const cmd = "/work/wt/hooks/bin/vigil hook codex --timeout 10m0s --guardian http://127.0.0.1:9"
	star := "*"
	tests := []struct {
		event   string
		matcher *string
		handler map[string]any
		want    string
	}{
		{"PreToolUse", &star, map[string]any{"type": "command", "command": cmd, "timeout": float64(600)},
			"sha256:5e477325f968e9a6ef3403aeee641eae538fb0c58899adee387d0e21efff5dd8"},
		{"PostToolUse", &star, map[string]any{"type": "command", "command": cmd, "timeout": float64(600)},
			"sha256:50ea983fa66fd13cd2650b0dcdc8da56faa35380a4bf2439bc9ec31a68e7b072"},
		{"UserPromptSubmit", nil, map[string]any{"type": "command", "command": cmd, "timeout": float64(600)},
			"sha256:f4924f13359a2ab55d8b1189fffb66484040437aefcbb2fe6cadb3de2e674214"},
		// Codex ignores a UserPromptSubmit matcher and fills in the default timeout.
		{"UserPromptSubmit", &star, map[string]any{"type": "command", "command": cmd},
			"sha256:f4924f13359a2ab55d8b1189fffb66484040437aefcbb2fe6cadb3de2e674214"},
	}
	for _, tt := range tests {
		t.Run(tt.event, func(t *testing.T) {
			got, err := codexHookHash(tt.event, tt.matcher, tt.handler)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	// serde_json does not escape &, < and >: neither may the hash (the value codex-cli 0.169.0
	// reported for this hook, which has no timeout).
	a, err := codexHookHash("PreToolUse", &star, map[string]any{"command": "vigil hook codex --guardian 'http://h/?a&b<c>'"})
	require.NoError(t, err)
	require.Equal(t, "sha256:443616a7220125d5d736f893fbda32251f8b47afbdf893a335fa38bc60be8828", a)
}

func TestCodexEventLabel(t *testing.T) {
	for in, want := range map[string]string{"PreToolUse": "pre_tool_use", "PostToolUse": "post_tool_use",
		"UserPromptSubmit": "user_prompt_submit", "Stop": "stop"} {
		require.Equal(t, want, codexEventLabel(in))
	}
}

// codexInstall installs (or removes) Vigil's Codex hooks for the user (dir "") or a
// project, with the Codex home at home.
func codexInstall(t *testing.T, home, dir string, uninstall bool) InstallResult {
	t.Helper()
	o := installOpts(Codex, dir)
	o.CodexHome, o.Uninstall = home, uninstall
	res, err := Install(o)
	require.NoError(t, err)
	return res
}

func trustState(t *testing.T, path string) map[string]any {
	t.Helper()
	cfg := map[string]any{}
	_, err := toml.DecodeFile(path, &cfg)
	require.NoError(t, err)
	return codexState(cfg)
}

func TestInstallCodexTrust(t *testing.T) {
	home := filepath.Join(t.TempDir(), ".codex")
	project := t.TempDir()
	require.NoError(t, os.MkdirAll(home, 0o700))
	config := filepath.Join(home, "config.toml")
	const userConfig = `# my Codex settings
model = "gpt-5-codex"   # the default model
approval_policy = "on-request"

[projects."/src/app"]
trust_level = "trusted"

[hooks.state."/src/app/.codex/hooks.json:pre_tool_use:0:0"]
trusted_hash = "sha256:someone-else"
enabled = false

[mcp_servers.docs]
command = "docs-mcp"
args = ["--port", "0"]
`
	require.NoError(t, os.WriteFile(config, []byte(userConfig), 0o640))

	res := codexInstall(t, home, "", false)
	require.Equal(t, filepath.Join(home, "hooks.json"), res.Path)
	require.Equal(t, config, res.TrustPath)
	require.True(t, res.Changed)
	require.Contains(t, res.Changes, "trusted "+filepath.Join(home, "hooks.json")+":pre_tool_use:0:0")
	got, err := os.ReadFile(config)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(got), userConfig), "the user's config stays as written:\n%s", got)
	fi, err := os.Stat(config)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())

	// Every Vigil hook is trusted with its own hash; the other entries are untouched.
	hooksJSON := filepath.Join(home, "hooks.json")
	state := trustState(t, config)
	for _, ev := range []string{"pre_tool_use", "post_tool_use", "user_prompt_submit"} {
		entry, _ := state[hooksJSON+":"+ev+":0:0"].(map[string]any)
		require.NotNil(t, entry, ev)
		require.Regexp(t, `^sha256:[0-9a-f]{64}$`, entry["trusted_hash"])
	}
	require.Equal(t, map[string]any{"trusted_hash": "sha256:someone-else", "enabled": false},
		state["/src/app/.codex/hooks.json:pre_tool_use:0:0"])

	// Again: nothing changes.
	again := codexInstall(t, home, "", false)
	require.False(t, again.Changed)
	require.Equal(t, []string{"already up to date"}, again.Changes)
	same, err := os.ReadFile(config)
	require.NoError(t, err)
	require.Equal(t, string(got), string(same))

	// A project's hooks are trusted in the user's config too.
	res = codexInstall(t, home, project, false)
	projectJSON := filepath.Join(project, ".codex", "hooks.json")
	require.Equal(t, projectJSON, res.Path)
	require.Contains(t, trustState(t, config), projectJSON+":post_tool_use:0:0")

	// A changed hook (another timeout) gets the new hash in place.
	o := installOpts(Codex, "")
	o.CodexHome, o.Timeout = home, 5*time.Minute
	o.Command = strings.Replace(o.Command, "10m0s", "5m0s", 1)
	_, err = Install(o)
	require.NoError(t, err)
	after := trustState(t, config)
	require.NotEqual(t, state[hooksJSON+":pre_tool_use:0:0"], after[hooksJSON+":pre_tool_use:0:0"])
	require.Len(t, after, len(state)+3)

	// Uninstalling removes exactly Vigil's trust.
	codexInstall(t, home, "", true)
	codexInstall(t, home, project, true)
	final, err := os.ReadFile(config)
	require.NoError(t, err)
	require.Equal(t, userConfig, string(final))
}

// TestInstallCodexTrustKeepsOtherHooks installs next to another tool's hooks: Vigil's
// entry takes its own position, and an older Vigil entry is replaced where it stood so the
// hooks after it keep their keys (and so their trust).
func TestInstallCodexTrustKeepsOtherHooks(t *testing.T) {
	home := t.TempDir()
	hooksJSON := filepath.Join(home, "hooks.json")
	require.NoError(t, os.WriteFile(hooksJSON, []byte(`{"hooks":{"PreToolUse":[
		{"matcher":"Bash","hooks":[{"type":"command","command":"/usr/bin/vigil hook codex --timeout 1m0s"}]},
		{"matcher":"*","hooks":[{"type":"command","command":"audit-log"}]}]}}`), 0o600))
	codexInstall(t, home, "", false)
	b, err := os.ReadFile(hooksJSON)
	require.NoError(t, err)
	require.Contains(t, string(b), `"audit-log"`)
	state := trustState(t, filepath.Join(home, "config.toml"))
	require.Contains(t, state, hooksJSON+":pre_tool_use:0:0", "Vigil's hook stays first")
	require.NotContains(t, state, hooksJSON+":pre_tool_use:1:0", "the other tool's hook is its user's to trust")
}

func TestUpdateCodexTrustRefusesWhatItCannotEdit(t *testing.T) {
	tests := []struct{ name, config, want string }{
		{"invalid TOML", "model = \n", "not valid TOML"},
		{"inline state table", "[hooks]\nstate = { \"k\" = { enabled = true } }\n", "by hand"},
		{"inline entry of the key", "[hooks.state]\n\"k\" = { trusted_hash = \"old\" }\n", "by hand"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			require.NoError(t, os.WriteFile(path, []byte(tt.config), 0o600))
			_, _, err := updateCodexTrust(path, []codexTrust{{"k", "sha256:new"}}, nil, nil)
			require.ErrorContains(t, err, tt.want)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, tt.config, string(b), "the file is left alone")
		})
	}
}

func TestUpdateCodexTrustEditsInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	const config = "[hooks.state.'k'] # mine\nenabled = true\ntrusted_hash = \"old\"\n\n# next\n[other]\nx = 1"
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
	changes, changed, err := updateCodexTrust(path, []codexTrust{{"k", "sha256:new"}, {`a"b\c`, "sha256:q"}}, nil, nil)
	require.NoError(t, err)
	require.True(t, changed)
	require.Len(t, changes, 2)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "[hooks.state.'k'] # mine\nenabled = true\ntrusted_hash = \"sha256:new\"\n\n# next\n[other]\nx = 1\n\n"+
		"[hooks.state.\"a\\\"b\\\\c\"]\ntrusted_hash = \"sha256:q\"\n", string(b))

	_, changed, err = updateCodexTrust(path, nil, []string{"k", `a"b\c`, "absent"}, nil)
	require.NoError(t, err)
	require.True(t, changed)
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "\n# next\n[other]\nx = 1\n", string(b))
}

func TestCodexProjectTrusted(t *testing.T) {
	home := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, "config.toml"), []byte(`
[projects."/src/app"]
trust_level = "trusted"
[projects."/src/other"]
trust_level = "untrusted"
`), 0o600))
	for dir, want := range map[string]bool{"/src/app": true, "/src/app/sub": true, "/src/other": false, "/src": false} {
		require.Equal(t, want, CodexProjectTrusted(home, dir), dir)
	}
	require.False(t, CodexProjectTrusted(t.TempDir(), "/src/app"), "no config")
}

// TestCodexTrustFollowsMovedHooks: Codex keys its trust of a hook by position, so when
// Vigil's group goes (uninstall) or Vigil's handler leaves a shared group (an install over
// an old layout), the user's hooks after it move and their trust moves with them.
func TestCodexTrustFollowsMovedHooks(t *testing.T) {
	home := t.TempDir()
	hooksJSON := filepath.Join(home, "hooks.json")
	config := filepath.Join(home, "config.toml")
	codexInstall(t, home, "", false)

	// The user adds hooks of their own after Vigil's and trusts them (as Codex's /hooks
	// review writes it).
	b, err := os.ReadFile(hooksJSON)
	require.NoError(t, err)
	withUser := strings.Replace(string(b), `"PreToolUse": [`, `"PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {"type": "command", "command": "audit-log < /dev/stdin"},
          {"type": "command", "command": "notify"}
        ]
      },`, 1)
	// Vigil's group is now second: move it first again, the user's after it.
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(withUser), &doc))
	pre := doc["hooks"].(map[string]any)["PreToolUse"].([]any)
	pre[0], pre[1] = pre[1], pre[0]
	out, err := json.MarshalIndent(doc, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(hooksJSON, out, 0o600))
	cfg, err := os.ReadFile(config)
	require.NoError(t, err)
	// Vigil's trust of pre_tool_use:0:0 stays valid (same hook, same place).
	userTrust := string(cfg) + `
# my own hooks
[hooks.state."` + hooksJSON + `:pre_tool_use:1:0"] # audit
trusted_hash = "sha256:audit"
enabled = true

[hooks.state."` + hooksJSON + `:pre_tool_use:1:1"]
trusted_hash = "sha256:notify"

[tui]
theme = "dark"
`
	require.NoError(t, os.WriteFile(config, []byte(userTrust), 0o600))

	res := codexInstall(t, home, "", true)
	require.Contains(t, res.Changes, "moved Codex's trust of "+hooksJSON+":pre_tool_use:1:0 to "+hooksJSON+":pre_tool_use:0:0")
	state := trustState(t, config)
	require.Equal(t, map[string]any{"trusted_hash": "sha256:audit", "enabled": true}, state[hooksJSON+":pre_tool_use:0:0"])
	require.Equal(t, map[string]any{"trusted_hash": "sha256:notify"}, state[hooksJSON+":pre_tool_use:0:1"])
	require.Len(t, state, 2, "Vigil's trust is gone, the user's moved with their hooks")
	got, err := os.ReadFile(config)
	require.NoError(t, err)
	// Blank lines Vigil's removed tables leave before the user's are not this test's.
	require.Equal(t, `
# my own hooks
[hooks.state."`+hooksJSON+`:pre_tool_use:0:0"] # audit
trusted_hash = "sha256:audit"
enabled = true

[hooks.state."`+hooksJSON+`:pre_tool_use:0:1"]
trusted_hash = "sha256:notify"

[tui]
theme = "dark"
`, "\n"+strings.TrimLeft(string(got), "\n"), "only the moved entries' headers change")
}

// TestCodexTrustFollowsHandlerInSharedGroup: an older Vigil handler shared a group with the
// user's; install moves Vigil into its own group, and the user's handler, now first in
// the group, keeps its trust.
func TestCodexTrustFollowsHandlerInSharedGroup(t *testing.T) {
	home := t.TempDir()
	hooksJSON := filepath.Join(home, "hooks.json")
	config := filepath.Join(home, "config.toml")
	require.NoError(t, os.WriteFile(hooksJSON, []byte(`{"hooks": {"PreToolUse": [
  {"matcher": "*", "hooks": [
    {"type": "command", "command": "/usr/bin/vigil hook codex --timeout 1m0s"},
    {"type": "command", "command": "notify"}]}]}}`), 0o600))
	require.NoError(t, os.WriteFile(config, []byte(`[hooks.state."`+hooksJSON+`:pre_tool_use:0:1"]
trusted_hash = "sha256:notify"
`), 0o600))
	codexInstall(t, home, "", false)
	state := trustState(t, config)
	require.Equal(t, map[string]any{"trusted_hash": "sha256:notify"}, state[hooksJSON+":pre_tool_use:0:0"], "notify moved to handler 0")
	require.Contains(t, state, hooksJSON+":pre_tool_use:1:0", "Vigil's own group is trusted")
	require.NotContains(t, state, hooksJSON+":pre_tool_use:0:1")
}

func TestUpdateCodexTrustMoves(t *testing.T) {
	tests := []struct {
		name, config string
		moves        map[string]string
		want         string // "" when the edit is refused
	}{
		{"a chain moves at once", "[hooks.state.\"k:1\"] # one\ntrusted_hash = \"h1\"\n\n[hooks.state.'k:2']\ntrusted_hash = \"h2\"\n",
			map[string]string{"k:1": "k:0", "k:2": "k:1"},
			"[hooks.state.\"k:0\"] # one\ntrusted_hash = \"h1\"\n\n[hooks.state.\"k:1\"]\ntrusted_hash = \"h2\"\n"},
		{"an entry without a hook gives way", "[hooks.state.\"k:0\"]\ntrusted_hash = \"stale\"\n\n[hooks.state.\"k:1\"]\ntrusted_hash = \"h1\"\n",
			map[string]string{"k:1": "k:0"},
			// removeTable keeps the blank line that ended the removed table's body.
			"\n[hooks.state.\"k:0\"]\ntrusted_hash = \"h1\"\n"},
		{"only trusted hooks move", "model = \"m\"\n", map[string]string{"k:1": "k:0"}, "model = \"m\"\n"},
		{"an inline entry is refused", "[hooks.state]\n\"k:1\" = { trusted_hash = \"h1\" }\n", map[string]string{"k:1": "k:0"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			require.NoError(t, os.WriteFile(path, []byte(tt.config), 0o600))
			_, _, err := updateCodexTrust(path, nil, nil, tt.moves)
			b, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			if tt.want == "" {
				require.ErrorContains(t, err, "by hand")
				require.Equal(t, tt.config, string(b), "the file is left alone")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, string(b))
		})
	}
}

// updateCodexTrust plans the edit of config.toml at path and writes it, as Install does.
func updateCodexTrust(path string, set []codexTrust, del []string, moves map[string]string) ([]string, bool, error) {
	edit, err := planCodexTrust(path, set, del, moves)
	if err != nil {
		return nil, false, err
	}
	if err := edit.write(); err != nil {
		return nil, false, err
	}
	return edit.changes, edit.changed, nil
}
