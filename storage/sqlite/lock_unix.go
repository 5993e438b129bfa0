//go:build unix

package sqlite

import (
	"errors"
	"os"
	"syscall"
)

// openLockFile opens (creating) the lock file without following a symbolic link at its
// name: truncating the file it points to would clobber another file.
func openLockFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, dbFileMode)
}

// ownLikeDatabase gives f the owner of the database file at abs, when this process runs as
// root and the database exists; otherwise it leaves f alone.
func ownLikeDatabase(f *os.File, abs string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil // a new database: created by this process, owned like it
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return f.Chown(int(sys.Uid), int(sys.Gid))
}

// tryLock takes an exclusive flock on f without waiting; false when another open file
// description holds it. flock locks are separate from the POSIX locks SQLite takes on the
// database file, so the two never interfere.
func tryLock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, err
		}
	}
}
