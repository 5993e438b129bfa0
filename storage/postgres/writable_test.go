package postgres

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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
			db, err := Open(ctx, pgtest.AsRole(dsn, role), Options{})
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

// TestCheckWritableRevokedGrant: a role that may no longer write a table the guardian
// writes, as a step or an operator's action does, is reported as unable to take writes,
// naming the privilege and the table, and writable again once the grant is back.
func TestCheckWritableRevokedGrant(t *testing.T) {
	tests := []struct {
		name     string
		revoke   []string // "PRIVILEGES ON table"
		lacks    string
		write    func(ctx context.Context, db *DB) error // fails as the check said
		deniedOn string
	}{
		{"INSERT on steps", []string{"INSERT ON steps"}, "INSERT on steps",
			func(ctx context.Context, db *DB) error {
				return db.SaveStep(ctx, &record.StepRecord{SessionID: "s1", Method: "steps/message", Decision: "allow"})
			}, "steps"},
		{"INSERT on audit", []string{"INSERT ON audit"}, "INSERT on audit",
			func(ctx context.Context, db *DB) error {
				_, err := db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
				return err
			}, "audit"},
		{"DELETE on auth_sessions", []string{"DELETE ON auth_sessions"}, "DELETE on auth_sessions",
			func(ctx context.Context, db *DB) error {
				_, err := db.DeleteExpiredAuthSessions(ctx, time.Now())
				return err
			}, "auth_sessions"},
		{"UPDATE on api_keys", []string{"UPDATE ON api_keys"}, "UPDATE on api_keys",
			func(ctx context.Context, db *DB) error {
				return db.TouchAPIKeys(ctx, map[string]time.Time{"k1": time.Now()})
			}, "api_keys"},
		{"several", []string{"DELETE ON users", "UPDATE ON holds", "INSERT ON users"},
			"UPDATE on holds, INSERT and DELETE on users",
			func(ctx context.Context, db *DB) error {
				_, err := db.CreateUser(ctx, &record.User{Name: "ann", Role: "admin", PasswordHash: []byte("x"),
					CreatedAt: time.Now(), UpdatedAt: time.Now()}, nil)
				return err
			}, "users"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := pgtest.Need(t, srv)
			u, err := url.Parse(dsn)
			require.NoError(t, err)
			role := "g_" + strings.TrimPrefix(u.Path, "/")
			id := pgx.Identifier{role}.Sanitize()
			pgtest.Exec(t, dsn, "CREATE ROLE "+id+" LOGIN", "GRANT CREATE ON SCHEMA public TO "+id)
			db, err := Open(ctx, pgtest.AsRole(dsn, role), Options{})
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			require.NoError(t, db.CheckWritable(ctx))

			var revoke, grant []string
			for _, r := range tc.revoke {
				revoke = append(revoke, "REVOKE "+r+" FROM "+id)
				grant = append(grant, "GRANT "+r+" TO "+id)
			}
			pgtest.Exec(t, dsn, revoke...)
			err = db.CheckWritable(ctx)
			require.ErrorIs(t, err, storage.ErrReadOnly)
			require.ErrorContains(t, err, "the role "+role+" may not write Vigil's tables as the guardian does: it lacks "+tc.lacks)
			require.NotContains(t, err.Error(), "transaction_read_only")
			require.ErrorContains(t, tc.write(ctx, db), "permission denied for table "+tc.deniedOn,
				"the check tells what a write finds")

			pgtest.Exec(t, dsn, grant...)
			require.NoError(t, db.CheckWritable(ctx))
		})
	}
}

// writtenTables is what CheckWritable checks: every statement of the package that writes a
// table must find its table and privilege there, or a revoked grant on it would go unseen
// by the health check. The statements are read from the package's string literals (not
// its comments); load.go is `vigil migrate`'s, run once before any guardian serves.
func TestWrittenTablesCoverTheSQL(t *testing.T) {
	granted := map[string]bool{}
	for _, w := range writtenTables() {
		for _, p := range w.privileges {
			granted[p+" on "+w.table] = true
		}
	}
	write := regexp.MustCompile(`\b(INSERT INTO|UPDATE|DELETE FROM)\s+([a-z_]+)`)
	upsert := regexp.MustCompile(`(?s)\bINSERT INTO\s+([a-z_]+).*\bDO UPDATE\b`)
	locked := regexp.MustCompile(`(?s)\bFROM\s+([a-z_]+).*\bFOR UPDATE\b`)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	needed := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "load.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			for _, m := range write.FindAllStringSubmatch(s, -1) {
				needed[strings.Fields(m[1])[0]+" on "+m[2]] = true
			}
			for _, re := range []*regexp.Regexp{upsert, locked} {
				if m := re.FindStringSubmatch(s); m != nil {
					needed["UPDATE on "+m[1]] = true
				}
			}
			return true
		})
	}
	delete(needed, "INSERT on vigil_migrations") // written while migrating, before serving
	require.Contains(t, needed, "DELETE on auth_sessions", "the statements were found")
	for w := range needed {
		require.True(t, granted[w], "%s is written but not checked by CheckWritable", w)
	}
	for w := range granted {
		require.True(t, needed[w], "%s is checked but never written", w)
	}
}
