package hook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/BurntSushi/toml"
)

// Codex runs a hook from hooks.json only when the user's config.toml trusts it:
//
//	[hooks.state."/abs/path/hooks.json:pre_tool_use:0:0"]
//	trusted_hash = "sha256:…"
//
// The key is the hooks.json file's absolute path, the event's snake_case label and the
// hook's group and handler positions; the hash is Codex's digest of the hook's normalized
// definition (codex-rs/hooks/src/engine/discovery.rs, command_hook_hash, and
// codex-rs/config/src/fingerprint.rs, version_for_toml). Only the user's config.toml
// (CODEX_HOME) counts: a project's own config cannot trust its hooks. An untrusted or
// changed hook is skipped silently, so the installer writes the trust itself.

// codexTrust is one trust entry Vigil writes.
type codexTrust struct {
	Key, Hash string
}

// codexEventLabel is Codex's snake_case label of a hook event ("PreToolUse" →
// "pre_tool_use").
func codexEventLabel(event string) string {
	var b strings.Builder
	for i, r := range event {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// codexKey is the hooks.state key of the handler at (group, handler) of event in the
// hooks.json at path.
func codexKey(path, event string, group, handler int) string {
	return fmt.Sprintf("%s:%s:%d:%d", path, codexEventLabel(event), group, handler)
}

// codexHookHash is Codex's trusted_hash of a command handler: sha256 of the compact,
// key-sorted JSON of {event_name, matcher, hooks: [handler]}, where the handler has its
// timeout filled in (600 when unset), async as a boolean, and no unset fields. Events
// without matchers (UserPromptSubmit, Stop) hash without one whatever the file says.
func codexHookHash(event string, matcher *string, handler map[string]any) (string, error) {
	h := map[string]any{"type": "command", "async": false, "timeout": 600}
	for _, k := range []string{"command", "timeout", "async", "statusMessage"} {
		if v, ok := handler[k]; ok && v != nil {
			h[k] = v
		}
	}
	if _, ok := h["command"].(string); !ok {
		return "", errors.New("hook has no command")
	}
	// hooks.json numbers decode as float64; Codex reads the timeout as an integer of at
	// least 1.
	switch t := h["timeout"].(type) {
	case float64:
		if t != float64(int64(t)) || t < 0 {
			return "", fmt.Errorf("hook timeout %v is not a whole number of seconds", t)
		}
		h["timeout"] = max(int64(t), 1)
	case int:
		h["timeout"] = max(t, 1)
	}
	identity := map[string]any{"event_name": codexEventLabel(event), "hooks": []any{h}}
	if matcher != nil && event != "UserPromptSubmit" && event != "Stop" {
		identity["matcher"] = *matcher
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Codex serializes with serde_json: no HTML escaping, U+2028 and U+2029 as they are.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(identity); err != nil {
		return "", fmt.Errorf("encode hook identity: %w", err)
	}
	canon := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	canon = bytes.ReplaceAll(canon, []byte(`\u2028`), []byte("\u2028"))
	canon = bytes.ReplaceAll(canon, []byte(`\u2029`), []byte("\u2029"))
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// codexTrustFor lists the trust entries of agent's handlers that are Vigil's (ours) in a
// Codex hooks map, keyed under each of paths (the hooks.json path as written, and as
// resolved through symbolic links when that differs: Codex keys by the path it was
// configured with, which the installer cannot know for sure).
func codexTrustFor(hooks map[string]any, paths []string, ours func(cmd string) bool) ([]codexTrust, error) {
	var out []codexTrust
	for _, event := range slices.Sorted(maps.Keys(hooks)) {
		groups, _ := hooks[event].([]any)
		for gi, g := range groups {
			gm, _ := g.(map[string]any)
			inner, _ := gm["hooks"].([]any)
			var matcher *string
			if m, ok := gm["matcher"].(string); ok {
				matcher = &m
			}
			for hi, h := range inner {
				hm, _ := h.(map[string]any)
				cmd, _ := hm["command"].(string)
				if hm == nil || !ours(cmd) {
					continue
				}
				hash, err := codexHookHash(event, matcher, hm)
				if err != nil {
					return nil, fmt.Errorf("hooks.%s[%d].hooks[%d]: %w", event, gi, hi, err)
				}
				for _, p := range paths {
					out = append(out, codexTrust{codexKey(p, event, gi, hi), hash})
				}
			}
		}
	}
	return out, nil
}

// codexPaths are the forms of a hooks.json path Codex may key its trust by.
func codexPaths(path string) []string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return []string{path}
	}
	paths := []string{abs}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		if real := filepath.Join(dir, filepath.Base(abs)); real != abs {
			paths = append(paths, real)
		}
	}
	return paths
}

// codexTrustEdit is a planned edit of the Codex config.toml at path: its new text and
// what changed. Nothing is written until Install has planned the hooks.json edit too.
type codexTrustEdit struct {
	path    string
	text    string
	changes []string
	// changed is false when the file already says what it should.
	changed bool
}

// planCodexTrust plans writing set and removing del in the hooks.state of the Codex
// config.toml at path, and moving each entry keyed by a key of moves to its new key (a
// hook that changed position: Codex keys its trust by position, so a hook whose trust
// stayed behind would silently stop running). It edits only those entries' lines so the
// rest of the file (comments, order, formatting) stays as the user wrote it. The edit is
// checked by parsing the result, leniently for what it holds and strictly for where its
// tables are defined (checkTOMLDefinitions): a file whose layout cannot be edited this way
// gets an error that says what to change by hand. An empty set is an uninstall.
func planCodexTrust(path string, set []codexTrust, del []string, moves map[string]string) (codexTrustEdit, error) {
	edit := codexTrustEdit{path: path}
	// What the user is told to do by hand when the edit cannot be made.
	doing, byHand := "adding Vigil's hook trust", "add the [hooks.state] entries by hand"
	if len(set) == 0 {
		doing, byHand = "removing Vigil's hook trust", "edit the [hooks.state] entries by hand"
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return edit, fmt.Errorf("read %s: %w", path, err)
	}
	before := map[string]any{}
	if _, err := toml.Decode(string(old), &before); err != nil {
		return edit, fmt.Errorf("%s is not valid TOML (%w); fix it first", path, err)
	}
	if err := checkTOMLDefinitions(string(old)); err != nil {
		return edit, fmt.Errorf("%s is not valid TOML (%w); fix it first", path, err)
	}
	state := codexState(before)
	text := string(old)
	var changes []string
	want := maps.Clone(state)
	for _, key := range del {
		if slices.ContainsFunc(set, func(t codexTrust) bool { return t.Key == key }) {
			continue
		}
		if _, ok := state[key]; !ok {
			continue
		}
		next, ok := removeTable(text, key)
		if !ok {
			return edit, fmt.Errorf("%s: cannot remove hooks.state.%s (not a table of its own); remove it by hand", path, tomlQuote(key))
		}
		text = next
		delete(want, key)
		changes = append(changes, "removed Codex's trust of "+key)
	}
	if text, changes, err = moveTrust(path, text, state, want, moves, changes); err != nil {
		return edit, err
	}
	for _, t := range set {
		cur, _ := state[t.Key].(map[string]any)
		if cur != nil && cur["trusted_hash"] == t.Hash {
			continue
		}
		next, ok := setTrustedHash(text, t.Key, t.Hash)
		if !ok {
			if cur != nil {
				return edit, fmt.Errorf("%s: cannot edit hooks.state.%s (not a table of its own); set its trusted_hash = %q by hand", path, tomlQuote(t.Key), t.Hash)
			}
			if inline := inlineHooksTable(string(old)); inline != "" {
				// A [hooks.state."…"] table appended after it would define the inline
				// table's key a second time.
				return edit, fmt.Errorf("%s: %s is an inline table ({ … }), which cannot be extended by [hooks.state] tables; %s", path, inline, byHand)
			}
			next = appendTable(text, t.Key, t.Hash)
		}
		text = next
		entry := maps.Clone(cur)
		if entry == nil {
			entry = map[string]any{}
		}
		entry["trusted_hash"] = t.Hash
		want[t.Key] = entry
		changes = append(changes, "trusted "+t.Key)
	}
	if text == string(old) {
		return edit, nil
	}
	// The edit must change exactly the intended entries.
	after := map[string]any{}
	if _, err := toml.Decode(text, &after); err != nil {
		return edit, fmt.Errorf("%s: %s would make it invalid TOML (%w); %s", path, doing, err, byHand)
	}
	if err := checkTOMLDefinitions(text); err != nil {
		return edit, fmt.Errorf("%s: %s would make it invalid TOML (%w); %s", path, doing, err, byHand)
	}
	expect := maps.Clone(before)
	setCodexState(expect, want)
	if !reflect.DeepEqual(normalizeTOML(expect), normalizeTOML(after)) {
		return edit, fmt.Errorf("%s: %s would change other settings; %s", path, doing, byHand)
	}
	edit.text, edit.changes, edit.changed = text, changes, true
	return edit, nil
}

// write replaces the config.toml with the planned text, when it changed.
func (e codexTrustEdit) write() error {
	if !e.changed {
		return nil
	}
	return writeFile(e.path, []byte(e.text))
}

// inlineHooksTable names hooks or hooks.state when doc (valid TOML) defines it as an
// inline table (or under one), "" otherwise.
func inlineHooksTable(doc string) string {
	defs, err := tomlDefinitions(doc)
	if err != nil {
		return ""
	}
	switch {
	case defs.flags.is([]string{"hooks"}, tomlFrozen):
		return "hooks"
	case defs.flags.is([]string{"hooks", "state"}, tomlFrozen):
		return "hooks.state"
	}
	return ""
}

// moveTrust renames the [hooks.state."FROM"] tables of text that moves names to their new
// keys, all at once (a hook may move into the place another one leaves), and records the
// result in want.
func moveTrust(path, text string, state, want map[string]any, moves map[string]string, changes []string) (string, []string, error) {
	renames := map[string]string{}
	for from, to := range moves {
		if _, ok := state[from]; ok {
			renames[from] = to
		}
	}
	if len(renames) == 0 {
		return text, changes, nil
	}
	froms := slices.Sorted(maps.Keys(renames))
	for _, from := range froms {
		if _, _, _, ok := tableSpan(text, from); !ok {
			return "", nil, fmt.Errorf("%s: cannot move hooks.state.%s (not a table of its own) to hooks.state.%s; rename it by hand", path, tomlQuote(from), tomlQuote(renames[from]))
		}
	}
	for _, from := range froms {
		to := renames[from]
		if _, ok := want[to]; !ok {
			continue
		}
		if _, leaves := renames[to]; leaves {
			continue
		}
		// Trust of a position no hook held: the hook moving there replaces it (two tables
		// of one key would not be TOML).
		next, ok := removeTable(text, to)
		if !ok {
			return "", nil, fmt.Errorf("%s: cannot remove hooks.state.%s (not a table of its own); remove it by hand", path, tomlQuote(to))
		}
		text = next
		delete(want, to)
		changes = append(changes, "removed Codex's trust of "+to+" (no hook there)")
	}
	moved := map[string]any{}
	for _, from := range froms {
		moved[renames[from]] = state[from]
		delete(want, from)
	}
	maps.Copy(want, moved)
	var b strings.Builder
	for line := range strings.Lines(text) {
		if parts, ok := tableHeader(line); ok && len(parts) == 3 && parts[0] == "hooks" && parts[1] == "state" {
			if to, ok := renames[parts[2]]; ok {
				indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
				line = indent + "[hooks.state." + tomlQuote(to) + "]" + line[len(indent)+headerEnd(line[len(indent):]):]
			}
		}
		b.WriteString(line)
	}
	for _, from := range froms {
		changes = append(changes, "moved Codex's trust of "+from+" to "+renames[from])
	}
	return b.String(), changes, nil
}

// headerEnd is the length of the "[…]" of a table header line (which tableHeader read),
// so what follows it (a comment) stays.
func headerEnd(line string) int {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '"' && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == ']':
			return i + 1
		}
	}
	return len(line)
}

