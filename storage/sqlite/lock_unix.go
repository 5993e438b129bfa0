//go:build unix

package sqlite

import (
	"os"
	"syscall"
)

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
