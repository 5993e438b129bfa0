package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// migrationFiles holds the schema as numbered scripts, migrations/NNN_name.sql. A database's
// PRAGMA user_version is the number of the last script applied to it. Scripts are never
// edited once released: a schema change is a new script with the next number.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// ErrSchemaTooNew is returned by Open for a database written by a newer version of Vigil.
var ErrSchemaTooNew = errors.New("database schema is newer than this version of Vigil supports")

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads migrations/*.sql from fsys, ordered by number. The numbers must run
// 1, 2, 3… without gaps or duplicates, so a missing file cannot silently skip a step.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	ms := make([]migration, 0, len(names))
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: name must be NNN_name.sql", base)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", base, err)
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %q: expected number %03d (numbers must be 1, 2, 3… without gaps)", m.name, i+1)
		}
	}
	return ms, nil
}

// migrate brings the database to the newest schema in fsys, one transaction per script,
// and refuses a database whose user_version is beyond what fsys knows.
func migrate(ctx context.Context, db *sql.DB, fsys fs.FS) error {
	ms, err := loadMigrations(fsys)
	if err != nil {
		return err
	}
	// A dedicated connection: user_version must be read and written on the connection
	// that runs the transaction.
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()

	var current int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&current); err != nil {
		return fmt.Errorf("migrate: read user_version: %w", err)
	}
	if current > len(ms) {
		return fmt.Errorf("%w: database is at schema version %d, this version knows up to %d",
			ErrSchemaTooNew, current, len(ms))
	}
	for _, m := range ms[current:] {
		if err := applyMigration(ctx, conn, m); err != nil {
			return err
		}
	}
	return nil
}

// sameSchema refuses a database whose schema is not exactly the newest in fsys: beside a
// running guardian, which migrated it, only the same version of Vigil may write to it.
func sameSchema(ctx context.Context, db *sql.DB, fsys fs.FS) error {
	ms, err := loadMigrations(fsys)
	if err != nil {
		return err
	}
	var current int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&current); err != nil {
		return fmt.Errorf("read user_version: %w", err)
	}
	switch {
	case current > len(ms):
		return fmt.Errorf("%w: database is at schema version %d, this version knows up to %d",
			ErrSchemaTooNew, current, len(ms))
	case current < len(ms):
		return fmt.Errorf("database is at schema version %d and this version of vigil needs %d: "+
			"the guardian holding it is an older version; run this command with that version, or stop the guardian first",
			current, len(ms))
	}
	return nil
}

func applyMigration(ctx context.Context, conn *sql.Conn, m migration) (err error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: begin: %w", m.name, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return fmt.Errorf("migration %s: %w", m.name, err)
	}
	// user_version is part of the database header and so is written by this transaction:
	// a failed script leaves the version where it was.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
		return fmt.Errorf("migration %s: set user_version: %w", m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.name, err)
	}
	return nil
}
