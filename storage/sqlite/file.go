package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/vigil-guardian/vigil/internal/linkpath"
)

// dbFileMode is the mode of the database file and so of its -wal and -shm, which SQLite
// creates with the main file's permissions: steps carry agents' prompts, tool inputs and
// personal data, readable by the owner only, like the journal, exports and backups.
const dbFileMode fs.FileMode = 0o600

// ErrDatabaseMissing is returned by Open when the database file is gone but files that
// live beside it (the step journal) say one existed: opening would silently start over
// with an empty database.
var ErrDatabaseMissing = errors.New("storage: database file is missing")

// checkMissing refuses to create a database at abs where one evidently existed: the step
// journal files are created with the database and stay (empty after a clean Close), so
// journal files without a database file mean it was deleted or moved.
func checkMissing(abs string) error {
	if _, err := os.Stat(abs); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var found []string
	for _, p := range JournalPaths(abs) {
		if _, err := os.Stat(p); err == nil {
			found = append(found, p)
		}
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s does not exist, but its step journal (%s) does, so a database "+
		"was there: it was deleted or moved. Restore it (for example from a `vigil backup` copy) "+
		"or, to start over with an empty database on purpose, delete the journal files: %w",
		ErrDatabaseMissing, abs, strings.Join(found, ", "), fs.ErrNotExist)
}

// Files are the database file at path and the files beside it that belong to it: SQLite's
// WAL and WAL index, a rollback journal, the step journal, the lock file and the steps set
// aside as rejected. A tool that writes a file the user names (export, backup) must write
// none of them: each is part of the database or of how it is kept safe.
func Files(path string) []string {
	j := JournalPaths(path)
	return []string{path, path + "-wal", path + "-shm", path + "-journal", j[0], j[1],
		LockPath(path), path + "-rejected.jsonl"}
}

// FindDatabaseFile returns which of Files(db) the path p names, or "" when none: the same
// file (os.SameFile, which sees through symbolic and hard links) where both exist, otherwise
// the same path once both are resolved (ResolvePath), for files not created yet.
func FindDatabaseFile(db, p string) (string, error) {
	pres, err := ResolvePath(p)
	if err != nil {
		return "", err
	}
	// The database's companions sit beside the file a link names, not beside the link; the
	// answer names them as the caller spelled the database.
	resolved, err := ResolvePath(db)
	if err != nil {
		return "", err
	}
	given := Files(db)
	pst, perr := os.Stat(p)
	for i, f := range Files(resolved) {
		if perr == nil {
			if fst, err := os.Stat(f); err == nil {
				if os.SameFile(pst, fst) {
					return given[i], nil
				}
				continue
			}
		}
		fres, err := ResolvePath(f)
		if err != nil {
			return "", err
		}
		if fres == pres {
			return given[i], nil
		}
	}
	return "", nil
}

// ResolvePath is p made absolute and clean with its symbolic links resolved (see
// linkpath.Resolve): the one name of the file a write to p lands in.
func ResolvePath(p string) (string, error) {
	abs, err := linkpath.Resolve(p)
	if err != nil {
		return "", fmt.Errorf("storage: %w", err)
	}
	return abs, nil
}

// tightenModes makes the database file and its companions private to the owner. New files
// are created that way; this also fixes files an older version created 0644. It only takes
// bits away: a file the operator made read-only (0444) stays so (0400), and serve refuses
// it, rather than being made writable again.
func tightenModes(abs string) error {
	for _, p := range []string{abs, abs + "-wal", abs + "-shm"} {
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("storage: %w", err)
		}
		if st.Mode().Perm()&^dbFileMode != 0 {
			if err := os.Chmod(p, st.Mode().Perm()&dbFileMode); err != nil {
				return fmt.Errorf("storage: make %s private: %w", p, err)
			}
		}
	}
	return nil
}

// watchInterval is how often the database file is checked for deletion or replacement.
const watchInterval = 2 * time.Second

// watchFile checks, until stop closes, that the file at db.path is still the database this
// DB has open. Deleting it while serving does not stop SQLite (the open descriptors keep
// the inode alive), so without this the loss would only show at the next start, as an
// empty database. Close then writes the data back (see rescue).
func (db *DB) watchFile(stop <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			db.checkFile(now)
		}
	}
}

// checkFile logs loudly when the database file is gone or replaced: at once, then every
// minute while it lasts, since somebody must act.
func (db *DB) checkFile(now time.Time) {
	problem := db.fileProblem()
	if problem == "" {
		return
	}
	first := !db.fileLost.Swap(true)
	last := db.fileLogAt.Load()
	if !first && now.UnixNano()-last < int64(time.Minute) {
		return
	}
	if !db.fileLogAt.CompareAndSwap(last, now.UnixNano()) {
		return // another check just logged it
	}
	db.log.Error("storage: the database file "+problem+" while Vigil is serving; "+
		"steps are still stored in the open (now unreachable) file and will be written "+
		"back when Vigil stops", "path", db.path)
}

// fileProblem says what happened to the database file since Open ("" when nothing did).
func (db *DB) fileProblem() string {
	st, err := os.Stat(db.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "was deleted"
	case err != nil:
		return "cannot be checked (" + err.Error() + ")"
	case db.fileInfo != nil && !os.SameFile(st, db.fileInfo):
		return "was replaced by another file"
	}
	return ""
}

// FileLost reports whether the database file was found deleted or replaced while open.
func (db *DB) FileLost() bool { return db.fileLost.Load() || db.fileProblem() != "" }

// rescue copies the open database to where it belongs when its file was deleted while
// open (or, when another file took its place, beside it), so that stopping does not lose
// what was stored in it. It runs in Close once the writer has stored every step.
func (db *DB) rescue(ctx context.Context) {
	problem := db.fileProblem()
	if problem == "" {
		return
	}
	dest := db.path
	if problem != "was deleted" {
		dest = db.path + ".recovered-" + time.Now().UTC().Format("20060102T150405Z")
	}
	// A leftover -wal of the lost file would be taken for the new file's, so it goes first
	// (its frames are read through the open connection's descriptor).
	if dest == db.path {
		_ = os.Remove(db.path + "-wal")
		_ = os.Remove(db.path + "-shm")
	}
	// VACUUM INTO accepts an empty file: created here, it has the database's mode.
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, dbFileMode)
	if err == nil {
		err = f.Close()
	}
	if err == nil {
		_, err = db.w.ExecContext(ctx, "VACUUM INTO ?", dest)
	}
	if err != nil {
		db.log.Error("storage: could not write back the database whose file "+problem+
			"; its data is lost when this process ends", "path", db.path, "dest", dest, "err", err)
		return
	}
	db.log.Error("storage: the database file "+problem+" while Vigil was serving; its data "+
		"was written back", "path", db.path, "written", dest)
}
