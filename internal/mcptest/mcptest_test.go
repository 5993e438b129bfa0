package mcptest_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/mcptest"
)

// Each server listens on a port of its own, where it answers MCP.
func TestStartEverythingHTTP(t *testing.T) {
	bin, err := filepath.Abs(filepath.Join("..", "..", "test", "mcp", "node_modules", ".bin", "mcp-server-everything"))
	require.NoError(t, err)
	if _, err := os.Stat(bin); err != nil {
		t.Skip("mcp-server-everything is not installed: run `npm ci --prefix test/mcp` (make deps-test does)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	seen := map[string]bool{}
	for range 3 {
		u := mcptest.StartEverythingHTTP(t, bin)
		require.False(t, seen[u], "two servers at %s", u)
		seen[u] = true
		req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize",`+
			`"params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, u)
	}
}
