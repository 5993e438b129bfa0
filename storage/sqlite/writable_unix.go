//go:build unix

package sqlite

import "golang.org/x/sys/unix"

// mayWrite reports (nil) whether this process may write the file at p or, for a directory,
// create files in it, as the kernel would decide for an open: mode, owner, ACLs, the
// immutable attribute, a read-only mount. access(2) answers with nothing opened or
// written. It checks the real user, not the effective one: faccessat2's AT_EACCESS would
// check the latter, but where the kernel lacks faccessat2 x/sys/unix falls back to reading
// the mode bits, which miss the immutable attribute and a read-only mount; and a guardian
// does not run set-user-ID.
func mayWrite(p string, dir bool) error {
	mode := uint32(unix.W_OK)
	if dir {
		mode |= unix.X_OK
	}
	return unix.Access(p, mode)
}
