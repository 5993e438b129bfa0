package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/testfs"
)

// TestServeRefusesAReadOnlySQLiteFile: a guardian whose SQLite file it may only read would
// journal steps that never reach the tables; it refuses to start, saying why.
func TestServeRefusesAReadOnlySQLiteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vigil.db")
	cfg, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--db", path}, io.Discard)
	require.NoError(t, err)
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, srv.Shutdown(5*time.Second))

	testfs.WriteProtect(t, path)
	srv, err = startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		_ = srv.Shutdown(5 * time.Second)
	}
	require.ErrorContains(t, err, "for reading only")
	require.ErrorContains(t, err, path)
}
