package main

import (
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"

	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/auth"
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
	up := startEverything(t, everything)

	dir := t.TempDir()
	db := filepath.Join(dir, "vigil.db")
	rulesFile := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(tsRules), 0o600))
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
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()

	self, err := os.Executable()
	require.NoError(t, err)
	cases := []struct {
		name, session string
		cfg           map[string]any
	}{
		{"streamable http", "mcp-everything-", map[string]any{"transport": "http", "url": srv.URL + "/mcp/everything",
			"headers": map[string]string{"X-Vigil-Key": key}}},
		{"stdio", "mcp-wrapped-", map[string]any{"transport": "stdio", "command": self,
			"args": []string{"-test.run=^TestHelperVigil$", "--", "mcp", "wrap", "--name", "wrapped", "--", everything, "stdio"},
			"env":  map[string]string{helperEnv: "1", "VIGIL_URL": srv.URL, "VIGIL_API_KEY": key}}},
	}
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

// startEverything runs server-everything's Streamable HTTP transport and returns its MCP
// endpoint.
func startEverything(t *testing.T, bin string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	cmd := exec.Command(bin, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				close(ready)
				break
			}
		}
		for sc.Scan() { // keep draining so the server never blocks on its output
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("server-everything did not start")
	}
	return "http://127.0.0.1:" + port + "/mcp"
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
