package postgres

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/record"
)

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
					openDSN = pgtest.SelectOnlyRole(t, dsn)
				}
				before := pgtest.State(t, dsn)
				ro, err := OpenReadOnly(ctx, openDSN, Options{})
				if tc.err != nil {
					require.ErrorIs(t, err, tc.err)
					require.Nil(t, ro)
					require.Contains(t, err.Error(), tc.want)
					require.Equal(t, before, pgtest.State(t, dsn), "OpenReadOnly changed the database")
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
				require.Equal(t, before, pgtest.State(t, dsn), "OpenReadOnly or Export changed the database")
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
