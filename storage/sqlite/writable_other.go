//go:build !unix

package sqlite

import (
	"io/fs"
	"os"
)

// mayWrite reports (nil) whether this process may write the file at p, as far as its mode
// tells (on Windows, the read-only attribute). A directory is not checked: SQLite's own
// error tells when it cannot create a file there.
func mayWrite(p string, dir bool) error {
	if dir {
		return nil
	}
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o200 == 0 {
		return fs.ErrPermission
	}
	return nil
}
