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

	"github.com/vigil-guardian/vigil/internal/flock"
	"github.com/vigil-guardian/vigil/internal/linkpath"
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
	// Warnings are settings that keep the installed hooks from running, for the developer
	// to fix (install does not change them).
	Warnings []string
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
//
// The file is edited, not rewritten: the user's keys keep their order, their values the
// bytes they were written with (escapes, big numbers), the file its indentation and line
// endings, so install then uninstall gives back the file byte for byte. Except where
// install adds what the file lacked and keeps it on uninstall (Cursor's "version"), or
// removes what only held Vigil's hooks (a "hooks" object or event list left empty, even if
// it was there empty before, unless its key appears earlier in its object), and an empty
// container written with spaces inside ("[ ]") comes back as "[]".
//
// For Codex with a CodexHome, hooks.json and the trust in config.toml change together:
// both edits are worked out before either file is written, under a lock that keeps
// concurrent installs from losing each other's trust entries.
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
	trust := o.Agent == Codex && o.CodexHome != ""
	if trust {
		unlock, err := lockCodexTrust(o)
		if err != nil {
			return res, err
		}
		defer unlock()
	}
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if o.Uninstall {
			res.Changes = append(res.Changes, "nothing to remove: "+path+" does not exist")
			return res, nil
		}
	case err != nil:
		return res, fmt.Errorf("read %s: %w", path, err)
	}
	doc, err := readSettings(path, old, o.Agent == Gemini)
	if err != nil {
		return res, err
	}
	root := doc.root
	// null (or an empty file) is an empty object: there is nothing of Vigil's to remove,
	// and install fills it in.
	modified := false
	if root.isNull() && !o.Uninstall {
		root = &jnode{kind: '{'}
		doc.root = root
		modified = true
	}
	st := styleOf(root)
	hooks := root.get("hooks")
	if !hooks.isNull() && !hooks.isObject() {
		return res, fmt.Errorf("%s: \"hooks\" is not an object; fix it first", path)
	}
	for _, ev := range events[o.Agent] {
		if list := hooks.get(ev.name); !list.isNull() && !list.isArray() {
			return res, fmt.Errorf("%s: hooks.%s is not a list; fix it first", path, ev.name)
		}
	}
	if o.Agent == ClaudeCode && !o.Uninstall {
		res.Warnings = claudeHooksDisabled(path, root)
	}
	if o.Agent == Cursor && !o.Uninstall && root.index("version") < 0 {
		root.set("version", 1, 0, st, true)
	}
	isOurs := func(cmd string) bool { return ours(cmd, o.Agent, o.Command) }
	var oldTrust []codexTrust
	var oldPos map[*jnode]hookPos
	if trust {
		if oldTrust, err = codexTrustFor(hooksMap(hooks), codexPaths(path), isOurs); err != nil {
			return res, fmt.Errorf("%s: %w", path, err)
		}
		oldPos = handlerPositions(hooks, isOurs)
	}
	removedAny := false
	for _, ev := range events[o.Agent] {
		list := hooks.get(ev.name)
		before := []byte("null")
		removed, at := 0, 0
		if list.isArray() {
			before = list.bytes()
			removed, at = withoutVigil(list, isOurs)
		}
		if !o.Uninstall {
			if !hooks.isObject() {
				hooks = &jnode{kind: '{'}
				root.set("hooks", hooks, 0, st, false)
			}
			if !list.isArray() {
				list = &jnode{kind: '['}
				hooks.set(ev.name, list, 1, st, false)
			}
			// In the place of the entry it replaces, so the other hooks keep their
			// positions (Codex keys its trust of each hook by position).
			list.insert(at, &jmember{val: newNode(entry(o, ev.matcher), 3, st)}, 2, st)
			modified = true
		}
		switch {
		case o.Uninstall && removed > 0:
			res.Changes = append(res.Changes, fmt.Sprintf("removed Vigil's %s hook", ev.name))
			removedAny, modified = true, true
			if len(list.members) == 0 {
				removeEmptied(hooks, ev.name)
			}
		case !o.Uninstall && removed == 0:
			res.Changes = append(res.Changes, fmt.Sprintf("added %s hook: %s", ev.name, o.Command))
		case !o.Uninstall && !sameJSON(json.RawMessage(before), json.RawMessage(list.bytes())):
			res.Changes = append(res.Changes, fmt.Sprintf("updated %s hook: %s", ev.name, o.Command))
		}
	}
	if removedAny && len(hooks.members) == 0 {
		removeEmptied(root, "hooks")
	}
	out := doc.bytes()
	writeJSON := modified && (old == nil || !sameJSON(json.RawMessage(old), json.RawMessage(out)))
	// Codex's trust is planned before either file is written: hooks.json changed alone
	// would leave the hooks it moved without their trust (and a rerun, finding hooks.json
	// up to date, would not notice).
	var edit codexTrustEdit
	if trust {
		var newTrust []codexTrust
		if !o.Uninstall {
			if newTrust, err = codexTrustFor(hooksMap(hooks), codexPaths(path), isOurs); err != nil {
				return res, fmt.Errorf("%s: %w", path, err)
			}
		}
		var del []string
		for _, t := range oldTrust {
			del = append(del, t.Key)
		}
		res.TrustPath = filepath.Join(o.CodexHome, "config.toml")
		moves := codexMoves(oldPos, handlerPositions(hooks, isOurs), codexPaths(path))
		if edit, err = planCodexTrust(res.TrustPath, newTrust, del, moves); err != nil {
			return res, err
		}
	}
	if writeJSON {
		if err := writeFile(path, out); err != nil {
			return res, err
		}
		res.Changed = true
	}
	if err := edit.write(); err != nil {
		if writeJSON {
			// The two files change together or not at all.
			err = errors.Join(err, restoreFile(path, old))
		}
		return res, err
	}
	res.Changes = append(res.Changes, edit.changes...)
	res.Changed = res.Changed || edit.changed
	if !res.Changed && len(res.Changes) == 0 {
		res.Changes = append(res.Changes, "already up to date")
	}
	return res, nil
}

