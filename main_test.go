package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
)

func testConfig(t *testing.T, db string) Config {
	t.Helper()
	cfg, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--db", db}, io.Discard)
	require.NoError(t, err)
	return cfg
}

const toolStep = `{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":{"context":{"agent":{"id":"a1","name":"Agent","instructions":"x","version":"1","provider":{"name":"p","url":"https://p.example"}},"session":{"id":"cli-session"},"turnId":"t1","stepId":"s1","timestamp":"2026-11-22T08:00:00Z"},"toolCallRequest":{"executionId":"e1","toolId":"transfer_funds","inputs":[{"name":"amount","value":5000}]}}}`

func postStep(t *testing.T, url, body string) map[string]any {
	t.Helper()
	resp, err := http.Post(url+"/aos", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

// TestServeRestart starts the whole server twice on one database: what was answered before
// a clean shutdown is there after the restart.
func TestServeRestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "nested", "vigil.db")
	log := slog.New(slog.DiscardHandler)
	srv, err := startServer(context.Background(), testConfig(t, db), log)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"))
	out := postStep(t, srv.URL, toolStep)
	require.Equal(t, "allow", out["result"].(map[string]any)["decision"])
	require.NoError(t, srv.Shutdown(5*time.Second))

	srv, err = startServer(context.Background(), testConfig(t, db), log)
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()
	resp, err := http.Get(srv.URL + "/api/sessions/cli-session")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var s struct{ Steps int }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	require.Equal(t, 1, s.Steps)

	resp2, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	defer resp2.Body.Close()
	require.Equal(t, http.StatusOK, resp2.StatusCode)
	require.Contains(t, resp2.Header.Get("Content-Type"), "text/html")
}

func TestConfigFromEnvironmentAndFlags(t *testing.T) {
	t.Setenv("VIGIL_ADDR", "127.0.0.1:9999")
	t.Setenv("VIGIL_MAX_BODY", "1234")
	cfg, err := parseConfig("serve", []string{"--max-body", "5678"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9999", cfg.Addr, "environment sets the default")
	require.EqualValues(t, 5678, cfg.MaxBodyBytes, "a flag beats the environment")

	t.Setenv("VIGIL_MAX_BODY", "lots")
	_, err = parseConfig("serve", nil, io.Discard)
	require.ErrorContains(t, err, "VIGIL_MAX_BODY")

	t.Setenv("VIGIL_MAX_BODY", "")
	os.Unsetenv("VIGIL_MAX_BODY")
	_, err = parseConfig("serve", []string{"--default-decision", "maybe"}, io.Discard)
	require.ErrorContains(t, err, "default-decision")
}

func TestHoldLimitFlags(t *testing.T) {
	cfg, err := parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 256<<20, cfg.MaxHoldBytes)
	require.Zero(t, cfg.MaxHoldsPerAgent, "a quarter of --max-holds")

	t.Setenv("VIGIL_MAX_HOLD_BYTES", "1GiB")
	cfg, err = parseConfig("serve", []string{"--max-holds", "40", "--max-holds-per-agent", "40"}, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 1<<30, cfg.MaxHoldBytes)
	require.Equal(t, 40, cfg.MaxHoldsPerAgent)

	_, err = parseConfig("serve", []string{"--max-holds", "40", "--max-holds-per-agent", "41"}, io.Discard)
	require.ErrorContains(t, err, "max-holds-per-agent")
	_, err = parseConfig("serve", []string{"--max-hold-bytes", "lots"}, io.Discard)
	require.ErrorContains(t, err, "max-hold-bytes")
}

func TestSessionCacheFlag(t *testing.T) {
	cfg, err := parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, guardian.DefaultSessionCacheBytes, cfg.SessionCacheBytes)
	t.Setenv("VIGIL_SESSION_CACHE_BYTES", "64MiB")
	cfg, err = parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 64<<20, cfg.SessionCacheBytes)
	_, err = parseConfig("serve", []string{"--session-cache-bytes", "lots"}, io.Discard)
	require.ErrorContains(t, err, "session-cache-bytes")
}

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte(`rules:
  - id: big-transfer
    when: tool == "transfer_funds" && inputs.amount > 1000
    action: deny
    reasonCode: BIG_TRANSFER
tests:
  - name: a big transfer is denied
    step:
      method: steps/toolCallRequest
      params: {"context":{"agent":{"id":"a1","name":"Agent","instructions":"x","version":"1","provider":{"name":"p","url":"https://p.example"}},"session":{"id":"s"},"turnId":"t1","stepId":"s1","timestamp":"2026-11-22T08:00:00Z"},"toolCallRequest":{"executionId":"e1","toolId":"transfer_funds","inputs":[{"name":"amount","value":5000}]}}
    expect: deny
  - name: wrong on purpose
    step:
      method: steps/toolCallRequest
      params: {"context":{"agent":{"id":"a1","name":"Agent","instructions":"x","version":"1","provider":{"name":"p","url":"https://p.example"}},"session":{"id":"s"},"turnId":"t1","stepId":"s1","timestamp":"2026-11-22T08:00:00Z"},"toolCallRequest":{"executionId":"e1","toolId":"transfer_funds","inputs":[{"name":"amount","value":5}]}}
    expect: deny
`), 0o600))
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("rules:\n  - id: broken\n    when: tool == \n    action: deny\n"), 0o600))

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"version", []string{"version"}, 0, "vigil ", ""},
		{"unknown", []string{"frobnicate"}, 2, "", "unknown command"},
		{"check ok", []string{"rules", "check", good}, 0, "1 rules OK", ""},
		{"check error has a position", []string{"rules", "check", bad}, 1, "", "bad.yaml:3:"},
		{"test reports failures", []string{"rules", "test", good}, 1, "1 passed, 1 failed", ""},
		{"rules usage", []string{"rules"}, 2, "", "usage"},
		// Help lists the commands, however it is asked for, and every command has its own.
		{"--help", []string{"--help"}, 0, "vigil completion bash|zsh|fish", ""},
		{"-h", []string{"-h"}, 0, "Exit codes: 0 success", ""},
		{"help", []string{"help"}, 0, "vigil serve [flags]", ""},
		{"serve -h", []string{"serve", "-h"}, 0, "", "-addr"},
		{"rules -h", []string{"rules", "-h"}, 0, "vigil rules check FILE", ""},
		{"rules check -h", []string{"rules", "check", "-h"}, 0, "vigil rules test FILE", ""},
		{"keys -h", []string{"keys", "-h"}, 0, "vigil keys create", ""},
		{"users -h", []string{"users", "-h"}, 0, "vigil users add", ""},
		{"hook -h", []string{"hook", "-h"}, 0, "", "vigil hook claude-code"},
		{"completion -h", []string{"completion", "-h"}, 0, "source <(vigil completion bash)", ""},
		{"completion without a shell", []string{"completion"}, 2, "", "usage"},
		{"completion of an unknown shell", []string{"completion", "tcsh"}, 2, "", "unknown shell"},
		{"fish completion", []string{"completion", "fish"}, 0, "-l rules-mode", ""},
		{"zsh completion", []string{"completion", "zsh"}, 0, "#compdef vigil", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tc.args, &out, &errOut)
			require.Equal(t, tc.code, code, "stdout: %s\nstderr: %s", out.String(), errOut.String())
			require.Contains(t, out.String(), tc.stdout)
			require.Contains(t, errOut.String(), tc.stderr)
		})
	}
}

