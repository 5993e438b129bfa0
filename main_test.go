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
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-guardian/vigil/internal/syncbuf"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
)

// pgURL is a PostgreSQL --db for tests that only parse flags: nothing connects to it.
const pgURL = "postgres://vigil@127.0.0.1:42999/vigil"

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
		// The version however it is asked for, never the desktop window's flags.
		{"--version", []string{"--version"}, 0, "vigil " + version + "\n", ""},
		{"-v", []string{"-v"}, 0, "vigil " + version + "\n", ""},
		{"-version", []string{"-version"}, 0, "vigil " + version + "\n", ""},
		{"version -h", []string{"version", "-h"}, 0, "usage: vigil version", ""},
		{"version with an argument", []string{"version", "now"}, 2, "", `unexpected argument "now"`},
		// help CMD is CMD's own help; every command's is checked in TestHelpCommand.
		{"help serve", []string{"help", "serve"}, 0, "", "-max-holds-per-agent"},
		{"--help serve", []string{"--help", "serve"}, 0, "", "-max-holds-per-agent"},
		{"help rules check", []string{"help", "rules", "check"}, 0, "vigil rules test FILE", ""},
		{"help of an unknown command", []string{"help", "frobnicate"}, 2, "", `vigil help: unknown command "frobnicate"`},
		{"mcp -h", []string{"mcp", "-h"}, 0, "", "vigil mcp wrap"},
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

// TestHelpCommand: `vigil help CMD` prints what `vigil CMD --help` prints, for every command
// the completion scripts offer, and each of them runs.
func TestHelpCommand(t *testing.T) {
	t.Setenv("VIGIL_DB", filepath.Join(t.TempDir(), "vigil.db")) // keys and users name it
	for _, name := range completionTree[""] {
		t.Run(name, func(t *testing.T) {
			_, ok := command(name)
			require.True(t, ok, "a command the completion offers")
			var helpOut, helpErr, flagOut, flagErr bytes.Buffer
			require.Equal(t, 0, run([]string{"help", name}, &helpOut, &helpErr), "stderr: %s", helpErr.String())
			require.NotEmpty(t, helpOut.String()+helpErr.String())
			if name == "help" {
				return // help's help is the commands, not the -h of a command called help
			}
			require.Equal(t, 0, run([]string{name, "--help"}, &flagOut, &flagErr), "stderr: %s", flagErr.String())
			require.Equal(t, flagOut.String(), helpOut.String())
			require.Equal(t, flagErr.String(), helpErr.String())
		})
	}
}

