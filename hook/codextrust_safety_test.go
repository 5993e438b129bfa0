package hook

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// readOrNil is the content of path, nil when there is no file.
func readOrNil(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return b
}

// TestInstallCodexRefusesInlineHooks: appending [hooks.state."…"] tables to a config.toml
// whose hooks or hooks.state is an inline table gives a file strict TOML parsers (Codex's
// among them) reject, however leniently BurntSushi/toml reads it. Install refuses and
// changes neither file; the dotted-key spellings that stay valid TOML keep working.
func TestInstallCodexRefusesInlineHooks(t *testing.T) {
	tests := []struct {
		name, config string
		ok           bool
	}{
		{"inline hooks with inline state", "hooks = { state = {} }\n", false},
		{"inline state under [hooks]", "[hooks]\nstate = {}\n", false},
		{"inline state with entries", "hooks = { state = { \"x\" = { trusted_hash = \"sha256:a\" } } }\n", false},
		{"inline hooks without state", "hooks = { enabled = true }\n", false},
		{"dotted inline state", "hooks.state = {}\n", false},
		{"dotted hooks key", "hooks.enabled = true\n", true},
		{"dotted entries under [hooks]", "[hooks]\nstate.\"x\".trusted_hash = \"sha256:a\"\n", true},
		{"dotted entries at the top", "hooks.state.\"x\".trusted_hash = \"sha256:a\"\n", true},
		{"inline entries under [hooks.state]", "[hooks.state]\n\"x\" = { trusted_hash = \"sha256:a\" }\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			config := filepath.Join(home, "config.toml")
			hooksJSON := filepath.Join(home, "hooks.json")
			require.NoError(t, os.WriteFile(config, []byte(tt.config), 0o600))
			o := installOpts(Codex, "")
			o.CodexHome = home
			_, err := Install(o)
			if !tt.ok {
				require.ErrorContains(t, err, "by hand")
				require.Equal(t, tt.config, string(readOrNil(t, config)), "config.toml is left alone")
				require.Nil(t, readOrNil(t, hooksJSON), "hooks.json is not written either")
				return
			}
			require.NoError(t, err)
			got := string(readOrNil(t, config))
			require.True(t, strings.HasPrefix(got, tt.config), got)
			require.NoError(t, checkTOMLDefinitions(got), "the result is strict TOML:\n%s", got)
			require.Contains(t, trustState(t, config), hooksJSON+":pre_tool_use:0:0")
		})
	}
}