func TestRuleBudgetFlag(t *testing.T) {
	cfg, err := parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, cfg.RuleBudget)
	t.Setenv("VIGIL_RULE_BUDGET", "250ms")
	cfg, err = parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, cfg.RuleBudget)
	_, err = parseConfig("serve", []string{"--rule-budget", "-1s"}, io.Discard)
	require.ErrorContains(t, err, "rule-budget")
}

// The bash script completes commands, subcommands and the guardian's flags when bash runs it.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	var script bytes.Buffer
	require.Equal(t, 0, run([]string{"completion", "bash"}, &script, io.Discard))
	path := filepath.Join(t.TempDir(), "vigil.bash")
	require.NoError(t, os.WriteFile(path, script.Bytes(), 0o600))
	for _, tc := range []struct {
		words string
		cword int
		want  string
	}{
		{"vigil ser", 1, "serve"},
		{"vigil rules t", 2, "test"},
		{"vigil hook cl", 2, "claude-code"},
		{"vigil serve --max-hold", 2, "--max-hold-bytes --max-holds --max-holds-per-agent"},
		{"vigil completion f", 2, "fish"},
	} {
		cmd := exec.Command(bash, "--norc", "-c", `source "$1"; COMP_WORDS=($2); COMP_CWORD=$3; _vigil; echo "${COMPREPLY[*]}"`,
			"bash", path, tc.words, strconv.Itoa(tc.cword))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, tc.want, strings.TrimSpace(string(out)), tc.words)
	}
}

func TestAAPFlag(t *testing.T) {
	cfg, err := parseConfig("serve", []string{"--aap", "a=http://127.0.0.1:3000", "--aap", "b=https://agents.example.com/aap"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"a=http://127.0.0.1:3000", "b=https://agents.example.com/aap"}, cfg.AAP.list)

	t.Setenv("VIGIL_AAP", "a=http://127.0.0.1:3000, b=http://127.0.0.1:3001")
	cfg, err = parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"a=http://127.0.0.1:3000", "b=http://127.0.0.1:3001"}, cfg.AAP.list)
	cfg, err = parseConfig("serve", []string{"--aap", "c=http://127.0.0.1:3002"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"c=http://127.0.0.1:3002"}, cfg.AAP.list, "the command line beats the environment")
	os.Unsetenv("VIGIL_AAP")

	for _, bad := range [][]string{{"--aap", "a"}, {"--aap", "a=ftp://x"}, {"--aap", "a=http://x", "--aap", "a=http://y"}, {"--aap", "a b=http://x"}} {
		_, err := parseConfig("serve", bad, io.Discard)
		require.ErrorContains(t, err, "aap", bad)
	}
}
