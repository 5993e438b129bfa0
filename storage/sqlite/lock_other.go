//go:build !unix

package sqlite

import "os"

func openLockFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, dbFileMode)
}

func ownLikeDatabase(*os.File, string) error { return nil }

// tryLock has no advisory lock to take on this platform: Open does not exclude a second
// process there (documented in docs/storage.md).
func tryLock(*os.File) (bool, error) { return true, nil }
