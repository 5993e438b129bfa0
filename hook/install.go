package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// InstallOptions say where and how to install the hook.
type InstallOptions struct {
	Agent string
	// Dir is the settings directory's parent: the project directory (--project) or the
	// home directory (--user). For Codex, empty means the user's CodexHome.
	Dir string
	// Command is the hook command to write, e.g. "/usr/local/bin/vigil hook claude-code
	// --timeout 10m0s".
	Command string
	// Timeout is the agent's timeout for the hook, long enough for a hold to be decided.
	Timeout time.Duration
	// Uninstall removes Vigil's entries instead (Command still names the program, to
	// recognise a binary not named vigil).
	Uninstall bool
	// CodexHome is the directory of the user's Codex config.toml (CODEX_HOME, by default
	// ~/.codex), where Codex keeps its trust of hooks, the project's hooks included.
	// Empty: Codex's trust is left alone.
	CodexHome string
}

// InstallResult reports what changed.
type InstallResult struct {
	Path    string
	Changes []string
	// Changed is false when the file already said what it should.
	Changed bool
	// TrustPath is the Codex config.toml that holds the hooks' trust (Codex only).
	TrustPath string
}

// events are the hook events Vigil registers for each agent, with their matcher ("" for
// events that take none).
var events = map[string][]struct{ name, matcher string }{
	ClaudeCode: {{"PreToolUse", "*"}, {"PostToolUse", "*"}, {"UserPromptSubmit", ""}},
	Codex:      {{"PreToolUse", "*"}, {"PostToolUse", "*"}, {"UserPromptSubmit", ""}},
	Gemini:     {{"BeforeTool", ".*"}, {"AfterTool", ".*"}, {"BeforeAgent", ""}},
	// preToolUse covers the shell and MCP tools too; registering beforeShellExecution as
	// well would send every command twice.
	Cursor: {{"preToolUse", ""}, {"postToolUse", ""}, {"beforeSubmitPrompt", ""}},
}

// SettingsPath is the file the agent reads its hooks from under dir.
func SettingsPath(agent, dir string) (string, error) {
	switch agent {
	case ClaudeCode:
		return filepath.Join(dir, ".claude", "settings.json"), nil
	case Codex:
		return filepath.Join(dir, ".codex", "hooks.json"), nil
	case Gemini:
		return filepath.Join(dir, ".gemini", "settings.json"), nil
	case Cursor:
		return filepath.Join(dir, ".cursor", "hooks.json"), nil
	}
	return "", fmt.Errorf("unknown agent %q (want %s)", agent, strings.Join(Agents, ", "))
}

// IsVigilCommand reports whether a hook command is one Vigil installed for agent: its
// program is named vigil and it runs "hook AGENT".
func IsVigilCommand(cmd, agent string) bool {
	prog, ok := program(cmd, agent)
	return ok && strings.TrimSuffix(filepath.Base(prog), ".exe") == "vigil"
}

// program is the program of a "PROG hook AGENT …" command. Its path may be quoted and hold
// spaces: the command is split at " hook AGENT".
func program(cmd, agent string) (string, bool) {
	i := strings.Index(cmd+" ", " hook "+agent+" ")
	if i <= 0 {
		return "", false
	}
	return strings.Trim(strings.TrimSpace(cmd[:i]), `"'`), true
}

// ours reports whether cmd is Vigil's hook for agent: named vigil, or the same program as
// the command being installed (a binary under another name).
func ours(cmd, agent, installing string) bool {
	if IsVigilCommand(cmd, agent) {
		return true
	}
	p, ok := program(cmd, agent)
	q, ok2 := program(installing, agent)
	return ok && ok2 && p == q
}

