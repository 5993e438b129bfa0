//go:build unix

package pgtest

import (
	"os"
	"syscall"
)

// fileUID is the owner of fi: the user a server's data directory, and so the server, runs as.
func fileUID(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return 0
}
