// Package linkpath resolves a path through its symbolic links the way writing to it would:
// to the file a write lands in, also when that file does not exist yet. The database's
// one-writer lock and export's checks need the file's one real name, and a settings file
// kept in a dotfiles repository and linked in must be written through its link, not
// replaced by a regular file.
package linkpath

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// MaxLinks bounds the symbolic links Resolve follows, as the kernel does (ELOOP).
const MaxLinks = 40

// Resolve is p made absolute and clean with its symbolic links resolved: those among its
// directories as far as they exist, and p itself when it is a link, also one whose target
// does not exist, which is then the file that writing through the link would create.
func Resolve(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", p, err)
	}
	for range MaxLinks {
		if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
			abs = filepath.Join(dir, filepath.Base(abs))
		}
		st, err := os.Lstat(abs)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			return abs, nil
		}
		target, err := os.Readlink(abs)
		if err != nil {
			return "", fmt.Errorf("resolve %q: %w", p, err)
		}
		if !filepath.IsAbs(target) {
			// Relative to the link's real directory (resolved above): a lexical join would
			// take "..", through a linked directory, somewhere else.
			target = filepath.Join(filepath.Dir(abs), target)
		}
		abs = filepath.Clean(target)
	}
	return "", fmt.Errorf("resolve %q: more than %d symbolic links", p, MaxLinks)
}