// TestServeRefusesBadValues: a value a flag gives no meaning is bad usage (exit 2) with a
// message naming the flag, or the variable that set it, before anything starts.
func TestServeRefusesBadValues(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"log level", []string{"--log-level", "loud"}, nil, `-log-level: must be debug, info, warn or error, got "loud"`},
		{"log format", []string{"--log-format", "xml"}, nil, `-log-format: must be text or json, got "xml"`},
		{"zero body", []string{"--max-body", "0"}, nil, "-max-body: must be at least 1 (bytes), got 0"},
		{"negative body", []string{"--max-body", "-1"}, nil, "-max-body: must be at least 1 (bytes), got -1"},
		{"negative hold timeout", []string{"--hold-timeout", "-5s"}, nil, "-hold-timeout: must be positive (e.g. 2m), got -5s"},
		{"zero hold timeout", []string{"--hold-timeout", "0"}, nil, "-hold-timeout: must be positive (e.g. 2m), got 0s"},
		{"negative rate", []string{"--agent-rate", "-3"}, nil, "-agent-rate: must be a number of requests per second, 0 or more (0: unlimited), got -3"},
		{"NaN rate", []string{"--agent-rate", "NaN"}, nil, "-agent-rate: must be"},
		{"infinite rate", []string{"--agent-rate", "+Inf"}, nil, "-agent-rate: must be"},
		{"negative burst", []string{"--agent-burst", "-1"}, nil, "-agent-burst: must not be negative"},
		{"burst without a rate", []string{"--agent-burst", "20"}, nil, "-agent-burst: has no effect without -agent-rate"},
		{"secret without a webhook", nil, map[string]string{"VIGIL_WEBHOOK_SECRET": "s3cret"}, "VIGIL_WEBHOOK_SECRET: has no effect without -webhook"},
		{"negative retain age", []string{"--retain-age", "-1h"}, nil, "-retain-age: must not be negative (0 keeps steps of any age), got -1h0m0s"},
		{"zero retain interval", []string{"--retain-interval", "0"}, nil, "-retain-interval: must be positive"},
		// The bad flag is named, not the per-agent share derived from it.
		{"negative max holds", []string{"--max-holds", "-1"}, nil, "-max-holds: must be at least 1, got -1"},
		{"zero max holds", []string{"--max-holds", "0"}, nil, "-max-holds: must be at least 1, got 0"},
		{"per-agent over max", []string{"--max-holds", "40", "--max-holds-per-agent", "41"}, nil, "-max-holds-per-agent: must be between 0 (a quarter of -max-holds) and -max-holds (40), got 41"},
		{"zero hold bytes", []string{"--max-hold-bytes", "0"}, nil, "-max-hold-bytes: must be at least 1 byte"},
		{"zero session cache", []string{"--session-cache-bytes", "0"}, nil, "-session-cache-bytes: must be at least 1 byte"},
		{"zero heartbeat", []string{"--db", pgURL, "--replica-heartbeat", "0"}, nil, "-replica-heartbeat: must be positive"},
		{"dead after under three heartbeats", []string{"--db", pgURL, "--replica-heartbeat", "5s", "--replica-dead-after", "10s"}, nil, "-replica-dead-after: must be at least three heartbeats (3 × -replica-heartbeat = 15s), got 10s"},
		{"zero dead after", []string{"--db", pgURL, "--replica-dead-after", "0"}, nil, "-replica-dead-after: must be at least three heartbeats"},
		{"negative read timeout", []string{"--read-timeout", "-1s"}, nil, "-read-timeout: must not be negative"},
		{"negative write timeout", []string{"--write-timeout", "-1s"}, nil, "-write-timeout: must not be negative"},
		{"negative idle timeout", []string{"--idle-timeout", "-1s"}, nil, "-idle-timeout: must not be negative"},
		{"negative conns per ip", []string{"--max-conns-per-ip", "-1"}, nil, "-max-conns-per-ip: must not be negative"},
		{"negative conns", []string{"--max-conns", "-5"}, nil, "-max-conns: must not be negative"},
		{"zero live clients", []string{"--max-live-clients", "0"}, nil, "-max-live-clients: must be at least 1, got 0"},
		{"address without a port", []string{"--addr", "bogus"}, nil, `-addr: must be HOST:PORT (port 0 picks a free one), got "bogus"`},
		{"metrics address without a port", []string{"--metrics-addr", "bogus"}, nil, `-metrics-addr: must be HOST:PORT`},
		{"empty database", []string{"--db", ""}, nil, "-db: must name a SQLite file or a postgres:// URL"},
		{"public URL", []string{"--public-url", "ftp://x"}, nil, `-public-url: must be an absolute http(s) URL`},
		{"rule budget", []string{"--rule-budget", "-1s"}, nil, "-rule-budget: must not be negative"},
		// The variables go through the same checks and are named in the message.
		{"variable log level", nil, map[string]string{"VIGIL_LOG_LEVEL": "loud"}, `VIGIL_LOG_LEVEL: must be debug, info, warn or error, got "loud"`},
		{"variable log format", nil, map[string]string{"VIGIL_LOG_FORMAT": "xml"}, "VIGIL_LOG_FORMAT: must be text or json"},
		{"variable body", nil, map[string]string{"VIGIL_MAX_BODY": "0"}, "VIGIL_MAX_BODY: must be at least 1 (bytes), got 0"},
		{"variable hold timeout", nil, map[string]string{"VIGIL_HOLD_TIMEOUT": "-5s"}, "VIGIL_HOLD_TIMEOUT: must be positive"},
		{"variable rate", nil, map[string]string{"VIGIL_AGENT_RATE": "-3"}, "VIGIL_AGENT_RATE: must be"},
		{"variable retain age", nil, map[string]string{"VIGIL_RETAIN_AGE": "-1h"}, "VIGIL_RETAIN_AGE: must not be negative"},
		{"variable max holds", nil, map[string]string{"VIGIL_MAX_HOLDS": "-1"}, "VIGIL_MAX_HOLDS: must be at least 1, got -1"},
		// A flag on the command line overrides its variable, and is named when it is bad.
		{"flag over variable", []string{"--max-body", "-2"}, map[string]string{"VIGIL_MAX_BODY": "5"}, "-max-body: must be at least 1 (bytes), got -2"},
		// Webhooks: the flag and the variable both add targets, so the one holding the bad
		// value is named.
		{"webhook", []string{"--webhook", "ftp://h.example/x"}, nil, `-webhook: webhook "ftp://h.example/…": want an absolute http(s) URL`},
		{"webhook name", []string{"--webhook", "https://h.example/#name=%ff"}, nil, `-webhook: webhook "https://h.example": option name="\xff"`},
		{"variable webhook", nil, map[string]string{"VIGIL_WEBHOOK": "https://ok.example/ https://h.example/#format=xml"}, `VIGIL_WEBHOOK: webhook "https://h.example": format must be json or slack`},
		{"variable webhook beside a good flag", []string{"--webhook", "https://ok.example/"}, map[string]string{"VIGIL_WEBHOOK": "https://h.example/#colour=red"}, `VIGIL_WEBHOOK: webhook "https://h.example": unknown option "colour"`},
		{"flag webhook beside a good variable", []string{"--webhook", "https://h.example/#colour=red"}, map[string]string{"VIGIL_WEBHOOK": "https://ok.example/"}, `-webhook: webhook "https://h.example": unknown option "colour"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			// parseConfig, not run: a value that slipped through would start a guardian that
			// serves until a signal.
			_, err := parseConfig("serve", tc.args, io.Discard)
			require.ErrorContains(t, err, tc.want)
			require.True(t, strings.HasPrefix(err.Error(), tc.want[:strings.Index(tc.want, ":")+1]), "the message starts with the flag: %v", err)
		})
	}
	// Through run: exit 2, the message, and nothing started.
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"serve", "--max-holds", "-1"}, &out, &errOut), "stderr: %s", errOut.String())
	require.Equal(t, "vigil serve: -max-holds: must be at least 1, got -1\n", errOut.String())
	require.Empty(t, out.String())

	// A value the flag package itself refuses, and an unknown flag, are one line too.
	for _, tc := range []struct{ args []string }{
		{[]string{"serve", "--agentapi", "bogus"}},
		{[]string{"serve", "--trusted-proxies", "not-a-cidr"}},
		{[]string{"serve", "--max-hold-bytes", "lots"}},
		{[]string{"serve", "--bogus"}},
	} {
		out.Reset()
		errOut.Reset()
		require.Equal(t, 2, run(tc.args, &out, &errOut), "%v", tc.args)
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "%v: %s", tc.args, errOut.String())
		require.True(t, strings.HasPrefix(errOut.String(), "vigil serve: "), errOut.String())
		require.NotContains(t, errOut.String(), "Usage")
	}

	// A bad webhook is one line too, without the usage, and without the URL's path (often
	// the secret).
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"serve", "--webhook", "https://hooks.example/SECRET#events=nope"},
			want: `vigil serve: -webhook: webhook "https://hooks.example/…": unknown event "nope" (want hold.created, hold.resolved, step.denied, deny or all)` + "\n"},
		{args: []string{"serve"}, env: "https://hooks.example/SECRET#name=a%20b",
			want: `vigil serve: VIGIL_WEBHOOK: webhook "https://hooks.example/…": option name="a b": want 1 to 64 of the letters A-Z and a-z, digits, '.', '_' and '-'` + "\n"},
	} {
		t.Run(strings.Join(tc.args, " ")+tc.env, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("VIGIL_WEBHOOK", tc.env)
			}
			var out, errOut bytes.Buffer
			require.Equal(t, 2, run(tc.args, &out, &errOut), "stderr: %s", errOut.String())
			require.Equal(t, tc.want, errOut.String())
			require.NotContains(t, errOut.String(), "SECRET")
			require.Empty(t, out.String())
		})
	}
}

// The webhook values of the flag and the variable both become targets, the variable's
// first.
func TestServeWebhookTargets(t *testing.T) {
	t.Setenv("VIGIL_WEBHOOK", "https://a.example/x https://b.example/y#format=slack")
	cfg, err := parseConfig("serve", []string{"--webhook", "https://c.example/z#name=ops", "--addr", ":0"}, io.Discard)
	require.NoError(t, err)
	var names []string
	for _, w := range cfg.Webhooks {
		names = append(names, w.Name)
	}
	require.Equal(t, []string{"a.example", "b.example", "ops"}, names)
	require.Equal(t, "slack", cfg.Webhooks[1].Format)
}

// TestServeAcceptsDocumentedValues: 0 where a flag's help gives it a meaning, and log level
// names in any case (slog read them so before they were checked).
func TestServeAcceptsDocumentedValues(t *testing.T) {
	cfg, err := parseConfig("serve", []string{"--agent-rate", "0", "--agent-burst", "0", "--retain-age", "0",
		"--retain-size", "0", "--rule-budget", "0", "--max-holds-per-agent", "0", "--max-conns", "0",
		"--max-conns-per-ip", "0", "--read-timeout", "0", "--write-timeout", "0", "--idle-timeout", "0",
		"--log-level", "WARN", "--log-format", "json", "--addr", ":0"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "warn", cfg.LogLevel)
	log := newLogger(cfg, io.Discard)
	require.False(t, log.Enabled(context.Background(), slog.LevelInfo))
	require.True(t, log.Enabled(context.Background(), slog.LevelWarn))

	// Only a dead-after someone chose is held to three heartbeats; the default follows a
	// slower heartbeat in the registry. (The replica flags need a PostgreSQL database.)
	cfg, err = parseConfig("serve", []string{"--db", pgURL, "--replica-heartbeat", "5s"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, cfg.ReplicaHeartbeat)
	t.Setenv("VIGIL_REPLICA_DEAD_AFTER", "10s")
	_, err = parseConfig("serve", []string{"--db", pgURL, "--replica-heartbeat", "5s"}, io.Discard)
	require.ErrorContains(t, err, "VIGIL_REPLICA_DEAD_AFTER: must be at least three heartbeats")
}

// TestServeHelpDespiteBadVariable: a bad VIGIL_* value does not hide the flags from -h, nor
// from the completion scripts that read them there.
func TestServeHelpDespiteBadVariable(t *testing.T) {
	t.Setenv("VIGIL_MAX_BODY", "lots")
	var errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"help", "serve"}, io.Discard, &errOut))
	require.Contains(t, errOut.String(), "-max-body")
	require.Contains(t, serveFlags(), "--max-body")
	_, err := parseConfig("serve", nil, io.Discard)
	require.ErrorContains(t, err, `VIGIL_MAX_BODY="lots"`)
}

// TestServeHoldTimeout: --hold-timeout is the wait of a hold whose rule names no timeout
// (one default for every hold), 2m unless set.
func TestServeHoldTimeout(t *testing.T) {
	cfg, err := parseConfig("serve", nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, cfg.HoldTimeout)

	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(`rules:
  - id: review-transfers
    when: tool == "transfer_funds"
    action: hold
`), 0o600))
	cfg, err = parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "vigil.db"),
		"--rules", rulesFile, "--hold-timeout", "7m"}, io.Discard)
	require.NoError(t, err)
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()

	answered := make(chan map[string]any, 1)
	go func() { answered <- postStep(t, srv.URL, toolStep) }()
	id := pendingHold(t, srv.URL)
	var page struct {
		Holds []struct {
			ID                  string
			RuleID              string `json:"ruleId"`
			CreatedAt, Deadline time.Time
		}
	}
	getJSON(t, srv.URL+"/api/holds?status=pending", &page)
	require.Len(t, page.Holds, 1)
	h := page.Holds[0]
	require.Equal(t, id, h.ID)
	require.Equal(t, "review-transfers", h.RuleID)
	require.Equal(t, 7*time.Minute, h.Deadline.Sub(h.CreatedAt), "the flag's wait, not the rules' own default")

	resp, err := http.Post(srv.URL+"/api/holds/"+id+"/deny", "application/json", strings.NewReader(`{"operator":"alice"}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "deny", (<-answered)["result"].(map[string]any)["decision"])
}

