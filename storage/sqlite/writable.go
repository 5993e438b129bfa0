package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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
func (db *DB) CheckWritable(context.Context) error {
	if db.writerReadOnly {
		return fmt.Errorf("storage: %s: %w: SQLite could open the file for reading only "+
			"(check its permissions, attributes and mount)", db.path, storage.ErrReadOnly)
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
