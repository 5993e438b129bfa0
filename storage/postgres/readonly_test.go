package postgres

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/record"
)

// dbState is what OpenReadOnly must leave as it found it: the tables of the current schema,
// the migrations recorded, and the counts of the rows of every table.
func dbState(t *testing.T, dsn string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var b strings.Builder
	for _, tb := range tables {
		var n int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{tb}.Sanitize()).Scan(&n))
		fmt.Fprintf(&b, "%s:%d ", tb, n)
	}
	if slices.Contains(tables, "vigil_migrations") {
		rows, err := conn.Query(ctx, `SELECT version FROM vigil_migrations ORDER BY 1`)
		require.NoError(t, err)
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		fmt.Fprint(&b, "migrations ", versions)
	}
	return b.String()
}

// migrateTo applies the first n migrations as an older Vigil did.
func migrateTo(t *testing.T, dsn string, n int) {
	t.Helper()
	ms, err := migrations()
	require.NoError(t, err)
	stmts := []string{`CREATE TABLE vigil_migrations (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`}
	for _, m := range ms[:n] {
		stmts = append(stmts, m.sql, fmt.Sprintf(`INSERT INTO vigil_migrations (version, name) VALUES (%d, '%s')`, m.version, m.name))
	}
	pgtest.Exec(t, dsn, stmts...)
}

var readers atomic.Int64

// selectOnly creates a role that may read the tables dsn's database holds now and create
// nothing in its schema, and returns dsn as that role.
func selectOnly(t *testing.T, dsn string) string {
	t.Helper()
	role := fmt.Sprintf("ro_%d_%d", os.Getpid(), readers.Add(1))
	pgtest.Exec(t, dsn, "CREATE ROLE "+role+" LOGIN",
		"GRANT SELECT ON ALL TABLES IN SCHEMA public TO "+role,
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC")
	return strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1)
}

// TestOpenReadOnly: a read-only open never creates, migrates or writes anything. It refuses
// a database without Vigil's schema and one whose schema is older or newer than this
// code's, each with its own error and advice, and opens a current one, also as a role that
// may only SELECT.
func TestOpenReadOnly(t *testing.T) {
	ctx := context.Background()
	current := SchemaVersion()
	require.GreaterOrEqual(t, current, 2, "an older schema needs two migrations")
	withData := func(t *testing.T, dsn string) {
		db, err := Open(ctx, dsn, Options{})
		require.NoError(t, err)
		require.NoError(t, db.SaveStep(ctx, step("s1")))
		_, err = db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
		require.NoError(t, err)
		require.NoError(t, db.Close())
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dsn string)
		err   error
		want  string
	}{
		{"empty database", func(*testing.T, string) {}, ErrNoSchema,
			"database has no Vigil schema (no vigil_migrations table): create it with `vigil serve --db URL`, or copy a SQLite installation into it with `vigil migrate --from FILE --to URL`"},
		{"migrations table without a migration", func(t *testing.T, dsn string) { migrateTo(t, dsn, 0) }, ErrNoSchema,
			"database has no Vigil schema (no migration recorded in vigil_migrations)"},
		{"older schema", func(t *testing.T, dsn string) { migrateTo(t, dsn, current-1) }, ErrSchemaTooOld,
			fmt.Sprintf("schema version %d is older than this Vigil's (%d): upgrade it first by starting this version's guardian on it (`vigil serve --db URL`), or use the Vigil that runs on it", current-1, current)},
		{"newer schema", func(t *testing.T, dsn string) {
			withData(t, dsn)
			pgtest.Exec(t, dsn, fmt.Sprintf(`INSERT INTO vigil_migrations (version, name) VALUES (%d, 'from the future')`, current+1))
		}, ErrSchemaTooNew, fmt.Sprintf("schema version %d is newer than this Vigil's (%d): use the newer Vigil that migrated it", current+1, current)},
		{"current schema", withData, nil, ""},
	}
	for _, tc := range tests {
		for _, role := range []string{"owner", "select-only role"} {
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				dsn := pgtest.Need(t, srv)
				tc.setup(t, dsn)
				openDSN := dsn
				if role != "owner" {
					openDSN = selectOnly(t, dsn)
				}
				before := dbState(t, dsn)
				ro, err := OpenReadOnly(ctx, openDSN, Options{})
				if tc.err != nil {
					require.ErrorIs(t, err, tc.err)
					require.Nil(t, ro)
					require.Contains(t, err.Error(), tc.want)
					require.Equal(t, before, dbState(t, dsn), "OpenReadOnly changed the database")
					return
				}
				require.NoError(t, err)
				require.True(t, strings.HasPrefix(ro.Describe(), "postgres://"), ro.Describe())
				var out bytes.Buffer
				res, err := ro.Export(ctx, &out, record.ExportOptions{Steps: true, Audit: true})
				require.NoError(t, err)
				require.Equal(t, record.ExportResult{Steps: 1, Audit: 1}, res)
				require.NoError(t, ro.Close())
				require.NoError(t, ro.Close(), "a second Close is a no-op")
				require.Equal(t, before, dbState(t, dsn), "OpenReadOnly or Export changed the database")
			})
		}
	}
}

// TestOpenReadOnlyURLErrors: a read-only open reports a bad URL as Open does, and a
// database it cannot reach with the address, not the password.
func TestOpenReadOnlyURLErrors(t *testing.T) {
	_, err := OpenReadOnly(context.Background(), "postgres://u:s3cretPW@127.0.0.1:42999/db?sslmode=bogus", Options{})
	require.ErrorContains(t, err, "storage: invalid PostgreSQL URL: failed to configure TLS (sslmode is invalid)")
	require.NotContains(t, err.Error(), "s3cretPW")

	_, err = OpenReadOnly(context.Background(), "postgres://u:s3cretPW@127.0.0.1:42999/db?sslmode=disable&connect_timeout=5", Options{})
	require.ErrorContains(t, err, "storage: connect to postgres://u@127.0.0.1:42999/db")
	require.NotContains(t, err.Error(), "s3cretPW")
}