// codexState is the hooks.state table of a decoded config.toml.
func codexState(cfg map[string]any) map[string]any {
	hooks, _ := cfg["hooks"].(map[string]any)
	state, _ := hooks["state"].(map[string]any)
	if state == nil {
		return map[string]any{}
	}
	return state
}

func setCodexState(cfg map[string]any, state map[string]any) {
	hooks, _ := cfg["hooks"].(map[string]any)
	hooks = maps.Clone(hooks)
	if hooks == nil {
		hooks = map[string]any{}
	}
	if len(state) == 0 {
		delete(hooks, "state")
	} else {
		hooks["state"] = state
	}
	if len(hooks) == 0 {
		delete(cfg, "hooks")
	} else {
		cfg["hooks"] = hooks
	}
}

// normalizeTOML drops empty tables, which a removed [hooks.state."…"] may leave behind
// or take away without changing what Codex reads.
func normalizeTOML(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range t {
			x = normalizeTOML(x)
			if m, ok := x.(map[string]any); ok && len(m) == 0 {
				continue
			}
			out[k] = x
		}
		return out
	case []map[string]any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = normalizeTOML(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = normalizeTOML(x)
		}
		return out
	}
	return v
}

// tomlQuote renders s as a TOML basic string.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tableSpan finds the [hooks.state."KEY"] table in text: the byte offsets of its header
// line and of the end of its body (the next table header or the end of the text).
func tableSpan(text, key string) (start, bodyStart, end int, ok bool) {
	want := []string{"hooks", "state", key}
	offset := 0
	for offset < len(text) {
		lineEnd := strings.IndexByte(text[offset:], '\n')
		next := len(text)
		if lineEnd >= 0 {
			next = offset + lineEnd + 1
		}
		line := text[offset:next]
		if parts, isHeader := tableHeader(line); isHeader {
			if ok {
				return start, bodyStart, offset, true
			}
			if slices.Equal(parts, want) {
				start, bodyStart, ok = offset, next, true
			}
		}
		offset = next
	}
	return start, bodyStart, len(text), ok
}

