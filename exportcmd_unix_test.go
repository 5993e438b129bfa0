//go:build unix

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A FIFO, or a device through a symbolic link, is written in place: renaming a file over
// it would replace it with a regular file.
func TestExportCommandWritesSpecialFilesInPlace(t *testing.T) {
	dbPath := exportTestDB(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	null := filepath.Join(dir, "null")
	require.NoError(t, os.Symlink(os.DevNull, null))

	read := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo) // waits for the export to open it for writing
		if err != nil {
			read <- nil
			return
		}
		defer f.Close()
		data, _ := io.ReadAll(f)
		read <- data
	}()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runExport([]string{"--db", dbPath, "--out", fifo}, &stdout, &stderr), stderr.String())
	st, err := os.Lstat(fifo)
	require.NoError(t, err)
	require.Equal(t, os.ModeNamedPipe, st.Mode().Type(), "still a FIFO")
	require.Len(t, jsonLines(t, <-read), 2)

	require.Equal(t, 0, runExport([]string{"--db", dbPath, "--out", null}, &stdout, &stderr), stderr.String())
	require.Contains(t, stderr.String(), "1 steps, 1 audit entries to "+null)
	target, err := os.Readlink(null)
	require.NoError(t, err)
	require.Equal(t, os.DevNull, target)
	st, err = os.Stat(null)
	require.NoError(t, err)
	require.Equal(t, os.ModeDevice|os.ModeCharDevice, st.Mode().Type())

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary file left")
	require.Empty(t, stdout.String())
}
