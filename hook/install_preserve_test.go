package hook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// realisticSettings is a Claude Code settings.json as people keep them: keys in their own
// order, commands with && and <, a number too big for a float64, unicode written as is and
// escaped, an empty list, hooks of their own.
const realisticSettings = `{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "model": "opus",
  "env": {
    "BUILD_ID": 12345678901234567890,
    "GREETING": "héllo wörld ✓ 日本",
    "ESCAPED": "caf\u00e9 \"quoted\" \u003cb\u003e",
    "RATIO": 1.50e+3
  },
  "permissions": {
    "allow": ["Bash(npm test:*)", "Bash(make && make test < /dev/null)"],
    "deny": []
  },
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send 'done' && echo \"<ok>\" > /tmp/last"
          }
        ]
      }
    ],
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {
            "type": "command",
            "command": "~/bin/audit.sh < /dev/stdin && exit 0",
            "timeout": 30
          }
        ]
      }
    ]
  },
  "alwaysThinkingEnabled": true,
  "cleanupPeriodDays": 30
}
`

// TestInstallUninstallKeepsFile: install then uninstall gives back the user's file byte for
// byte, and install itself changes only Vigil's entries (the user's bytes stay as written).
func TestInstallUninstallKeepsFile(t *testing.T) {
	tests := []struct {
		name, agent, content string
	}{
		{"realistic, 2 spaces", ClaudeCode, realisticSettings},
		{"4 spaces, no hooks yet", ClaudeCode, "{\n    \"model\": \"sonnet\",\n    \"env\": {\n        \"N\": 98765432109876543210\n    }\n}\n"},
		{"tabs", Gemini, "{\n\t\"theme\": \"GitHub\",\n\t\"hooks\": {\n\t\t\"AfterAgent\": [\n\t\t\t{\n\t\t\t\t\"hooks\": [{\"type\": \"command\", \"command\": \"a && b\"}]\n\t\t\t}\n\t\t]\n\t}\n}\n"},
		{"CRLF", ClaudeCode, "{\r\n  \"model\": \"opus\",\r\n  \"hooks\": {\r\n    \"PreToolUse\": [\r\n      {\r\n        \"matcher\": \"Bash\",\r\n        \"hooks\": [{\"type\": \"command\", \"command\": \"x < y\"}]\r\n      }\r\n    ]\r\n  }\r\n}\r\n"},
		{"one line", Cursor, `{"version":1,"hooks":{"preToolUse":[{"command":"./audit.sh && true"}],"afterFileEdit":[{"command":"./fmt.sh"}]}}`},
		{"one line with spaces", Codex, `{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say <done>"}]}]}, "n": 12345678901234567890}`},
		{"no final newline", Gemini, "{\n  \"theme\": \"Default\"\n}"},
		// Gemini CLI reads its settings through strip-json-comments.
		{"comments", Gemini, "// my settings\n{\n  // the look\n  \"theme\": \"GitHub\", /* dark later */\n  \"hooks\": { // mine first\n    \"AfterAgent\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"say // done\"}]}]\n  }\n  /* end */\n}\n// bye"},
		{"comments, no hooks yet", Gemini, "{\n  /* a */ \"theme\" /* b */ : /* c */ \"Default\" // d\n}\n"},
		// An object of comments only, as a settings template has it: install adds the first
		// member, and the comments stay (before it).
		{"comments in an empty object", Gemini, "{\n  // my settings go here\n}\n"},
		{"comment in an empty object, one line", Gemini, "{ /* nothing yet */ }"},
		{"empty object", ClaudeCode, "{}\n"},
		// Go would read the byte as U+FFFD; the file keeps it.
		{"invalid UTF-8", ClaudeCode, "{\"a\": \"\xff\"}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path, err := SettingsPath(tt.agent, dir)
			require.NoError(t, err)
			o := installOpts(tt.agent, dir)
			if tt.agent == Codex {
				o.CodexHome = t.TempDir()
			}
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o644))

			res, err := Install(o)
			require.NoError(t, err)
			require.True(t, res.Changed)
			installed, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Contains(t, string(installed), o.Command, "the command is written as it is, without \\u0026 escapes")
			for _, keep := range []string{"12345678901234567890", "98765432109876543210", "héllo wörld ✓ 日本", `caf\u00e9 \"quoted\" \u003cb\u003e`,
				"1.50e+3", `"Bash(make && make test < /dev/null)"`, `"./audit.sh && true"`, `"say <done>"`} {
				if strings.Contains(tt.content, keep) {
					require.Contains(t, string(installed), keep, "the user's bytes stay as written")
				}
			}
			if tt.name == "realistic, 2 spaces" {
				// The user's key order, not sorted.
				s := string(installed)
				require.Less(t, strings.Index(s, `"model"`), strings.Index(s, `"env"`))
				require.Less(t, strings.Index(s, `"Stop"`), strings.Index(s, `"PreToolUse"`))
				require.Less(t, strings.Index(s, `"hooks"`), strings.Index(s, `"alwaysThinkingEnabled"`))
				require.Contains(t, s, "\n  \"hooks\": {\n    \"Stop\": [\n", "the file's own indentation")
			}

			again, err := Install(o)
			require.NoError(t, err)
			require.False(t, again.Changed, "a second install changes nothing")

			o.Uninstall = true
			_, err = Install(o)
			require.NoError(t, err)
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			if tt.agent == Cursor && !strings.Contains(tt.content, `"version"`) {
				t.Fatal("a Cursor file without version keeps the version install added: not a round trip")
			}
			require.Equal(t, tt.content, string(got), "install then uninstall gives back the file")
		})
	}
}

