package guardian_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/storage/postgres"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// fsImmutableFL is the inode flag chattr +i sets (linux/fs.h).
const fsImmutableFL = 0x10

// writeProtect makes path a file this process can read but not write: mode 0400, or for
// root, who writes whatever the mode says, the immutable attribute. It skips the test where
// the file system keeps no such attribute.
func writeProtect(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		require.NoError(t, os.Chmod(path, 0o400))
		t.Cleanup(func() { require.NoError(t, os.Chmod(path, 0o600)) })
		return
	}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Skipf("%s: the file system keeps no inode flags: %v", path, err)
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|fsImmutableFL)); err != nil {
		t.Skipf("%s: cannot make it immutable: %v", path, err)
	}
	// Before TempDir's removal, which an immutable file would fail.
	t.Cleanup(func() {
		f, err := os.Open(path)
		require.NoError(t, err)
		defer f.Close()
		require.NoError(t, unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags)))
	})
}

// pgExec runs statements on the database dsn names, on one connection.
func pgExec(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, s := range stmts {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}
}

// healthOf serves a guardian on store and returns its health check's answer getter; now
// is the guardian's clock.
func healthOf(t *testing.T, store guardian.Store, now func() time.Time) func() healthAnswer {
	t.Helper()
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: store, Now: now})
	require.NoError(t, err)
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return func() healthAnswer { return healthGet(t, srv, http.MethodGet, "/api/health") }
}

const readOnlyHealth = `{"status":"unavailable","reason":"the database is read-only"}`

// A guardian started on a SQLite file it may only read (SQLite opens it all the same, and
// no write would reach it) reports itself unavailable.
func TestHealthCheckSeesAReadOnlySQLiteFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err)
	a := healthOf(t, db, nil)()
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.NoError(t, db.Close())

	writeProtect(t, path)
	db, err = sqlite.Open(ctx, path, sqlite.Options{})
	require.NoError(t, err, "a read-only file opens")
	defer func() { require.NoError(t, db.Close()) }()
	a = healthOf(t, db, nil)()
	require.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
	require.JSONEq(t, readOnlyHealth, a.body)
}

// A guardian whose PostgreSQL database becomes read-only while it serves (as a failover to
// a standby, or an operator's default, leaves it) reports itself unavailable at the next
// check, though its pooled connections, opened before, would still write; and well again
// once the database takes writes.
func TestHealthCheckSeesAReadOnlyPostgres(t *testing.T) {
	dsn := postgresDB(t)
	db, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var clock atomic.Int64 // seconds
	health := healthOf(t, db, func() time.Time { return time.Unix(1_750_000_000+clock.Load(), 0) })
	a := health()
	require.Equal(t, http.StatusOK, a.status, a.body)

	var name string
	require.NoError(t, db.Pool().QueryRow(context.Background(), "SELECT current_database()").Scan(&name))
	id := pgx.Identifier{name}.Sanitize()
	pgExec(t, dsn, "ALTER DATABASE "+id+" SET default_transaction_read_only = on")
	clock.Add(1)
	a = health()
	require.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
	require.JSONEq(t, readOnlyHealth, a.body)

	db.Pool().Reset() // every connection now starts read-only
	clock.Add(1)
	a = health()
	require.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
	require.JSONEq(t, readOnlyHealth, a.body)

	pgExec(t, dsn, "SET default_transaction_read_only = off", "ALTER DATABASE "+id+" RESET default_transaction_read_only")
	db.Pool().Reset() // and those started read-only go
	clock.Add(1)
	a = health()
	require.Equal(t, http.StatusOK, a.status, a.body)
}