// lockCodexTrust serializes the installs that edit Codex's trust: each reads hooks.json
// and config.toml, edits them and replaces them by rename, so two at once would each write
// back a config.toml without the other's entries. The lock is a file of its own in the
// Codex home, config.toml.lock, which stays there (empty) afterwards: not config.toml
// itself, which the rename replaces (a lock held on the old file would not exclude an
// install that opened the new one), and not the directory of hooks.json, which differs
// between the user's install and each project's while config.toml is shared.
func lockCodexTrust(o InstallOptions) (func(), error) {
	if _, err := os.Stat(o.CodexHome); errors.Is(err, os.ErrNotExist) && o.Uninstall {
		// Without a Codex home there is no trust to remove: no need to create one.
		return func() {}, nil
	}
	if err := os.MkdirAll(o.CodexHome, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.CodexHome, err)
	}
	return flock.Lock(filepath.Join(o.CodexHome, "config.toml.lock"))
}

// removeEmptied removes the member key of object n, which install's entries alone
// filled, unless an earlier member has the same key: agents read settings with
// JSON.parse, where the last duplicate wins, so removing it would make the earlier one
// (hooks the agent never ran) what the agent reads. That one stays, empty.
func removeEmptied(n *jnode, key string) {
	i := n.index(key)
	if i < 0 {
		return
	}
	if slices.ContainsFunc(n.members[:i], func(m *jmember) bool { return m.key == key }) {
		return
	}
	n.remove(i)
}

// restoreFile puts back what path held before it was written (old; nil for no file),
// when writing the file that had to change with it failed.
func restoreFile(path string, old []byte) error {
	if old != nil {
		if err := writeFile(path, old); err != nil {
			return fmt.Errorf("restore %s: %w", path, err)
		}
		return nil
	}
	target, err := resolveLink(path)
	if err == nil {
		err = os.Remove(target)
	}
	if err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	return nil
}