// TestInstallNullAndEmptyValues: null where install expects an object or a list counts as
// empty, for every agent; install never panics on it and uninstall leaves it as it is.
func TestInstallNullAndEmptyValues(t *testing.T) {
	events := map[string]string{ClaudeCode: "PreToolUse", Codex: "PreToolUse", Gemini: "BeforeTool", Cursor: "preToolUse"}
	for _, agent := range Agents {
		for _, content := range []string{"null", "null\n", " \n", `{"hooks": null}`, `{"hooks": {"` + events[agent] + `": null}}`} {
			t.Run(agent+" "+strings.TrimSpace(content), func(t *testing.T) {
				dir := t.TempDir()
				path, err := SettingsPath(agent, dir)
				require.NoError(t, err)
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
				o := installOpts(agent, dir)
				if agent == Codex {
					o.CodexHome = t.TempDir()
				}

				o.Uninstall = true
				res, err := Install(o)
				require.NoError(t, err)
				require.False(t, res.Changed)
				got, err := os.ReadFile(path)
				require.NoError(t, err)
				require.Equal(t, content, string(got), "nothing of Vigil's to remove: the file stays as it is")

				o.Uninstall = false
				res, err = Install(o)
				require.NoError(t, err)
				require.True(t, res.Changed)
				got, err = os.ReadFile(path)
				require.NoError(t, err)
				require.Contains(t, string(got), o.Command)
				require.Contains(t, string(got), `"`+events[agent]+`"`)
			})
		}
	}
}

// TestInstallRefusesWrongTypes: a value of the wrong type where install edits is an error
// for install and uninstall alike, and the file is left alone.
func TestInstallRefusesWrongTypes(t *testing.T) {
	for _, agent := range Agents {
		event := map[string]string{ClaudeCode: "PreToolUse", Codex: "PreToolUse", Gemini: "BeforeTool", Cursor: "preToolUse"}[agent]
		for name, content := range map[string]string{
			"root a list":     `[1,2]`,
			"root a string":   `"settings"`,
			"root a number":   `3`,
			"hooks a list":    `{"hooks": []}`,
			"hooks a string":  `{"hooks": "on"}`,
			"hooks false":     `{"hooks": false}`,
			"event an object": `{"hooks": {"` + event + `": {}}}`,
			"event a string":  `{"hooks": {"` + event + `": "vigil"}}`,
			"two values":      `{} {}`,
			"not json":        `{"hooks": `,
			"trailing comma":  `{"hooks": {},}`,
			"comment (JSONC)": "{\n  // mine\n  \"model\": \"x\"\n}",
		} {
			if agent == Gemini && name == "comment (JSONC)" {
				continue // Gemini CLI's settings allow comments (TestInstallUninstallKeepsFile)
			}
			for _, uninstall := range []bool{false, true} {
				t.Run(agent+" "+name, func(t *testing.T) {
					dir := t.TempDir()
					path, err := SettingsPath(agent, dir)
					require.NoError(t, err)
					require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
					require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
					o := installOpts(agent, dir)
					o.Uninstall = uninstall
					if agent == Codex {
						o.CodexHome = t.TempDir()
					}
					_, err = Install(o)
					require.Error(t, err)
					require.Contains(t, err.Error(), "fix", "the error says what to do")
					got, err := os.ReadFile(path)
					require.NoError(t, err)
					require.Equal(t, content, string(got), "a file Vigil cannot edit is left alone")
				})
			}
		}
	}
}

