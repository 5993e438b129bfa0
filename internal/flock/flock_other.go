//go:build !unix

package flock

import (
	"io/fs"
	"os"
)

// Open opens the lock file at path for reading and writing, creating it with perm if it is
// missing.
func Open(path string, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm)
}

// TryLock has no lock to take on this platform: it always succeeds, so a second process is
// not excluded (docs/storage.md says so for the database).
func TryLock(*os.File) (bool, error) { return true, nil }

// Lock has no lock to take on this platform and creates no file: it returns a release that
// does nothing (docs/coding-agents.md says what concurrent installs can lose there).
func Lock(string) (release func(), err error) { return func() {}, nil }