// readSettings reads a settings file: an empty file is null, anything but an object or
// null is refused. With comments, // and /* */ comments are allowed and kept where they
// are: Gemini CLI reads its settings.json through strip-json-comments. The other agents'
// files are plain JSON to their own readers, so a comment there is the error it is to them.
func readSettings(path string, data []byte, comments bool) (*jdoc, error) {
	plain := data
	if comments {
		var closed bool
		if plain, closed = stripComments(data); !closed {
			return nil, fmt.Errorf("%s is not a JSON object (a /* comment is not closed); fix or move it first", path)
		}
	}
	if len(bytes.TrimSpace(plain)) == 0 {
		if len(bytes.TrimSpace(data)) != 0 {
			// Only comments: they stay, before the object install writes, on lines of
			// their own (a // comment would otherwise run into it).
			lead := string(data)
			if !strings.HasSuffix(lead, "\n") {
				lead += "\n"
			}
			return &jdoc{lead: lead, root: &jnode{raw: []byte("null")}, trail: "\n"}, nil
		}
		return &jdoc{root: &jnode{raw: []byte("null")}, trail: "\n"}, nil
	}
	if !json.Valid(plain) {
		var v any
		err := json.Unmarshal(plain, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, fmt.Errorf("%s is not a JSON object (%w); fix or move it first", path, err)
	}
	doc := parseJSON(data)
	if !doc.root.isObject() && !doc.root.isNull() {
		return nil, fmt.Errorf("%s is not a JSON object; fix or move it first", path)
	}
	return doc, nil
}

// hooksMap decodes the hooks object for the Codex trust (nil when there is none).
func hooksMap(hooks *jnode) map[string]any {
	if !hooks.isObject() {
		return nil
	}
	m, _ := hooks.value().(map[string]any)
	return m
}

// claudeHooksDisabled warns when Claude Code's disableAllHooks is on in the settings file
// install writes or in the settings.local.json next to it (which overrides it): Claude
// Code then runs no hook at all. The flag is the user's to change, so it stays.
func claudeHooksDisabled(path string, root *jnode) []string {
	const warning = "%s sets \"disableAllHooks\": true, so Claude Code runs no hooks: Vigil's hooks will not run until you remove it or set it to false."
	var out []string
	if v := root.get("disableAllHooks"); v != nil && string(v.raw) == "true" {
		out = append(out, fmt.Sprintf(warning, path))
	}
	local := filepath.Join(filepath.Dir(path), "settings.local.json")
	if b, err := os.ReadFile(local); err == nil {
		var s struct {
			DisableAllHooks bool `json:"disableAllHooks"`
		}
		if json.Unmarshal(b, &s) == nil && s.DisableAllHooks {
			out = append(out, fmt.Sprintf(warning, local))
		}
	}
	return out
}

// withoutVigil removes Vigil's own hooks (ours) from an event's list, in place: the whole
// group in the matcher layout when only Vigil is in it, else just Vigil's handler. at is
// where in what is left the first removed entry was (the end when none was).
func withoutVigil(list *jnode, ours func(cmd string) bool) (removed, at int) {
	at = -1
	for i := 0; i < len(list.members); {
		g := list.members[i].val
		if !g.isObject() {
			i++
			continue
		}
		if cmd, ok := g.get("command").str(); ok {
			// Cursor's flat layout: one command per entry.
			if ours(cmd) {
				removed++
				if at < 0 {
					at = i
				}
				list.remove(i)
				continue
			}
			i++
			continue
		}
		inner := g.get("hooks")
		if !inner.isArray() || len(inner.members) == 0 {
			i++
			continue
		}
		for j := 0; j < len(inner.members); {
			if cmd, _ := inner.members[j].val.get("command").str(); ours(cmd) {
				removed++
				inner.remove(j)
				continue
			}
			j++
		}
		if len(inner.members) == 0 {
			if at < 0 {
				at = i
			}
			list.remove(i)
			continue
		}
		i++
	}
	if at < 0 {
		at = len(list.members)
	}
	return removed, at
}

// hookPos is where a handler is in a hooks.json of the matcher layout.
type hookPos struct {
	event          string
	group, handler int
}

// handlerPositions maps each handler that is not Vigil's to its position: the nodes of the
// tree stay the same across an edit, so two calls tell which handlers moved.
func handlerPositions(hooks *jnode, ours func(cmd string) bool) map[*jnode]hookPos {
	pos := map[*jnode]hookPos{}
	if !hooks.isObject() {
		return pos
	}
	for _, ev := range hooks.members {
		if !ev.val.isArray() {
			continue
		}
		for gi, g := range ev.val.members {
			inner := g.val.get("hooks")
			if !inner.isArray() {
				continue
			}
			for hi, h := range inner.members {
				if cmd, _ := h.val.get("command").str(); ours(cmd) {
					continue
				}
				pos[h.val] = hookPos{ev.key, gi, hi}
			}
		}
	}
	return pos
}

// codexMoves are the trust keys of the user's handlers that changed position (old key to
// new key, under each form of the hooks.json path).
func codexMoves(before, after map[*jnode]hookPos, paths []string) map[string]string {
	moves := map[string]string{}
	for h, was := range before {
		now, ok := after[h]
		if !ok || now == was {
			continue
		}
		for _, p := range paths {
			moves[codexKey(p, was.event, was.group, was.handler)] = codexKey(p, now.event, now.group, now.handler)
		}
	}
	return moves
}

// entry is Vigil's hook in the agent's layout. Gemini CLI counts timeouts in
// milliseconds, the others in seconds.
func entry(o InstallOptions, matcher string) any {
	secs := int(o.Timeout.Round(time.Second) / time.Second)
	switch o.Agent {
	case Cursor:
		// failClosed: a crashed or timed-out hook blocks instead of letting the tool run.
		return jobj{{"command", o.Command}, {"timeout", secs}, {"failClosed", true}}
	case Gemini:
		h := jobj{{"type", "command"}, {"name", "vigil"}, {"command", o.Command}, {"timeout", o.Timeout.Milliseconds()}}
		return group(matcher, h)
	}
	return group(matcher, jobj{{"type", "command"}, {"command", o.Command}, {"timeout", secs}})
}

// group is a matcher group holding one handler.
func group(matcher string, handler jobj) jobj {
	if matcher == "" {
		return jobj{{"hooks", []any{handler}}}
	}
	return jobj{{"matcher", matcher}, {"hooks", []any{handler}}}
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
// settings files may hold tokens). A path that is a symbolic link (dotfiles kept in a
// repository and linked in by stow or chezmoi) stays one: the file it names is replaced.
func writeFile(path string, data []byte) error {
	path, err := resolveLink(path)
	if err != nil {
		return err
	}
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

// resolveLink follows the symbolic links at path to the file they name, which may not
// exist yet (a dangling link is written through too).
func resolveLink(path string) (string, error) {
	target, err := linkpath.Resolve(path)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return target, nil
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
