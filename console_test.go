//go:build !no_ui

package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConsoleServed: a default build serves the committed console at / (the no_ui build's
// counterpart is in console_noui_test.go).
func TestConsoleServed(t *testing.T) {
	srv, err := startServer(context.Background(), testConfig(t, filepath.Join(t.TempDir(), "vigil.db")), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Shutdown(5*time.Second)) }()
	want, err := os.ReadFile("ui/dist/index.html")
	require.NoError(t, err)
	for _, path := range []string{"/", "/index.html", "/no/such/route"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, string(want), string(body), path)
	}
}