// tableHeader parses a "[a.b."c"]" line (not an array of tables) into its key parts.
func tableHeader(line string) ([]string, bool) {
	s := strings.TrimSpace(line)
	if !strings.HasPrefix(s, "[") || strings.HasPrefix(s, "[[") {
		return nil, false
	}
	s = strings.TrimSpace(s[1:])
	var parts []string
	for {
		var part string
		switch {
		case strings.HasPrefix(s, `"`):
			i := 1
			var b strings.Builder
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
					switch s[i] {
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					case '"', '\\':
						b.WriteByte(s[i])
					default:
						// Other escapes do not occur in the keys Vigil writes; a header
						// that uses them is not one of ours.
						return nil, true
					}
					continue
				}
				b.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, true
			}
			part, s = b.String(), s[i+1:]
		case strings.HasPrefix(s, `'`):
			i := strings.IndexByte(s[1:], '\'')
			if i < 0 {
				return nil, true
			}
			part, s = s[1:1+i], s[i+2:]
		default:
			i := strings.IndexFunc(s, func(r rune) bool {
				return !(r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
			})
			if i <= 0 {
				return nil, true
			}
			part, s = s[:i], s[i:]
		}
		parts = append(parts, part)
		s = strings.TrimSpace(s)
		switch {
		case strings.HasPrefix(s, "."):
			s = strings.TrimSpace(s[1:])
		case strings.HasPrefix(s, "]"):
			rest := strings.TrimSpace(s[1:])
			if rest != "" && !strings.HasPrefix(rest, "#") {
				return nil, true
			}
			return parts, true
		default:
			return nil, true
		}
	}
}

