//go:build unix

package hook

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path (created 0600 if missing, never through a
// symbolic link: opening one could create or truncate another file) and returns its
// release. It waits for another holder: installs hold it only for the moment they edit.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Closing the file releases the lock (as does the process's exit, so a crashed
	// install leaves no stale lock behind).
	return func() { _ = f.Close() }, nil
}