// TestCheckTOMLDefinitions compares the strict check with what python3's tomllib (a
// strict parser) says of each document.
func TestCheckTOMLDefinitions(t *testing.T) {
	tests := []struct {
		doc   string
		valid bool
	}{
		{"hooks = { state = {} }\n[hooks.state.\"k\"]\nt = 1\n", false},
		{"[hooks]\nstate = {}\n[hooks.state.\"k\"]\nt = 1\n", false},
		{"hooks = { enabled = true }\n[hooks.state.\"k\"]\nt = 1\n", false},
		{"hooks.state = {}\n[hooks.state.\"k\"]\nt = 1\n", false},
		{"[hooks]\nstate.x = 1\n[hooks.state]\ny = 2\n", false},
		{"[hooks.state.\"k\"]\na = 1\n[hooks.state.\"k\"]\nb = 2\n", false},
		{"[hooks.state.\"k\"]\na = 1\n[hooks]\nstate.\"k\".b = 2\n", false},
		{"[hooks]\nstate.\"k\".t = \"a\"\n[hooks.state.\"k\"]\nu = 1\n", false},
		{"a = 1\na = 2\n", false},
		{"a = 1\n[a]\n", false},
		{"a = [1]\n[[a]]\n", false},
		{"[a]\n[[a]]\n", false},
		{"[[a]]\n[a]\n", false},
		{"a = { b = 1 }\na.c = 2\n", false},
		{"[a.b]\n[a]\nb = 1\n", false},
		{"[hooks.state.\"k\"]\nt = 1\n[hooks.state.'k']\n", false},
		{"[hooks.state.\"\\u006b\"]\nt = 1\n[hooks.state.k]\n", false},
		{"[hooks]\nstate.\"x\".t = \"a\"\n[hooks.state.\"k\"]\nt = 1\n", true},
		{"hooks.state.\"x\".t = \"a\"\n[hooks.state.\"k\"]\nt = 1\n", true},
		{"hooks.enabled = true\n[hooks.state.\"k\"]\nt = 1\n", true},
		{"[hooks.state]\n\"x\" = { t = \"a\" }\n[hooks.state.\"k\"]\nt = 1\n", true},
		{"[hooks.state]\n[hooks.state.\"k\"]\nt = 1\n", true},
		{"[hooks.state.\"k\".sub]\na = 1\n[hooks.state.\"k\"]\nt = 1\n", true},
		{"[a.b]\n[a]\nc = 1\n", true},
		{"[[a]]\nb.c = 1\n[[a]]\nb.c = 2\n[a.d]\n", true},
		{"[[a]]\n[a.b]\n[[a]]\n[a.b]\n", true},
		{"a.b.c = 1\na.b.d = 2\n[a.e]\n", true},
		{"# [a]\ns = \"\"\"\n[a]\n\"\"\"\nl = '''\n[a]'''\nq = \"\\\"[a]\"\n[a] # ok\nx = [\n  1, # ]\n  { y = \"}\" },\n]\n", true},
		{"s = \"\"\"a\"\"\"\"\"\n[b]\nt = '''x'''''\nd = 1979-05-27 07:32:00Z\n", true},
		{"\"a b\".'c' = 1\n'a b'.\"d\" = 2\n", true},
		{"\"a b\".'c' = 1\n[\"a b\"]\nd = 2\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.doc, func(t *testing.T) {
			err := checkTOMLDefinitions(tt.doc)
			if tt.valid {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// TestCodexTrustFailureChangesNothing: when the trust cannot be updated (the user wrote
// their trust entries as dotted keys, which install cannot move), neither hooks.json nor
// config.toml changes: writing hooks.json first moved the user's hooks away from their
// trust, and a rerun then found nothing to do.
func TestCodexTrustFailureChangesNothing(t *testing.T) {
	home := t.TempDir()
	hooksJSON := filepath.Join(home, "hooks.json")
	config := filepath.Join(home, "config.toml")
	user := func(name string) string {
		return `{"matcher": "Bash", "hooks": [{"type": "command", "command": "/usr/bin/` + name + `"}]}`
	}
	require.NoError(t, os.WriteFile(hooksJSON, []byte(`{"hooks": {"PreToolUse": [`+user("userA")+`]}}`), 0o600))
	codexInstall(t, home, "", false)
	// The user adds a hook after Vigil's and trusts both of theirs with dotted keys.
	b := readOrNil(t, hooksJSON)
	withB := strings.Replace(string(b), `"timeout": 600}]}]`, `"timeout": 600}]}, `+user("userB")+`]`, 1)
	require.NotEqual(t, string(b), withB)
	require.NoError(t, os.WriteFile(hooksJSON, []byte(withB), 0o600))
	key := func(g int) string { return fmt.Sprintf("%s:pre_tool_use:%d:0", hooksJSON, g) }
	cfg := string(readOrNil(t, config)) + "\n[hooks]\nstate.\"" + key(0) + "\".trusted_hash = \"sha256:a\"\n" +
		"state.\"" + key(2) + "\".trusted_hash = \"sha256:b\"\n"
	require.NoError(t, os.WriteFile(config, []byte(cfg), 0o600))

	o := installOpts(Codex, "")
	o.CodexHome, o.Uninstall = home, true
	_, err := Install(o)
	require.ErrorContains(t, err, "by hand")
	require.NotContains(t, err.Error(), "add Vigil's hook trust", "an uninstall adds nothing")
	require.Equal(t, withB, string(readOrNil(t, hooksJSON)), "hooks.json is unchanged")
	require.Equal(t, cfg, string(readOrNil(t, config)), "config.toml is unchanged")
	// A rerun still fails: it does not find an "up to date" hooks.json.
	_, err = Install(o)
	require.ErrorContains(t, err, "by hand")

	// Once the user writes the entries as tables, the rerun works and moves userB's trust.
	fixed := strings.Replace(cfg, "[hooks]\nstate.\""+key(0)+"\".trusted_hash = \"sha256:a\"\nstate.\""+key(2)+"\".trusted_hash = \"sha256:b\"\n",
		"[hooks.state.\""+key(0)+"\"]\ntrusted_hash = \"sha256:a\"\n[hooks.state.\""+key(2)+"\"]\ntrusted_hash = \"sha256:b\"\n", 1)
	require.NotEqual(t, cfg, fixed)
	require.NoError(t, os.WriteFile(config, []byte(fixed), 0o600))
	res, err := Install(o)
	require.NoError(t, err)
	require.True(t, res.Changed)
	require.NotContains(t, string(readOrNil(t, hooksJSON)), "vigil")
	require.Equal(t, map[string]any{
		key(0): map[string]any{"trusted_hash": "sha256:a"},
		key(1): map[string]any{"trusted_hash": "sha256:b"},
	}, trustState(t, config))
}

// TestInstallCodexConcurrent: installs that run at once (here for several projects, all
// trusted in the one config.toml) each read, edit and replace config.toml; without a lock
// one would replace the file with a version that lacks another's entries.
func TestInstallCodexConcurrent(t *testing.T) {
	home := t.TempDir()
	config := filepath.Join(home, "config.toml")
	require.NoError(t, os.WriteFile(config, []byte("model = \"m\"\n"), 0o600))
	var projects []string
	for range 12 {
		projects = append(projects, t.TempDir())
	}
	var wg sync.WaitGroup
	errs := make([]error, len(projects))
	for i, p := range projects {
		wg.Go(func() {
			o := installOpts(Codex, p)
			o.CodexHome = home
			_, errs[i] = Install(o)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	state := trustState(t, config)
	for _, p := range projects {
		for _, ev := range []string{"pre_tool_use", "post_tool_use", "user_prompt_submit"} {
			require.Contains(t, state, filepath.Join(p, ".codex", "hooks.json")+":"+ev+":0:0")
		}
	}
	require.Len(t, state, 3*len(projects))
	require.Equal(t, "model = \"m\"\n", string(readOrNil(t, config))[:len("model = \"m\"\n")])
}

// TestCodexTrustWriteFailureRestoresHooks: when writing config.toml fails after hooks.json
// was written, hooks.json gets back what it held (or goes, when there was none).
func TestCodexTrustWriteFailureRestoresHooks(t *testing.T) {
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("needs /proc: no directory can be created under it, even by root")
	}
	for name, content := range map[string][]byte{"existing": []byte(`{"model": "x"}`), "none": nil} {
		t.Run(name, func(t *testing.T) {
			home, project := t.TempDir(), t.TempDir()
			// config.toml does not exist (so the plan succeeds) and cannot be created.
			require.NoError(t, os.Symlink("/proc/self/vigil-test-none/config.toml", filepath.Join(home, "config.toml")))
			hooksJSON := filepath.Join(project, ".codex", "hooks.json")
			if content != nil {
				require.NoError(t, os.MkdirAll(filepath.Dir(hooksJSON), 0o700))
				require.NoError(t, os.WriteFile(hooksJSON, content, 0o600))
			}
			o := installOpts(Codex, project)
			o.CodexHome = home
			_, err := Install(o)
			require.ErrorContains(t, err, "vigil-test-none")
			require.Equal(t, content, readOrNil(t, hooksJSON))
		})
	}
}
