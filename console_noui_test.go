//go:build no_ui

package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConsoleNotBuiltIn: a no_ui build is the bare guardian; / says the console is not built
// in and how to get it, and the AOS endpoint still answers.
func TestConsoleNotBuiltIn(t *testing.T) {
	srv, err := startServer(context.Background(), testConfig(t, filepath.Join(t.TempDir(), "vigil.db")), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()
	for _, path := range []string{"/", "/assets/index.js"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Contains(t, string(body), "The console is not built into this binary", path)
		require.Contains(t, string(body), "no_ui", path)
		require.NotContains(t, string(body), "<script", path)
	}
	out := postStep(t, srv.URL, toolStep)
	require.Equal(t, "allow", out["result"].(map[string]any)["decision"])
}
