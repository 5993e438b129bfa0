package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strconv"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
)

func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, time.Second, roleWriter))
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

func userVersion(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v int
	require.NoError(t, db.QueryRow("PRAGMA user_version").Scan(&v))
	return v
}

func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = ?`, name).Scan(&n))
	return n > 0
}

func TestMigrateFromEmpty(t *testing.T) {
	db := openTest(t)
	known, err := loadMigrations(migrationFiles)
	require.NoError(t, err)
	require.NotEmpty(t, known)

	r := db.Reader()
	require.Equal(t, len(known), userVersion(t, r))
	for _, name := range []string{"events", "sessions", "steps",
		"sessions_recent", "steps_session", "steps_received", "session_pending_holds"} {
		require.True(t, tableExists(t, r, name), name)
	}
	var mode string
	require.NoError(t, r.QueryRow("PRAGMA journal_mode").Scan(&mode))
	require.Equal(t, "wal", mode)
}

func TestMigrateAppliesLaterScriptsOnReopen(t *testing.T) {
	ctx := context.Background()
	db := rawDB(t, filepath.Join(t.TempDir(), "m.db"))
	v1 := fstest.MapFS{"migrations/001_a.sql": {Data: []byte("CREATE TABLE a (x);")}}
	require.NoError(t, migrate(ctx, db, v1))
	require.Equal(t, 1, userVersion(t, db))

	// A later release adds scripts; only the new ones run.
	v3 := fstest.MapFS{
		"migrations/001_a.sql": {Data: []byte("CREATE TABLE a (x);")},
		"migrations/002_b.sql": {Data: []byte("CREATE TABLE b (x); INSERT INTO b VALUES (1);")},
		"migrations/003_c.sql": {Data: []byte("CREATE TABLE c (x);")},
	}
	require.NoError(t, migrate(ctx, db, v3))
	require.Equal(t, 3, userVersion(t, db))
	require.True(t, tableExists(t, db, "b"))
	require.True(t, tableExists(t, db, "c"))

	// Idempotent: nothing left to apply.
	require.NoError(t, migrate(ctx, db, v3))
	var n int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM b").Scan(&n))
	require.Equal(t, 1, n)
}

func TestMigrateFailureRollsBackThatScript(t *testing.T) {
	ctx := context.Background()
	db := rawDB(t, filepath.Join(t.TempDir(), "m.db"))
	fsys := fstest.MapFS{
		"migrations/001_a.sql": {Data: []byte("CREATE TABLE a (x);")},
		// The first statement succeeds, the second fails: neither may stick.
		"migrations/002_b.sql": {Data: []byte("CREATE TABLE b (x); INSERT INTO missing VALUES (1);")},
	}
	err := migrate(ctx, db, fsys)
	require.ErrorContains(t, err, "002_b.sql")
	require.Equal(t, 1, userVersion(t, db))
	require.True(t, tableExists(t, db, "a"))
	require.False(t, tableExists(t, db, "b"))
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	require.NoError(t, db.Close())

	raw := rawDB(t, path)
	_, err = raw.Exec("PRAGMA user_version = 999")
	require.NoError(t, err)

	known, err := loadMigrations(migrationFiles)
	require.NoError(t, err)
	_, err = Open(context.Background(), path, Options{})
	require.ErrorIs(t, err, ErrSchemaTooNew)
	require.ErrorContains(t, err, "999")
	require.ErrorContains(t, err, strconv.Itoa(len(known)))
	// Refusing must not touch the file.
	require.Equal(t, 999, userVersion(t, raw))
}

func TestLoadMigrationsRejectsBadSets(t *testing.T) {
	ok := &fstest.MapFile{Data: []byte("SELECT 1;")}
	tests := []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{"gap", fstest.MapFS{"migrations/001_a.sql": ok, "migrations/003_c.sql": ok}, "expected number 002"},
		{"duplicate", fstest.MapFS{"migrations/001_a.sql": ok, "migrations/001_b.sql": ok}, "expected number 002"},
		{"starts at two", fstest.MapFS{"migrations/002_a.sql": ok}, "expected number 001"},
		{"no number", fstest.MapFS{"migrations/foundation.sql": ok}, "NNN_name.sql"},
		{"zero", fstest.MapFS{"migrations/000_a.sql": ok}, "NNN_name.sql"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadMigrations(tc.fsys)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