// Install adds (or with Uninstall removes) Vigil's hooks in the agent's settings file,
// keeping every other setting and hook. Running it twice changes nothing the second time.
func Install(o InstallOptions) (InstallResult, error) {
	path, err := SettingsPath(o.Agent, o.Dir)
	if err != nil {
		return InstallResult{}, err
	}
	if o.Agent == Codex && o.Dir == "" {
		if o.CodexHome == "" {
			return InstallResult{}, errors.New("install for Codex: no project directory and no Codex home")
		}
		path = filepath.Join(o.CodexHome, "hooks.json")
	}
	res := InstallResult{Path: path}
	settings := map[string]any{}
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if o.Uninstall {
			res.Changes = append(res.Changes, "nothing to remove: "+path+" does not exist")
			return res, nil
		}
	case err != nil:
		return res, fmt.Errorf("read %s: %w", path, err)
	case len(bytes.TrimSpace(old)) > 0:
		if err := json.Unmarshal(old, &settings); err != nil {
			return res, fmt.Errorf("%s is not a JSON object (%w); fix or move it first", path, err)
		}
	}
	if o.Agent == Cursor {
		if _, ok := settings["version"]; !ok && !o.Uninstall {
			settings["version"] = 1
		}
	}
	hooks := map[string]any{}
	if h, ok := settings["hooks"]; ok && h != nil {
		m, ok := h.(map[string]any)
		if !ok {
			return res, fmt.Errorf("%s: \"hooks\" is not an object; fix it first", path)
		}
		hooks = m
	}
	isOurs := func(cmd string) bool { return ours(cmd, o.Agent, o.Command) }
	var oldTrust []codexTrust
	trust := o.Agent == Codex && o.CodexHome != ""
	if trust {
		if oldTrust, err = codexTrustFor(hooks, codexPaths(path), isOurs); err != nil {
			return res, fmt.Errorf("%s: %w", path, err)
		}
	}
	for _, ev := range events[o.Agent] {
		list, err := entries(hooks[ev.name], path, ev.name)
		if err != nil {
			return res, err
		}
		kept, removed, at := withoutVigil(o.Agent, o.Command, list)
		next := kept
		if !o.Uninstall {
			// In the place of the entry it replaces, so the other hooks keep their
			// positions (Codex keys its trust of each hook by position).
			next = slices.Concat(kept[:at], []any{entry(o, ev.matcher)}, kept[at:])
		}
		switch {
		case o.Uninstall && removed > 0:
			res.Changes = append(res.Changes, fmt.Sprintf("removed Vigil's %s hook", ev.name))
		case !o.Uninstall && removed == 0:
			res.Changes = append(res.Changes, fmt.Sprintf("added %s hook: %s", ev.name, o.Command))
		case !o.Uninstall && !sameJSON(list, next):
			res.Changes = append(res.Changes, fmt.Sprintf("updated %s hook: %s", ev.name, o.Command))
		}
		if len(next) == 0 {
			delete(hooks, ev.name)
		} else {
			hooks[ev.name] = next
		}
	}
	if len(hooks) == 0 {
		delete(settings, "hooks")
	} else {
		settings["hooks"] = hooks
	}
	out, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return res, fmt.Errorf("encode %s: %w", path, err)
	}
	out = append(out, '\n')
	if old == nil || !sameJSON(json.RawMessage(old), json.RawMessage(out)) {
		if err := writeFile(path, out); err != nil {
			return res, err
		}
		res.Changed = true
	}
	if trust {
		var newTrust []codexTrust
		if !o.Uninstall {
			if newTrust, err = codexTrustFor(hooks, codexPaths(path), isOurs); err != nil {
				return res, fmt.Errorf("%s: %w", path, err)
			}
		}
		var del []string
		for _, t := range oldTrust {
			del = append(del, t.Key)
		}
		res.TrustPath = filepath.Join(o.CodexHome, "config.toml")
		changes, changed, err := updateCodexTrust(res.TrustPath, newTrust, del)
		if err != nil {
			return res, err
		}
		res.Changes = append(res.Changes, changes...)
		res.Changed = res.Changed || changed
	}
	if !res.Changed && len(res.Changes) == 0 {
		res.Changes = append(res.Changes, "already up to date")
	}
	return res, nil
}

func entries(v any, path, event string) ([]any, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: hooks.%s is not a list; fix it first", path, event)
	}
	return list, nil
}

// withoutVigil drops Vigil's own hooks of agent from an event's list: the whole group in
// Claude Code's matcher layout when only Vigil is in it, else just Vigil's command. at is
// where in kept the first dropped entry was (the end when none was).
func withoutVigil(agent, installing string, list []any) (kept []any, removed, at int) {
	at = -1
	drop := func() {
		if at < 0 {
			at = len(kept)
		}
	}
	defer func() {
		if at < 0 {
			at = len(kept)
		}
	}()
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			kept = append(kept, item)
			continue
		}
		if cmd, ok := m["command"].(string); ok {
			// Cursor's flat layout: one command per entry.
			if ours(cmd, agent, installing) {
				removed++
				drop()
				continue
			}
			kept = append(kept, item)
			continue
		}
		inner, ok := m["hooks"].([]any)
		if !ok {
			kept = append(kept, item)
			continue
		}
		var rest []any
		for _, h := range inner {
			if hm, ok := h.(map[string]any); ok {
				if cmd, _ := hm["command"].(string); ours(cmd, agent, installing) {
					removed++
					continue
				}
			}
			rest = append(rest, h)
		}
		switch {
		case len(rest) == len(inner):
			kept = append(kept, item)
		case len(rest) == 0:
			drop()
		default:
			c := make(map[string]any, len(m))
			for k, v := range m {
				c[k] = v
			}
			c["hooks"] = rest
			kept = append(kept, c)
		}
	}
	return kept, removed, at
}

// entry is Vigil's hook in the agent's layout. Gemini CLI counts timeouts in
// milliseconds, the others in seconds.
func entry(o InstallOptions, matcher string) any {
	secs := int(o.Timeout.Round(time.Second) / time.Second)
	switch o.Agent {
	case Cursor:
		// failClosed: a crashed or timed-out hook blocks instead of letting the tool run.
		return map[string]any{"command": o.Command, "timeout": secs, "failClosed": true}
	case Gemini:
		g := map[string]any{"hooks": []any{map[string]any{"type": "command", "name": "vigil", "command": o.Command, "timeout": o.Timeout.Milliseconds()}}}
		if matcher != "" {
			g["matcher"] = matcher
		}
		return g
	}
	g := map[string]any{"hooks": []any{map[string]any{"type": "command", "command": o.Command, "timeout": secs}}}
	if matcher != "" {
		g["matcher"] = matcher
	}
	return g
}

func sameJSON(a, b any) bool {
	norm := func(v any) string {
		if raw, ok := v.(json.RawMessage); ok {
			var x any
			if json.Unmarshal(raw, &x) != nil {
				return string(raw)
			}
			v = x
		}
		out, _ := json.Marshal(v)
		return string(out)
	}
	return norm(a) == norm(b)
}

// writeFile replaces path atomically, keeping an existing file's mode (new files 0600:
// settings files may hold tokens).
func writeFile(path string, data []byte) error {
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".vigil-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// QuoteArg quotes a command-line word for the shell the agents run hooks with, when it
// needs it.
func QuoteArg(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '/' || r == '-' || r == '_' || r == '.' || r == ':' || r == '=' || r == '@' || r == '+' || r == ',' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