// setTrustedHash sets trusted_hash in an existing [hooks.state."KEY"] table of text.
func setTrustedHash(text, key, hash string) (string, bool) {
	_, bodyStart, end, ok := tableSpan(text, key)
	if !ok {
		return "", false
	}
	line := "trusted_hash = " + tomlQuote(hash) + "\n"
	body := text[bodyStart:end]
	offset := 0
	for offset < len(body) {
		next := len(body)
		if i := strings.IndexByte(body[offset:], '\n'); i >= 0 {
			next = offset + i + 1
		}
		if k, _, found := strings.Cut(body[offset:next], "="); found && strings.Trim(strings.TrimSpace(k), `"'`) == "trusted_hash" {
			return text[:bodyStart+offset] + line + text[bodyStart+next:], true
		}
		offset = next
	}
	return text[:bodyStart] + line + text[bodyStart:], true
}

// removeTable removes the [hooks.state."KEY"] table (header and body) from text. Comments
// and blank lines at the end of its body stay: they may introduce the next table.
func removeTable(text, key string) (string, bool) {
	start, bodyStart, end, ok := tableSpan(text, key)
	if !ok {
		return "", false
	}
	for end > bodyStart {
		prev := strings.LastIndexByte(text[bodyStart:end-1], '\n') + 1 + bodyStart
		if l := strings.TrimSpace(text[prev:end]); l != "" && !strings.HasPrefix(l, "#") {
			break
		}
		end = prev
	}
	head := text[:start]
	if strings.TrimSpace(text[end:]) == "" {
		// The last table: no blank lines left dangling at the end of the file.
		head = strings.TrimRight(head, "\n") + "\n"
		if strings.TrimSpace(head) == "" {
			head = ""
		}
	}
	return head + text[end:], true
}

// appendTable adds a [hooks.state."KEY"] table at the end of text.
func appendTable(text, key, hash string) string {
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	if text != "" {
		text += "\n"
	}
	return text + "[hooks.state." + tomlQuote(key) + "]\ntrusted_hash = " + tomlQuote(hash) + "\n"
}

// CodexProjectTrusted reports whether the user's Codex config trusts the project at dir
// (or a directory above it): Codex loads a project's hooks only then.
func CodexProjectTrusted(codexHome, dir string) bool {
	cfg := map[string]any{}
	if _, err := toml.DecodeFile(filepath.Join(codexHome, "config.toml"), &cfg); err != nil {
		return false
	}
	projects, _ := cfg["projects"].(map[string]any)
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for d := abs; ; d = filepath.Dir(d) {
		if p, _ := projects[d].(map[string]any); p != nil && p["trust_level"] == "trusted" {
			return true
		}
		if filepath.Dir(d) == d {
			return false
		}
	}
}
