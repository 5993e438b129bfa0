package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vigil-guardian/vigil/storage"
)

// CheckWritable reports whether the database takes writes (see storage.Steps). SQLite
// opens a file it may not write (write-protected, immutable, on a read-only mount) for
// reading instead, and Open then succeeds on an up-to-date database: steps still reach the
// step journal, but never the tables, and every other write fails. That is decided when
// the writer's connection opens, and lasts as long as it does: a file made writable later
// is still read through the same descriptor, and one chmod'ed read-only later is still
// written through it. So the writer's state at Open is the answer, with no I/O. (A file
// system remounted read-only under a running guardian is not seen here: its writes fail
// with an I/O error, as on a full disk.)
//
// The same holds for the write-ahead log and its index beside the file (see
// companionsWritable): one SQLite may only read makes every write fail, also with the
// database file writable, and that too is the state found at Open.
func (db *DB) CheckWritable(context.Context) error {
	var errs []error
	if db.writerReadOnly {
		errs = append(errs, fmt.Errorf("storage: %s: %w: SQLite could open the file for reading only "+
			"(check its permissions, attributes and mount)", db.path, storage.ErrReadOnly))
	}
	if db.companionsReadOnly != nil {
		errs = append(errs, db.companionsReadOnly)
	}
	return errors.Join(errs...)
}

// companion is one of the files SQLite keeps beside a database in WAL mode, which every
// write goes through.
type companion struct {
	suffix, what string
}

// companions are the write-ahead log and its index (the shared-memory file), in the order
// SQLite opens them for a write.
func companions() []companion {
	return []companion{
		{"-wal", "write-ahead log, which every write is appended to"},
		{"-shm", "WAL index, which every write updates"},
	}
}

// companionsWritable tells why SQLite could not write the write-ahead log or WAL index
// of the database at abs, where they exist: one this process may not write (made read-only,
// owned by another user, immutable, on a read-only mount) SQLite opens for reading only,
// as it does the database file, so the database opens and answers reads while every write
// fails with "attempt to write a readonly database", naming no file. access(2) decides, as
// an open for writing would, without opening or writing anything; the error wraps
// storage.ErrReadOnly and names each such file.
func companionsWritable(abs string) error {
	var errs []error
	for _, c := range companions() {
		p := abs + c.suffix
		if _, err := os.Stat(p); err != nil {
			continue // created by SQLite (see companionsCreatable), or unreadable: SQLite tells
		}
		if err := mayWrite(p, false); err != nil {
			errs = append(errs, fmt.Errorf("storage: %s: %w: SQLite may not write the database's %s: %w "+
				"(check its owner, permissions, attributes and mount)",
				p, storage.ErrReadOnly, c.what, err))
		}
	}
	return errors.Join(errs...)
}

// companionsCreatable tells why SQLite could not create the write-ahead log or WAL index
// of the database at abs where they are missing (a clean close removes them): it needs
// both to open a database in WAL mode, also for reading, and a directory that takes no new
// file fails the open with SQLite's bare "unable to open database file". The error wraps
// storage.ErrReadOnly and names the directory and the files.
func companionsCreatable(abs string) error {
	var missing []string
	for _, c := range companions() {
		p := abs + c.suffix
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, filepath.Base(p))
		} else if err != nil {
			return fmt.Errorf("storage: %w", err)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	dir := filepath.Dir(abs)
	if err := mayWrite(dir, true); err != nil {
		return fmt.Errorf("storage: %s: %w: SQLite may not create %s in the database's directory: %w "+
			"(check the directory's owner, permissions, attributes and mount)",
			dir, storage.ErrReadOnly, strings.Join(missing, " and "), err)
	}
	return nil
}

// readOnlyReporter is the SQLite driver's connection's sqlite3_db_readonly.
type readOnlyReporter interface {
	IsReadOnly(schema string) (bool, error)
}

// connReadOnly reports whether the connection of a pool of one opened the database for
// reading only (sqlite3_db_readonly).
func connReadOnly(ctx context.Context, pool *sql.DB) (bool, error) {
	c, err := pool.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	var ro bool
	err = c.Raw(func(dc any) error {
		r, ok := dc.(readOnlyReporter)
		if !ok {
			return errors.New("the SQLite driver cannot tell whether a connection is read-only")
		}
		var err error
		ro, err = r.IsReadOnly("main")
		return err
	})
	if err != nil {
		return false, fmt.Errorf("check whether the database is read-only: %w", err)
	}
	return ro, nil
}
