package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/testfs"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// A database file SQLite can only read still opens, and would store no write: CheckWritable
// says so, where a health check can see it.
func TestCheckWritableReadOnlyFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err)
	save(t, db, step("s1", "allow", 0))
	require.NoError(t, db.CheckWritable(ctx))
	require.NoError(t, db.Close())

	testfs.WriteProtect(t, path)
	db, err = Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err, "a read-only file opens")
	defer func() { require.NoError(t, db.Close()) }()
	err = db.CheckWritable(ctx)
	require.ErrorIs(t, err, storage.ErrReadOnly)
	require.Contains(t, err.Error(), path)
	_, werr := db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
	require.ErrorContains(t, werr, "readonly database", "the check tells what a write finds")
	got, err := db.Session(ctx, "s1")
	require.NoError(t, err, "reads still work")
	require.Equal(t, "s1", got.ID)
}

// The write-ahead log and its index take every write: one SQLite may only write leaves the
// database opening and answering reads while every write fails, naming no file.
// CheckWritable names it. A directory that takes no new file keeps SQLite from creating
// them, and so from opening the database at all: Open names the directory.
func TestCheckWritableCompanions(t *testing.T) {
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
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, "vigil.db")
			db, err := Open(ctx, path, Options{ManualIndex: true})
			require.NoError(t, err)
			save(t, db, step("s1", "allow", 0))
			require.NoError(t, db.Close())
			// A clean close removes both; a crash or another program's open leaves them.
			for _, suffix := range []string{"-wal", "-shm"} {
				require.NoFileExists(t, path+suffix)
			}

			if tc.protect == "" {
				testfs.WriteProtectDir(t, dir)
				_, err := Open(ctx, path, Options{ManualIndex: true})
				require.ErrorIs(t, err, storage.ErrReadOnly)
				require.ErrorContains(t, err, "storage: "+dir+": ")
				require.ErrorContains(t, err, "vigil.db-wal and vigil.db-shm")
				require.ErrorContains(t, err, "check the directory's owner, permissions")
				return
			}
			protected := path + tc.protect
			require.NoError(t, os.WriteFile(protected, nil, 0o600))
			testfs.WriteProtect(t, protected)
			db, err = Open(ctx, path, Options{ManualIndex: true})
			require.NoError(t, err, "opens, as a read-only database file does")
			defer func() { require.NoError(t, db.Close()) }()
			err = db.CheckWritable(ctx)
			require.ErrorIs(t, err, storage.ErrReadOnly)
			require.ErrorContains(t, err, "storage: "+protected+": ")
			require.ErrorContains(t, err, "check its owner, permissions")
			_, werr := db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
			require.ErrorContains(t, werr, "readonly database", "the check tells what a write finds")
			got, err := db.Session(ctx, "s1")
			require.NoError(t, err, "reads still work")
			require.Equal(t, "s1", got.ID)
		})
	}
}
