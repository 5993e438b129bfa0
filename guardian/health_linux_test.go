package guardian_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/internal/syncbuf"
	"github.com/vigil-guardian/vigil/internal/testfs"
	"github.com/vigil-guardian/vigil/storage/postgres"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

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

	testfs.WriteProtect(t, path)
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
	pgtest.Exec(t, dsn, "ALTER DATABASE "+id+" SET default_transaction_read_only = on")
	clock.Add(1)
	a = health()
	require.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
	require.JSONEq(t, readOnlyHealth, a.body)

	db.Pool().Reset() // every connection now starts read-only
	clock.Add(1)
	a = health()
	require.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
	require.JSONEq(t, readOnlyHealth, a.body)

	pgtest.Exec(t, dsn, "SET default_transaction_read_only = off", "ALTER DATABASE "+id+" RESET default_transaction_read_only")
	db.Pool().Reset() // and those started read-only go
	clock.Add(1)
	a = health()
	require.Equal(t, http.StatusOK, a.status, a.body)
}

// A guardian whose role loses a privilege operators' writes need (not one a step needs:
// steps would still be stored, but an audit entry, a rule edit or a sign-in would fail)
// reports itself unavailable, and its log names the privilege and the table.
func TestHealthCheckSeesARevokedGrant(t *testing.T) {
	ctx := context.Background()
	dsn := postgresDB(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	role := "g_" + strings.TrimPrefix(u.Path, "/")
	id := pgx.Identifier{role}.Sanitize()
	pgtest.Exec(t, dsn, "CREATE ROLE "+id+" LOGIN", "GRANT CREATE ON SCHEMA public TO "+id)
	db, err := postgres.Open(ctx, pgtest.AsRole(dsn, role), postgres.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var logs syncbuf.Buffer
	var clock atomic.Int64 // seconds
	g, err := guardian.New(guardian.Config{}, guardian.Options{Store: db,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Now:    func() time.Time { return time.Unix(1_750_000_000+clock.Load(), 0) }})
	require.NoError(t, err)
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	a := healthGet(t, srv, http.MethodGet, "/api/health")
	require.Equal(t, http.StatusOK, a.status, a.body)

	pgtest.Exec(t, dsn, "REVOKE INSERT ON audit FROM "+id)
	clock.Add(1)
	a = healthGet(t, srv, http.MethodGet, "/api/health")
	require.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
	require.JSONEq(t, readOnlyHealth, a.body)
	require.Contains(t, logs.String(), "lacks INSERT on audit")

	pgtest.Exec(t, dsn, "GRANT INSERT ON audit TO "+id)
	clock.Add(1)
	a = healthGet(t, srv, http.MethodGet, "/api/health")
	require.Equal(t, http.StatusOK, a.status, a.body)
}
