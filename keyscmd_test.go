package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/storage/postgres"
)

// TestListCommandsOnPostgresOnlyRead: `vigil keys list` and `vigil users list` open a
// PostgreSQL database read-only, as export does. A database without Vigil's schema, or
// with one older or newer than this binary's, is refused with what to do and left as it
// was (no table created, nothing migrated); a current one is listed, also by a role that
// may only SELECT.
func TestListCommandsOnPostgresOnlyRead(t *testing.T) {
	ctx := context.Background()
	current := postgres.SchemaVersion()
	withAccounts := func(t *testing.T, dsn string) {
		db, err := postgres.Open(ctx, dsn, postgres.Options{})
		require.NoError(t, err)
		defer func() { require.NoError(t, db.Close()) }()
		a, err := auth.New(ctx, auth.Config{}, auth.Options{Store: db})
		require.NoError(t, err)
		_, _, err = a.CreateKey(ctx, auth.KeySpec{Name: "ci-key", AgentID: "bot"}, "test")
		require.NoError(t, err)
		_, err = a.AddUser(ctx, "alice", auth.RoleAdmin, "correct horse battery staple", "test")
		require.NoError(t, err)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dsn string)
		code  int
		want  map[string][]string // by command: in stdout on success, else in stderr
	}{
		{"empty database", func(*testing.T, string) {}, 1, map[string][]string{
			"keys":  {"has no Vigil schema", "vigil serve --db", "vigil migrate"},
			"users": {"has no Vigil schema"},
		}},
		{"older schema", func(t *testing.T, dsn string) {
			withAccounts(t, dsn)
			pgtest.Exec(t, dsn, fmt.Sprintf(`DELETE FROM vigil_migrations WHERE version = %d`, current))
		}, 1, map[string][]string{
			"keys":  {fmt.Sprintf("schema version %d is older than this Vigil's (%d)", current-1, current), "vigil serve"},
			"users": {"is older than this Vigil's"},
		}},
		{"newer schema", func(t *testing.T, dsn string) {
			withAccounts(t, dsn)
			pgtest.Exec(t, dsn, fmt.Sprintf(`INSERT INTO vigil_migrations (version, name) VALUES (%d, 'from the future')`, current+1))
		}, 1, map[string][]string{
			"keys":  {fmt.Sprintf("schema version %d is newer than this Vigil's (%d)", current+1, current), "newer Vigil"},
			"users": {"is newer than this Vigil's"},
		}},
		{"current schema", withAccounts, 0, map[string][]string{
			"keys":  {"ci-key", "bot"},
			"users": {"alice", "admin"},
		}},
	}
	for _, tc := range tests {
		for _, role := range []string{"owner", "select-only role"} {
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				dsn := pgtest.Need(t, pgSrv)
				tc.setup(t, dsn)
				listDSN := dsn
				if role != "owner" {
					listDSN = pgtest.SelectOnlyRole(t, dsn)
				}
				before := pgtest.State(t, dsn)
				for _, cmd := range []string{"keys", "users"} {
					var stdout, stderr bytes.Buffer
					code := run([]string{cmd, "list", "--db", listDSN}, &stdout, &stderr)
					require.Equal(t, tc.code, code, "%s list: %s", cmd, stderr.String())
					require.Equal(t, before, pgtest.State(t, dsn), "%s list changed the database", cmd)
					out := stdout.String()
					if tc.code != 0 {
						require.Empty(t, out)
						out = stderr.String()
					}
					for _, w := range tc.want[cmd] {
						require.Contains(t, out, w, cmd)
					}
				}
			})
		}
	}
}

// The commands that change accounts still open the database as the guardian does: on an
// empty database they create Vigil's schema, and a listing then finds what they stored.
func TestChangeCommandsOnPostgresCreateTheSchema(t *testing.T) {
	dsn := pgtest.Need(t, pgSrv)
	require.Empty(t, pgtest.State(t, dsn), "no tables")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"keys", "create", "--name", "first", "--db", dsn}, &stdout, &stderr), stderr.String())
	require.True(t, strings.HasPrefix(stdout.String(), "vgl_"), stdout.String())
	require.Contains(t, pgtest.State(t, dsn), fmt.Sprint(" migrations ", migrationList(postgres.SchemaVersion())))

	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 0, run([]string{"keys", "list", "--db", pgtest.SelectOnlyRole(t, dsn)}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "first")
}

// migrationList is 1…n, as pgtest.State prints the versions recorded.
func migrationList(n int) []int {
	l := make([]int, n)
	for i := range l {
		l[i] = i + 1
	}
	return l
}
