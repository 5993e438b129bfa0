package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/testfs"
	"github.com/vigil-guardian/vigil/storage"
)

// TestServeRefusesAReadOnlySQLiteFile: a guardian whose SQLite file it may only read would
// journal steps that never reach the tables; it refuses to start, saying why.
func TestServeRefusesAReadOnlySQLiteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vigil.db")
	restart := servedOnce(t, path)
	testfs.WriteProtect(t, path)
	err := restart()
	require.ErrorContains(t, err, "for reading only")
	require.ErrorContains(t, err, path)
}

// TestServeRefusesUnwritableSQLiteCompanions: with the database file writable, a
// write-ahead log or WAL index SQLite may only read, or a directory where it may not create
// them, would fail every write (or the open) naming no file; the guardian refuses to start,
// naming the file or directory to fix.
func TestServeRefusesUnwritableSQLiteCompanions(t *testing.T) {
	tests := []struct {
		name    string
		protect string // "-wal", "-shm", or "" for the directory
	}{
		{"write-ahead log", "-wal"},
		{"WAL index", "-shm"},
		{"directory", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "vigil.db")
			restart := servedOnce(t, path)

			named := dir
			if tc.protect != "" {
				// Left by a crash, or by another program that had the database open.
				named = path + tc.protect
				require.NoError(t, os.WriteFile(named, nil, 0o600))
				testfs.WriteProtect(t, named)
			} else {
				testfs.WriteProtectDir(t, dir)
			}
			err := restart()
			require.ErrorIs(t, err, storage.ErrReadOnly)
			require.ErrorContains(t, err, "storage: "+named+": ")
			require.ErrorContains(t, err, "permissions, attributes and mount")
		})
	}
}

// servedOnce starts and stops a guardian on the SQLite file path, which makes the database,
// and returns a start of it again, for the test to change the files in between: the start's
// error, the guardian stopped if it started all the same.
func servedOnce(t *testing.T, path string) (restart func() error) {
	t.Helper()
	cfg, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--db", path}, io.Discard)
	require.NoError(t, err)
	srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, srv.Shutdown(5*time.Second))
	return func() error {
		srv, err := startServer(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			_ = srv.Shutdown(5 * time.Second)
		}
		return err
	}
}