// TestInstallThroughSymlink: a settings file kept in a dotfiles repository and linked in
// (stow, chezmoi) stays a link; the dotfile itself gets the change. Codex's trust file too.
func TestInstallThroughSymlink(t *testing.T) {
	for _, relative := range []bool{false, true} {
		name := "absolute link"
		if relative {
			name = "relative link"
		}
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			dotfiles := filepath.Join(home, "dotfiles")
			require.NoError(t, os.MkdirAll(filepath.Join(dotfiles, "claude"), 0o755))
			require.NoError(t, os.MkdirAll(filepath.Join(home, ".claude"), 0o755))
			real := filepath.Join(dotfiles, "claude", "settings.json")
			require.NoError(t, os.WriteFile(real, []byte("{\n  \"model\": \"opus\"\n}\n"), 0o640))
			link := filepath.Join(home, ".claude", "settings.json")
			target := real
			if relative {
				target = filepath.Join("..", "dotfiles", "claude", "settings.json")
			}
			require.NoError(t, os.Symlink(target, link))

			res, err := Install(installOpts(ClaudeCode, home))
			require.NoError(t, err)
			require.Equal(t, link, res.Path)
			requireLink(t, link, target)
			b, err := os.ReadFile(real)
			require.NoError(t, err)
			require.Contains(t, string(b), "vigil hook claude-code", "the dotfile itself is changed")
			fi, err := os.Stat(real)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o640), fi.Mode().Perm(), "the dotfile keeps its mode")

			_, err = Install(InstallOptions{Agent: ClaudeCode, Dir: home, Uninstall: true})
			require.NoError(t, err)
			requireLink(t, link, target)
			b, err = os.ReadFile(real)
			require.NoError(t, err)
			require.Equal(t, "{\n  \"model\": \"opus\"\n}\n", string(b))

			// Codex: hooks.json and config.toml both linked from the dotfiles.
			codexHome := filepath.Join(home, ".codex")
			require.NoError(t, os.MkdirAll(codexHome, 0o755))
			require.NoError(t, os.MkdirAll(filepath.Join(dotfiles, "codex"), 0o755))
			const config = "model = \"gpt-5-codex\"\n"
			for file, content := range map[string]string{"hooks.json": "{}\n", "config.toml": config} {
				require.NoError(t, os.WriteFile(filepath.Join(dotfiles, "codex", file), []byte(content), 0o600))
				target := filepath.Join(dotfiles, "codex", file)
				if relative {
					target = filepath.Join("..", "dotfiles", "codex", file)
				}
				require.NoError(t, os.Symlink(target, filepath.Join(codexHome, file)))
			}
			codexInstall(t, codexHome, "", false)
			for _, file := range []string{"hooks.json", "config.toml"} {
				fi, err := os.Lstat(filepath.Join(codexHome, file))
				require.NoError(t, err)
				require.Equal(t, os.ModeSymlink, fi.Mode().Type(), "%s stays a link", file)
			}
			b, err = os.ReadFile(filepath.Join(dotfiles, "codex", "config.toml"))
			require.NoError(t, err)
			require.Contains(t, string(b), "trusted_hash", "the trust is written to the dotfile")
			codexInstall(t, codexHome, "", true)
			b, err = os.ReadFile(filepath.Join(dotfiles, "codex", "config.toml"))
			require.NoError(t, err)
			require.Equal(t, config, string(b))
		})
	}
}

