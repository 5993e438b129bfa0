package main

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"

	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/internal/mcptest"
)

// helperEnv makes this test binary run as vigil (helperMain): the TypeScript client's
// StdioClientTransport launches it as `vigil mcp wrap …`, the real command, without a
// separate build.
const helperEnv = "VIGIL_TEST_AS_VIGIL"

// TestHelperVigil is not a test: run with helperEnv set, it is vigil with the arguments
// after "--", and exits.
func TestHelperVigil(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("runs only as vigil for the TypeScript client test")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

const tsRules = `
rules:
  - id: no-env
    when: mcp.method == "tools/call" && tool == "get-env"
    action: deny
    message: The environment is private.
  - id: redact-args
    when: mcp.method == "tools/call" && tool == "echo" && text contains "secret-"
    action: modify
    modify: {redact: ['secret-[a-z0-9]+']}
  - id: redact-results
    when: kind == "mcp" && mcp.method == "" && tool == "echo" && text contains "tok-"
    action: modify
    modify: {redact: ['tok-[0-9]+']}
  - id: review-sums
    when: mcp.method == "tools/call" && tool == "get-sum"
    action: hold
    hold: {timeout: 2m, onTimeout: deny}
    message: Sums need a reviewer.
`

// tsResult is what test/mcp/tsclient.mjs prints.
type tsResult struct {
	Server struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"server"`
	Tools                                               []string `json:"tools"`
	Allowed, Denied, ModifiedArgs, ModifiedResult, Held struct {
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	}
}

// tsDeps returns node, test/mcp/tsclient.mjs and server-everything's executable, skipping
// the test when `npm ci --prefix test/mcp` has not installed the SDK and the server (make
// deps-test does).
func tsDeps(t *testing.T) (node, script, everything string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir, err := filepath.Abs(filepath.Join("test", "mcp"))
	require.NoError(t, err)
	for _, p := range []string{"node_modules/@modelcontextprotocol/sdk/package.json", "node_modules/.bin/mcp-server-everything"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Skipf("%s is not installed: run `npm ci --prefix test/mcp` (make deps-test does)", p)
		}
	}
	return node, filepath.Join(dir, "tsclient.mjs"), filepath.Join(dir, "node_modules", ".bin", "mcp-server-everything")
}

// TestMCPTypeScriptClient drives both MCP front ends with the official TypeScript SDK's
// client, in team mode: Streamable HTTP through `vigil serve --mcp everything=URL` with the
// key in X-Vigil-Key, and stdio through `vigil mcp wrap` with VIGIL_API_KEY. Each lists the
// tools (the denied one hidden), calls an allowed, a denied, a modified and a held tool
// (approved here through /api/holds), and its session shows the client and server.
func TestMCPTypeScriptClient(t *testing.T) {
	node, script, everything := tsDeps(t)
	srv, cases := tsServe(t, everything, tsRules)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			arg, err := json.Marshal(c.cfg)
			require.NoError(t, err)
			cmd := exec.CommandContext(ctx, node, script, string(arg))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()

			id := waitPendingHold(ctx, t, srv.URL, done)
			resp, err := http.Post(srv.URL+"/api/holds/"+id+"/approve", "application/json", strings.NewReader(`{"operator":"dana"}`))
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.NoError(t, <-done, stderr.String())

			var got tsResult
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), stdout.String()+stderr.String())
			require.Equal(t, "mcp-servers/everything", got.Server.Name)
			require.NotContains(t, got.Tools, "get-env", "denied outright: hidden")
			require.Contains(t, got.Tools, "get-sum", "held, not hidden")
			require.Contains(t, got.Tools, "echo", "modified, not hidden")
			require.Equal(t, "Echo: hello", got.Allowed.Text)
			require.False(t, got.Allowed.IsError)
			require.True(t, got.Denied.IsError)
			require.Equal(t, "Denied by Vigil: The environment is private.", got.Denied.Text)
			require.Equal(t, "Echo: key [REDACTED] here", got.ModifiedArgs.Text)
			require.Equal(t, "Echo: [REDACTED]", got.ModifiedResult.Text)
			require.False(t, got.Held.IsError)
			require.Equal(t, "The sum of 2 and 3 is 5.", got.Held.Text)

			// The session names the TypeScript client and the server.
			var page record.SessionPage
			getJSON(t, srv.URL+"/api/sessions?q="+c.session, &page)
			require.Len(t, page.Sessions, 1)
			s := page.Sessions[0]
			require.Equal(t, &record.Peer{Name: "vigil-ts-test", Version: "1.0.0"}, s.Client)
			require.Equal(t, "mcp-servers/everything", s.Server.Name)
			require.Equal(t, "vigil-ts-test 1.0.0", s.AgentName)
			require.NotZero(t, s.Decisions["deny"])
		})
	}
}

// tsCase is one transport the TypeScript client reaches server-everything by through
// Vigil: cfg is what test/mcp/tsclient.mjs takes, session the prefix of its Vigil session.
type tsCase struct {
	name, session string
	cfg           map[string]any
}

// tsServe runs server-everything over Streamable HTTP behind `vigil serve --mcp`, in team
// mode with rules, and returns the server and the client configurations of both transports
// (HTTP through the server, stdio through `vigil mcp wrap` of server-everything).
func tsServe(t *testing.T, everything, rules string) (*server, []tsCase) {
	t.Helper()
	up := mcptest.StartEverythingHTTP(t, everything)
	dir := t.TempDir()
	db := filepath.Join(dir, "vigil.db")
	rulesFile := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(rules), 0o600))
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{})
	require.NoError(t, err)
	az, err := auth.New(context.Background(), auth.Config{Loopback: true}, auth.Options{Store: st})
	require.NoError(t, err)
	_, key, err := az.CreateKey(context.Background(), auth.KeySpec{Name: "ts"}, "test")
	require.NoError(t, err)
	require.NoError(t, st.Close())

	cfg := testConfig(t, db)
	cfg.RulesFile = rulesFile
	cfg.MCP = []string{"everything=" + up}
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Shutdown(5*time.Second)) })

	self, err := os.Executable()
	require.NoError(t, err)
	return srv, []tsCase{
		{"streamable http", "mcp-everything-", map[string]any{"transport": "http", "url": srv.URL + "/mcp/everything",
			"headers": map[string]string{"X-Vigil-Key": key}}},
		{"stdio", "mcp-wrapped-", map[string]any{"transport": "stdio", "command": self,
			"args": []string{"-test.run=^TestHelperVigil$", "--", "mcp", "wrap", "--name", "wrapped", "--", everything, "stdio"},
			"env":  map[string]string{helperEnv: "1", "VIGIL_URL": srv.URL, "VIGIL_API_KEY": key}}},
	}
}

// tsTasksScript asks for a task-augmented call with the TypeScript SDK (as QA did): the
// transport as tsclient.mjs takes it, in VIGIL_TS_CFG; it prints the server's tasks
// capability as the client sees it and what the call's stream yields.
const tsTasksScript = `
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
const cfg = JSON.parse(process.env.VIGIL_TS_CFG);
const transport = cfg.transport === 'http'
  ? new StreamableHTTPClientTransport(new URL(cfg.url), { requestInit: { headers: cfg.headers ?? {} } })
  : new StdioClientTransport({ command: cfg.command, args: cfg.args ?? [], env: { ...process.env, ...(cfg.env ?? {}) }, stderr: 'inherit' });
const client = new Client({ name: 'vigil-ts-tasks', version: '1.0.0' });
await client.connect(transport);
const out = { tasks: client.getServerCapabilities()?.tasks ?? null, events: [] };
const stream = client.experimental.tasks.callToolStream(
  { name: 'simulate-research-query', arguments: { topic: 'tok-12345' } }, undefined, { task: { ttl: 60000 } });
for await (const m of stream) {
  out.events.push(m.type === 'error' ? { type: 'error', code: m.error.code, message: m.error.message } : m);
}
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
`

// TestMCPTypeScriptClientTasks: Vigil does not offer MCP tasks (tasks/result would hand the
// client a tool's result no rule judged): over either transport the TypeScript SDK's client
// sees no tasks capability, and its task-augmented call is refused with an error; no
// result, redacted or not, comes back. Before, the call got a task handle and tasks/result
// the tool's result with tok-12345 in it.
func TestMCPTypeScriptClientTasks(t *testing.T) {
	node, script, everything := tsDeps(t)
	rules := tsRules + `
  - id: redact-all-results
    when: kind == "mcp" && mcp.method == "" && text contains "tok-"
    action: modify
    modify: {redact: ['tok-[0-9]+']}
`
	_, cases := tsServe(t, everything, rules)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			arg, err := json.Marshal(c.cfg)
			require.NoError(t, err)
			cmd := exec.CommandContext(ctx, node, "--input-type=module", "-e", tsTasksScript)
			cmd.Dir = filepath.Dir(script) // where node finds the SDK
			cmd.Env = append(os.Environ(), "VIGIL_TS_CFG="+string(arg))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), stderr.String())
			require.NotContains(t, stdout.String(), "tok-12345")
			var got struct {
				Tasks  any `json:"tasks"`
				Events []struct {
					Type    string `json:"type"`
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"events"`
			}
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), stdout.String()+stderr.String())
			require.Nil(t, got.Tasks, "the client sees no tasks capability")
			require.Len(t, got.Events, 1, stdout.String())
			require.Equal(t, "error", got.Events[0].Type)
			require.Equal(t, -32602, got.Events[0].Code)
			require.Contains(t, got.Events[0].Message, "Vigil does not relay MCP tasks")
		})
	}
}

// waitPendingHold returns the id of the first pending hold once there is one; done reports
// a client that ended before.
func waitPendingHold(ctx context.Context, t *testing.T, base string, done <-chan error) string {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var page struct {
			Holds []struct {
				ID string `json:"id"`
			} `json:"holds"`
		}
		getJSON(t, base+"/api/holds?status=pending", &page)
		if len(page.Holds) > 0 {
			return page.Holds[0].ID
		}
		select {
		case err := <-done:
			t.Fatalf("the client ended before its call was held: %v", err)
		case <-ctx.Done():
			t.Fatal("no hold appeared")
		case <-tick.C:
		}
	}
}
