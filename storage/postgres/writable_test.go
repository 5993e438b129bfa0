package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// TestCheckWritableReadOnlyDefaults: a default_transaction_read_only set for the database
// or the guardian's role makes CheckWritable report the database read-only at once, though
// the pool's connections, opened before, still write (every connection it opens from then
// on would refuse), and again once they are renewed. PostgreSQL's precedence decides
// between settings at several levels. A write finds what the check said.
func TestCheckWritableReadOnlyDefaults(t *testing.T) {
	const name = "default_transaction_read_only"
	tests := []struct {
		name     string
		set      []string // {db} and {role} are the test's database and role
		readOnly bool
	}{
		{"nothing set", nil, false},
		{"database", []string{"ALTER DATABASE {db} SET " + name + " = on"}, true},
		{"role", []string{"ALTER ROLE {role} SET " + name + " = true"}, true},
		{"role in database", []string{"ALTER ROLE {role} IN DATABASE {db} SET " + name + " = on"}, true},
		{"all roles in database", []string{"ALTER ROLE ALL IN DATABASE {db} SET " + name + " = on"}, true},
		{"off", []string{"ALTER DATABASE {db} SET " + name + " = off"}, false},
		{"role over database", []string{
			"ALTER DATABASE {db} SET " + name + " = on",
			"ALTER ROLE {role} SET " + name + " = off",
		}, false},
		{"role in database over role", []string{
			"ALTER ROLE {role} SET " + name + " = off",
			"ALTER ROLE {role} IN DATABASE {db} SET " + name + " = on",
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := pgtest.Need(t, srv)
			u, err := url.Parse(dsn)
			require.NoError(t, err)
			dbName := strings.TrimPrefix(u.Path, "/")
			// The guardian's role is not a superuser: it must read the settings too.
			role := "w_" + dbName
			pgtest.Exec(t, dsn, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN",
				"GRANT CREATE ON SCHEMA public TO "+pgx.Identifier{role}.Sanitize())
			db, err := Open(ctx, strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1), Options{})
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			require.NoError(t, db.CheckWritable(ctx))

			r := strings.NewReplacer("{role}", pgx.Identifier{role}.Sanitize(), "{db}", pgx.Identifier{dbName}.Sanitize())
			stmts := make([]string, len(tc.set))
			for i, s := range tc.set {
				stmts[i] = r.Replace(s)
			}
			// One connection: it keeps the defaults it started with.
			pgtest.Exec(t, dsn, stmts...)
			err = db.CheckWritable(ctx)
			if tc.readOnly {
				require.ErrorIs(t, err, storage.ErrReadOnly)
				require.ErrorContains(t, err, "default_transaction_read_only is on for new connections")
			} else {
				require.NoError(t, err)
			}

			db.Pool().Reset() // the pool's connections are renewed
			err = db.CheckWritable(ctx)
			_, werr := db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
			if !tc.readOnly {
				require.NoError(t, err)
				require.NoError(t, werr)
				return
			}
			require.ErrorIs(t, err, storage.ErrReadOnly)
			require.ErrorContains(t, err, "transaction_read_only is on")
			require.NotContains(t, err.Error(), "postgres@", "names the guardian's role")
			require.ErrorContains(t, werr, "read-only transaction", "the check tells what a write finds")
		})
	}
}

// TestCheckWritableRevokedGrant: a role that may no longer write a table every step writes
// is reported as unable to take writes, and writable again once the grant is back.
func TestCheckWritableRevokedGrant(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Need(t, srv)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	role := "g_" + strings.TrimPrefix(u.Path, "/")
	pgtest.Exec(t, dsn, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN",
		"GRANT CREATE ON SCHEMA public TO "+pgx.Identifier{role}.Sanitize())
	db, err := Open(ctx, strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1), Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.NoError(t, db.CheckWritable(ctx))

	pgtest.Exec(t, dsn, "REVOKE INSERT ON steps FROM "+pgx.Identifier{role}.Sanitize())
	err = db.CheckWritable(ctx)
	require.ErrorIs(t, err, storage.ErrReadOnly)
	require.ErrorContains(t, err, "may not write Vigil's tables")
	require.Error(t, db.SaveStep(ctx, &record.StepRecord{SessionID: "s1", Method: "steps/message", Decision: "allow"}),
		"the check tells what a step finds")

	pgtest.Exec(t, dsn, "GRANT INSERT ON steps TO "+pgx.Identifier{role}.Sanitize())
	require.NoError(t, db.CheckWritable(ctx))
}
