package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// fsImmutableFL is the inode flag chattr +i sets (linux/fs.h).
const fsImmutableFL = 0x10

// writeProtect makes path a file this process can read but not write: mode 0400, or for
// root, who writes whatever the mode says, the immutable attribute. It skips the test where
// the file system keeps no such attribute.
func writeProtect(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		require.NoError(t, os.Chmod(path, 0o400))
		t.Cleanup(func() { require.NoError(t, os.Chmod(path, 0o600)) })
		return
	}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Skipf("%s: the file system keeps no inode flags: %v", path, err)
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|fsImmutableFL)); err != nil {
		t.Skipf("%s: cannot make it immutable: %v", path, err)
	}
	// Before TempDir's removal, which an immutable file would fail.
	t.Cleanup(func() {
		f, err := os.Open(path)
		require.NoError(t, err)
		defer f.Close()
		require.NoError(t, unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags)))
	})
}

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

	writeProtect(t, path)
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
