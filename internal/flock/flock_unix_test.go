//go:build unix

package flock_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/flock"
)

func open(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := flock.Open(path, 0o600)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// The lock is per open file description, so a second open in this process stands in for a
// second process; closing the holder's file lets the next one in.
func TestTryLockExcludesAnotherHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	a, b := open(t, path), open(t, path)
	held, err := flock.TryLock(a)
	require.NoError(t, err)
	require.True(t, held)
	held, err = flock.TryLock(a)
	require.NoError(t, err)
	require.True(t, held, "the holder may take it again")
	held, err = flock.TryLock(b)
	require.NoError(t, err)
	require.False(t, held, "another holder is refused without waiting")

	require.NoError(t, a.Close())
	held, err = flock.TryLock(b)
	require.NoError(t, err)
	require.True(t, held, "closing releases the lock")
}

// Lock waits while another holds the lock, then holds it until its release.
func TestLockWaitsForTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	holder := open(t, path)
	held, err := flock.TryLock(holder)
	require.NoError(t, err)
	require.True(t, held)

	type result struct {
		release func()
		err     error
	}
	locked := make(chan result, 1)
	go func() {
		release, err := flock.Lock(path)
		locked <- result{release, err}
	}()
	select {
	case r := <-locked:
		if r.release != nil {
			r.release()
		}
		t.Fatalf("Lock did not wait for the holder (err %v)", r.err)
	case <-time.After(100 * time.Millisecond): // the only way to see a wait is to wait
	}
	require.NoError(t, holder.Close())
	var r result
	select {
	case r = <-locked:
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not take the released lock")
	}
	require.NoError(t, r.err)

	other := open(t, path)
	held, err = flock.TryLock(other)
	require.NoError(t, err)
	require.False(t, held, "Lock holds the lock")
	r.release()
	held, err = flock.TryLock(other)
	require.NoError(t, err)
	require.True(t, held, "release lets the next one in")
}

// A symbolic link at the lock file's name is not followed: opening through it would create
// or truncate the file it names. A new lock file is private to its owner.
func TestLockFileIsNeverALink(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(path string) (func(), error)
	}{
		{"Open", func(path string) (func(), error) {
			f, err := flock.Open(path, 0o600)
			if err != nil {
				return nil, err
			}
			return func() { _ = f.Close() }, nil
		}},
		{"Lock", flock.Lock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			victim := filepath.Join(dir, "notes.txt")
			require.NoError(t, os.WriteFile(victim, []byte("keep me"), 0o644))
			absent := filepath.Join(dir, "absent")
			for target, link := range map[string]string{victim: "to-file.lock", absent: "dangling.lock"} {
				require.NoError(t, os.Symlink(target, filepath.Join(dir, link)))
				_, err := tc.open(filepath.Join(dir, link))
				require.Error(t, err, link)
			}
			b, err := os.ReadFile(victim)
			require.NoError(t, err)
			require.Equal(t, "keep me", string(b))
			_, err = os.Lstat(absent)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing was created through the link")

			path := filepath.Join(dir, "new.lock")
			release, err := tc.open(path)
			require.NoError(t, err)
			release()
			st, err := os.Lstat(path)
			require.NoError(t, err)
			require.True(t, st.Mode().IsRegular())
			require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		})
	}
}

// Lock's error names the lock file.
func TestLockErrorNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "x.lock")
	_, err := flock.Lock(path)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "lock "+path+": ")
}
