//go:build unix

package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A symbolic link where the lock file belongs is not followed (its target would be
// truncated), and a lock file made by root belongs to the database's owner.
func TestLockFileIsTheDatabasesOwn(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "vigil.db")
	victim := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(victim, []byte("keep me"), 0o600))
	require.NoError(t, os.Symlink(victim, LockPath(path)))
	_, err := Open(ctx, path, Options{ManualIndex: true})
	require.Error(t, err)
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "keep me", string(b))
	require.NoError(t, os.Remove(LockPath(path)))

	if os.Geteuid() != 0 {
		t.Skip("the owner check needs root")
	}
	db, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	const nobody = 65534
	for _, f := range []string{path, JournalPaths(path)[0], JournalPaths(path)[1]} {
		require.NoError(t, os.Chown(f, nobody, nobody))
	}
	require.NoError(t, os.Remove(LockPath(path)))
	db, err = Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	for _, f := range []string{LockPath(path), JournalPaths(path)[0], JournalPaths(path)[1]} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.EqualValues(t, nobody, st.Sys().(*syscall.Stat_t).Uid, f)
	}
}
