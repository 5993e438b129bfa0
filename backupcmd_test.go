package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// A backup of a running guardian's database opens on its own with every answered step.
func TestBackupCommandWhileServing(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "vigil.db")
	srv := startTestServer(t, dbPath)
	for i := range 5 {
		postTestStep(t, srv.URL, "bk", i)
	}
	dest := filepath.Join(dir, "copy.db")

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runBackup([]string{"--db", dbPath, dest}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "written to "+dest)
	require.Contains(t, stdout.String(), "integrity ok")
	st, err := os.Stat(dest)
	require.NoError(t, err)
	require.Contains(t, stdout.String(), formatBytes(st.Size()))

	ctx := context.Background()
	cp, err := sqlite.Open(ctx, dest, sqlite.Options{})
	require.NoError(t, err)
	s, err := cp.Session(ctx, "bk")
	require.NoError(t, err)
	require.EqualValues(t, 5, s.Steps)
	require.NoError(t, cp.Close())

	// An existing destination stays unless --force, which may also follow DEST.
	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 1, runBackup([]string{"--db", dbPath, dest}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "pass --force")
	postTestStep(t, srv.URL, "bk", 5)
	require.Equal(t, 0, runBackup([]string{"--db", dbPath, dest, "--force"}, &stdout, &stderr), stderr.String())
	require.NoError(t, sqlite.IntegrityCheck(ctx, dest))
	cp, err = sqlite.Open(ctx, dest, sqlite.Options{})
	require.NoError(t, err)
	s, err = cp.Session(ctx, "bk")
	require.NoError(t, err)
	require.EqualValues(t, 6, s.Steps)
	require.NoError(t, cp.Close())
}

func TestBackupCommandUsage(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no destination", []string{"--db", "x.db"}, 2, "usage: vigil backup"},
		{"two destinations", []string{"a.db", "b.db"}, 2, "usage: vigil backup"},
		{"bad flag", []string{"--bogus", "a.db"}, 2, "bogus"},
		{"missing database", []string{"--db", filepath.Join(dir, "none.db"), filepath.Join(dir, "c.db")}, 1, "none.db"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.code, runBackup(tc.args, &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.msg)
		})
	}
	require.NoFileExists(t, filepath.Join(dir, "none.db"))
	require.NoFileExists(t, filepath.Join(dir, "c.db"))
}

func TestByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"0", 0, false},
		{"1048576", 1 << 20, false},
		{"500MB", 500e6, false},
		{"500 mb", 500e6, false},
		{"2GiB", 2 << 30, false},
		{"1.5G", 3 << 29, false},
		{"64k", 64 << 10, false},
		{"1.0 GiB", 1 << 30, false}, // what String prints reads back
		{"", 0, true},
		{"MB", 0, true},
		{"-5MB", 0, true},
		{"5 parsecs", 0, true},
		{"99999999999TB", 0, true},
	}
	for _, tc := range tests {
		var b byteSize
		err := b.Set(tc.in)
		if tc.err {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.EqualValues(t, tc.want, b, tc.in)
	}
	b := byteSize(3 << 30)
	require.Equal(t, "3.0 GiB", b.String())
	require.Equal(t, "0", new(byteSize).String())
	require.Equal(t, "512 B", formatBytes(512))
	require.Equal(t, "1.5 KiB", formatBytes(1536))
}

// A DEST no backup could go to is bad usage (exit 2) named in the message, found before
// anything is read or written, --force or not: the database itself or a file beside it
// however spelled, a directory, a missing directory, an empty path; an empty --db too.
func TestBackupCommandBadDestinations(t *testing.T) {
	dbPath := exportTestDB(t)
	dir := filepath.Dir(dbPath)
	require.NoError(t, os.Symlink("vigil.db", filepath.Join(dir, "link.db")))
	require.NoError(t, os.Link(dbPath, filepath.Join(dir, "hard.db")))
	before := dirState(t, dir)

	dest := func(d, msg string) string { return fmt.Sprintf("DEST %q: %s", d, msg) }
	another := filepath.Join(dir, "..", filepath.Base(dir), "vigil.db")
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"empty", []string{""}, dest("", "empty path")},
		{"directory", []string{dir}, dest(dir, "is a directory")},
		{"directory with force", []string{"--force", dir}, dest(dir, "is a directory")},
		{"missing directory", []string{filepath.Join(dir, "none", "copy.db")},
			dest(filepath.Join(dir, "none", "copy.db"), "directory "+filepath.Join(dir, "none")+" does not exist")},
		{"itself", []string{"--force", dbPath}, dest(dbPath, "is the database itself")},
		{"another spelling", []string{"--force", another}, dest(another, "is the database itself")},
		{"symbolic link", []string{"--force", filepath.Join(dir, "link.db")}, dest(filepath.Join(dir, "link.db"), "is the database itself")},
		{"hard link", []string{"--force", filepath.Join(dir, "hard.db")}, dest(filepath.Join(dir, "hard.db"), "is the database itself")},
		{"WAL", []string{"--force", dbPath + "-wal"}, dest(dbPath+"-wal", "is "+dbPath+"-wal, which belongs to the database")},
		{"step journal", []string{"--force", dbPath + "-steplog-0"}, dest(dbPath+"-steplog-0", "is "+dbPath+"-steplog-0, which belongs to the database")},
		{"empty db", []string{"--db", "", filepath.Join(dir, "copy.db")}, "--db: empty path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"--db", dbPath}, tc.args...)
			require.Equal(t, 2, runBackup(args, &stdout, &stderr), stderr.String())
			require.Equal(t, "vigil backup: "+tc.msg+"\n", stderr.String())
			require.Empty(t, stdout.String())
		})
	}
	require.Equal(t, before, dirState(t, dir), "the database and its files are untouched")
	require.NoError(t, sqlite.IntegrityCheck(context.Background(), dbPath))
}
