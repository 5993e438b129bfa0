package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

func TestMCPFlags(t *testing.T) {
	t.Setenv("VIGIL_MCP", "a=http://127.0.0.1:1/mcp, b=https://tools.example/mcp")
	cfg, err := parseConfig("serve", []string{"--mcp", "c=http://127.0.0.1:2/mcp"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"a=http://127.0.0.1:1/mcp", "b=https://tools.example/mcp", "c=http://127.0.0.1:2/mcp"}, cfg.MCP)
	for _, bad := range [][]string{{"--mcp", "http://127.0.0.1:1"}, {"--mcp", "a=ftp://x"}} {
		_, err := parseConfig("serve", bad, io.Discard)
		require.Error(t, err, bad)
	}
	t.Setenv("VIGIL_MCP", "")
	cfg, err = parseConfig("serve", []string{"--mcp", "a=http://127.0.0.1:1", "--mcp", "a=http://127.0.0.1:2"}, io.Discard)
	require.NoError(t, err)
	cfg.DB, cfg.Addr = filepath.Join(t.TempDir(), "vigil.db"), "127.0.0.1:0"
	_, err = startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, `the name "a" is given twice`)
}

func TestMCPWrapFlags(t *testing.T) {
	t.Setenv("VIGIL_URL", "http://vigil.example:7878")
	t.Setenv("VIGIL_API_KEY", "k1")
	cfg, err := parseMCPWrap([]string{"--on-guardian-error", "allow", "--", "/usr/bin/npx", "-y", "srv"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, mcpWrapConfig{Guardian: "http://vigil.example:7878", Name: "npx", OnGuardianError: "allow",
		APIKey: "k1", Command: []string{"/usr/bin/npx", "-y", "srv"}}, cfg)
	cfg, err = parseMCPWrap([]string{"--show-denied", "--", "srv"}, io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.ShowDenied)
	// One variable for serve's --mcp-show-denied and wrap's --show-denied.
	t.Setenv("VIGIL_MCP_SHOW_DENIED", "true")
	cfg, err = parseMCPWrap([]string{"--", "srv"}, io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.ShowDenied)
	for _, bad := range [][]string{{}, {"--on-guardian-error", "maybe", "--", "x"}, {"--name", "a b", "--", "x"}} {
		_, err := parseMCPWrap(bad, io.Discard)
		require.Error(t, err, bad)
	}
}

// TestMCPPack runs the test cases of the MCP rule pack.
func TestMCPPack(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runRules([]string{"test", filepath.Join("examples", "rules", "mcp.yaml")}, &stdout, &stderr)
	require.Zero(t, code, stdout.String()+stderr.String())
	require.NotContains(t, stdout.String(), "FAIL")
}

// In team mode /mcp/NAME needs an agent key in X-Vigil-Key; the client's own Authorization
// reaches the MCP server untouched, and the key does not.
func TestMCPGatewayTeamMode(t *testing.T) {
	gotAuth := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth <- r.Header.Get("Authorization") + "|" + r.Header.Get("X-Vigil-Key")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", "s1")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"up","version":"1"}}}`))
	}))
	defer up.Close()

	db := filepath.Join(t.TempDir(), "vigil.db")
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{})
	require.NoError(t, err)
	az, err := auth.New(context.Background(), auth.Config{Loopback: true}, auth.Options{Store: st})
	require.NoError(t, err)
	_, key, err := az.CreateKey(context.Background(), auth.KeySpec{Name: "gw"}, "test")
	require.NoError(t, err)
	require.NoError(t, st.Close())

	cfg := testConfig(t, db)
	cfg.MCP = []string{"tools=" + up.URL + "/mcp"}
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()

	post := func(hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp/tools",
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post(map[string]string{"Authorization": "Bearer sk-upstream"})
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, `"jsonrpc":"2.0"`)

	code, body = post(map[string]string{"Authorization": "Bearer sk-upstream", "X-Vigil-Key": key})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"serverInfo"`)
	require.Equal(t, "Bearer sk-upstream|", <-gotAuth)

	// The dry run vigil mcp wrap asks authenticates as /aos does: the agent key as a bearer.
	preview := func(key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+guardian.PreviewPath, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"protocols/MCP","params":{"message":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}}}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body = preview("")
	require.Equal(t, http.StatusUnauthorized, code, body)
	require.Contains(t, body, `"code":-32004`)
	code, body = preview(key)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"preview":true`)
}
