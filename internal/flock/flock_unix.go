//go:build unix

package flock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// Open opens the lock file at path for reading and writing, creating it with perm if it is
// missing. A symbolic link at path is not followed (the open fails): opening through one
// could create or truncate another file.
func Open(path string, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, perm)
}

// TryLock takes an exclusive lock on f without waiting; false when another open file
// description holds it. Closing f releases it.
func TryLock(f *os.File) (bool, error) {
	err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		return false, nil
	default:
		return false, err
	}
}

// Lock takes an exclusive lock on the file at path (opened as Open does, created 0600),
// waiting for another holder, and returns its release.
func Lock(path string) (release func(), err error) {
	f, err := Open(path, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := flock(f, syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}

// flock retries a call a signal interrupted: the Go runtime's own signals (preemption, a
// profiler) would otherwise fail a lock that was merely being waited for.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