// TestServeLogsRuleErrors: a rule that fails at run time is logged by the guardian, once
// for a burst of failing steps.
func TestServeLogsRuleErrors(t *testing.T) {
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(`rules:
  - id: broken-compare
    when: inputs.amount > "many"
    action: deny
    mode: monitor
`), 0o600))
	cfg, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "vigil.db"),
		"--rules", rulesFile}, io.Discard)
	require.NoError(t, err)
	var logs syncbuf.Buffer
	srv, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()
	for range 5 {
		require.Equal(t, "allow", postStep(t, srv.URL, toolStep)["result"].(map[string]any)["decision"], "a monitor rule fails open")
	}
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "rule evaluation failed") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, logs.String())
	require.Contains(t, lines[0], "rule=broken-compare")
}

// TestReplicaFlagsNeedPostgres: the replica flags tune the replicas of a PostgreSQL
// database; with a SQLite file they would do nothing, so setting one (or its variable)
// stops the start with exit code 2 before the database is touched.
func TestReplicaFlagsNeedPostgres(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // the error; "" when the start goes on
	}{
		{"heartbeat on SQLite", []string{"--replica-heartbeat", "5s"}, nil,
			"-replica-heartbeat: has no effect without -db postgres://…"},
		{"dead after on SQLite", []string{"--replica-dead-after", "30s"}, nil,
			"-replica-dead-after: has no effect without -db postgres://…"},
		{"default value given on SQLite", []string{"--replica-heartbeat", "1s"}, nil,
			"-replica-heartbeat: has no effect without -db postgres://…"},
		{"heartbeat variable on SQLite", nil, map[string]string{"VIGIL_REPLICA_HEARTBEAT": "5s"},
			"VIGIL_REPLICA_HEARTBEAT: has no effect without -db postgres://…"},
		{"dead after variable on SQLite", nil, map[string]string{"VIGIL_REPLICA_DEAD_AFTER": "30s"},
			"VIGIL_REPLICA_DEAD_AFTER: has no effect without -db postgres://…"},
		{"SQLite file from VIGIL_DB", []string{"--replica-heartbeat", "5s"}, map[string]string{"VIGIL_DB": "DBFILE"},
			"-replica-heartbeat: has no effect without VIGIL_DB=postgres://…"},
		{"flags with a postgres URL", []string{"--db", pgURL, "--replica-heartbeat", "5s", "--replica-dead-after", "30s"}, nil, ""},
		{"variables with a postgresql URL from VIGIL_DB", nil, map[string]string{
			"VIGIL_DB": strings.Replace(pgURL, "postgres:", "postgresql:", 1), "VIGIL_REPLICA_HEARTBEAT": "5s", "VIGIL_REPLICA_DEAD_AFTER": "30s"}, ""},
		{"neither on SQLite", nil, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "vigil.db")
			for k, v := range tc.env {
				t.Setenv(k, strings.Replace(v, "DBFILE", db, 1))
			}
			args := append([]string{"--addr", "127.0.0.1:0"}, tc.args...)
			if tc.env["VIGIL_DB"] == "" && !slices.Contains(tc.args, "--db") {
				args = append(args, "--db", db)
			}
			_, err := parseConfig("serve", args, io.Discard)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
			// The start stops with exit code 2 before the database is touched.
			var stdout, stderr bytes.Buffer
			require.Equal(t, 2, run(append([]string{"serve"}, args...), &stdout, &stderr))
			require.Equal(t, "vigil serve: "+tc.want+"\n", stderr.String())
			require.NoFileExists(t, db)
		})
	}
}