func requireLink(t *testing.T, link, target string) {
	t.Helper()
	got, err := os.Readlink(link)
	require.NoError(t, err, "%s is still a symbolic link", link)
	require.Equal(t, target, got)
}

// TestInstallDanglingSymlink: a link whose dotfile does not exist yet gets the dotfile.
func TestInstallDanglingSymlink(t *testing.T) {
	home := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".gemini"), 0o755))
	real := filepath.Join(home, "dotfiles", "gemini.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(real), 0o755))
	link := filepath.Join(home, ".gemini", "settings.json")
	require.NoError(t, os.Symlink(real, link))
	_, err := Install(installOpts(Gemini, home))
	require.NoError(t, err)
	requireLink(t, link, real)
	b, err := os.ReadFile(real)
	require.NoError(t, err)
	require.Contains(t, string(b), "vigil hook gemini")
}

// TestInstallWarnsDisableAllHooks: Claude Code runs no hook at all with disableAllHooks;
// install says so, and leaves the flag as the user set it.
func TestInstallWarnsDisableAllHooks(t *testing.T) {
	tests := []struct {
		name, settings, local string
		warn                  bool
	}{
		{"set", `{"disableAllHooks": true}`, "", true},
		{"set in settings.local.json", `{}`, `{"disableAllHooks": true}`, true},
		{"false", `{"disableAllHooks": false}`, "", false},
		{"absent", `{"model": "opus"}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, ".claude", "settings.json")
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(tt.settings), 0o600))
			if tt.local != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, ".claude", "settings.local.json"), []byte(tt.local), 0o600))
			}
			res, err := Install(installOpts(ClaudeCode, dir))
			require.NoError(t, err)
			if !tt.warn {
				require.Empty(t, res.Warnings)
				return
			}
			require.Len(t, res.Warnings, 1)
			require.Contains(t, res.Warnings[0], "disableAllHooks")
			require.Contains(t, res.Warnings[0], "Vigil's hooks will not run")
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Contains(t, string(b), tt.settings[1:len(tt.settings)-1], "the user's flag stays as written")
		})
	}
}

// TestUninstallKeepsDuplicateKeys: agents read settings with JSON.parse, where the last of
// duplicate keys wins. Install edits that last member; uninstall must not delete it when it
// ends up empty, or the earlier duplicate (here a hook of the user's the agent never ran)
// would become what the agent reads.
func TestUninstallKeepsDuplicateKeys(t *testing.T) {
	const old = `{"matcher": "Bash", "hooks": [{"type": "command", "command": "/usr/bin/old-hook"}]}`
	tests := []struct{ name, content, want string }{
		{"duplicate hooks", `{"hooks": {"PreToolUse": [` + old + `]}, "hooks": {}}`, ""},
		{"duplicate hooks on lines", "{\n  \"hooks\": {\n    \"PreToolUse\": [" + old + "]\n  },\n  \"x\": 1,\n  \"hooks\": {}\n}\n", ""},
		{"duplicate event", `{"hooks": {"PreToolUse": [` + old + `], "PreToolUse": []}}`, ""},
		// The null install replaced comes back as the empty object it left: what the agent
		// reads is still no hooks.
		{"duplicate hooks null", `{"hooks": {"PreToolUse": [` + old + `]}, "hooks": null}`,
			`{"hooks": {"PreToolUse": [` + old + `]}, "hooks": {}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path, err := SettingsPath(ClaudeCode, dir)
			require.NoError(t, err)
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o644))
			o := installOpts(ClaudeCode, dir)
			_, err = Install(o)
			require.NoError(t, err)
			o.Uninstall = true
			_, err = Install(o)
			require.NoError(t, err)
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			want := tt.want
			if want == "" {
				want = tt.content
			}
			require.Equal(t, want, string(got))
		})
	}
}
