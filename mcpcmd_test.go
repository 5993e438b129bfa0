package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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
