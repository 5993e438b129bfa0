// Package testfs holds file-system helpers shared by tests.
package testfs

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fsImmutableFL is the inode flag chattr +i sets (linux/fs.h).
const fsImmutableFL = 0x10

// WriteProtect makes path a file this process can read but not write: mode 0400, or for
// root, who writes whatever the mode says, the immutable attribute. It skips the test where
// the file system keeps no such attribute.
func WriteProtect(t *testing.T, path string) {
	t.Helper()
	writeProtect(t, path, 0o400, 0o600)
}

// WriteProtectDir makes dir a directory this process can list and open files in but not
// create files in: mode 0500, or for root the immutable attribute (see WriteProtect).
func WriteProtectDir(t *testing.T, dir string) {
	t.Helper()
	writeProtect(t, dir, 0o500, 0o700)
}

// writeProtect is WriteProtect with the mode that protects path and the one the cleanup
// restores.
func writeProtect(t *testing.T, path string, mode, restore os.FileMode) {
	t.Helper()
	if os.Geteuid() != 0 {
		require.NoError(t, os.Chmod(path, mode))
		t.Cleanup(func() { require.NoError(t, os.Chmod(path, restore)) })
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
