//go:build !unix

package sqlite

import "os"

// tryLock has no advisory lock to take on this platform: Open does not exclude a second
// process there (documented in docs/storage.md).
func tryLock(*os.File) (bool, error) { return true, nil }
