package auth

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

func newTestServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type cliRun struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, dbPath, stdin string, keys bool, args ...string) cliRun {
	t.Helper()
	var out, errOut bytes.Buffer
	c := &CLI{DefaultDB: dbPath, Open: openSQLite, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		Operator: "cli:tester", BcryptCost: 4}
	var code int
	if keys {
		code = c.Keys(context.Background(), args)
	} else {
		code = c.Users(context.Background(), args)
	}
	return cliRun{code, out.String(), errOut.String()}
}

func TestKeysCLI(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "vigil.db")

	r := runCLI(t, dbPath, "", true, "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "No API keys")

	r = runCLI(t, dbPath, "", true, "create", "--agent", "support-bot", "--name", "support", "--expires", "720h")
	require.Equal(t, 0, r.code, r.stderr)
	secret := strings.TrimSpace(r.stdout)
	require.Regexp(t, `^vgl_[A-Za-z0-9_-]{43}$`, secret, "stdout is the key alone, for scripts")
	id := regexp.MustCompile(`key_[0-9a-f]{16}`).FindString(r.stderr)
	require.NotEmpty(t, id, r.stderr)
	require.Contains(t, r.stderr, "shown only now")

	r = runCLI(t, dbPath, "", true, "create") // unscoped, with a warning
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "not scoped")

	r = runCLI(t, dbPath, "", true, "list")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3)
	require.Contains(t, lines[1], id)
	require.Contains(t, lines[1], "support-bot")
	require.Contains(t, lines[1], "active")
	require.Contains(t, lines[1], secret[:keyShownChars])
	require.NotContains(t, r.stdout, secret)

	r = runCLI(t, dbPath, "", true, "revoke", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "Revoked key "+id)
	r = runCLI(t, dbPath, "", true, "list")
	require.Contains(t, strings.Split(r.stdout, "\n")[1], "revoked")

	// A server on the database refuses the revoked key.
	db, err := sqlite.Open(context.Background(), dbPath, sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	e := newEnvOn(t, db, Config{Loopback: true})
	status, _, _, _ := rpc(t, e.server(t), secret, "support-bot")
	require.Equal(t, http.StatusUnauthorized, status)

	entries, err := db.ListAudit(context.Background(), record.AuditQuery{Type: "key"})
	require.NoError(t, err)
	require.Len(t, entries, 3)
	require.Equal(t, "cli:tester", entries[0].Operator)

	for _, bad := range [][]string{
		{},
		{"frobnicate"},
		{"revoke"},
		{"create", "--expires", "soon"},
		{"create", "--bogus"},
	} {
		r := runCLI(t, dbPath, "", true, bad...)
		require.Equal(t, 2, r.code, "%v: %s", bad, r.stderr)
	}
	r = runCLI(t, dbPath, "", true, "revoke", "key_nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "not found")
}

// fakeLister serves the listings from memory and notes its closing.
type fakeLister struct {
	keys   []record.APIKey
	users  []record.User
	closed bool
}

func (f *fakeLister) APIKeys(context.Context) ([]record.APIKey, error) { return f.keys, nil }
func (f *fakeLister) Users(context.Context) ([]record.User, error)     { return f.users, nil }
func (f *fakeLister) Close() error                                     { f.closed = true; return nil }

// TestListingsOpenOnlyTheLister: `keys list` and `users list` read through OpenLister alone
// and close it. The Lister type has no method that writes, so the compiler guarantees a
// listing cannot change the database main opens read-only for it; the subcommands that
// change accounts open it with Open.
func TestListingsOpenOnlyTheLister(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		keys   bool
		args   []string
		code   int
		lister bool     // opened with OpenLister, else with Open
		want   []string // in stdout
	}{
		{"keys list", true, []string{"list"}, 0, true, []string{"key_active", "active", "key_expired", "expired"}},
		{"users list", false, []string{"list"}, 0, true, []string{"alice", RoleAdmin}},
		{"keys create", true, []string{"create", "--name", "ci"}, 0, false, []string{"vgl_"}},
		{"keys revoke", true, []string{"revoke", "key_nope"}, 1, false, nil},
		{"users remove", false, []string{"remove", "nobody"}, 1, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lister := &fakeLister{
				keys: []record.APIKey{
					{ID: "key_active", Prefix: "vgl_a", CreatedAt: now.Add(-time.Hour)},
					{ID: "key_expired", Prefix: "vgl_e", CreatedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour)},
				},
				users: []record.User{{Name: "alice", Role: RoleAdmin, CreatedAt: now, UpdatedAt: now}},
			}
			var opens, listerOpens int
			var out, errOut bytes.Buffer
			c := &CLI{DefaultDB: filepath.Join(t.TempDir(), "vigil.db"), Stdout: &out, Stderr: &errOut,
				Operator: "cli:tester", BcryptCost: 4, Now: func() time.Time { return now },
				Open: func(ctx context.Context, path string, log *slog.Logger) (ClosableStore, error) {
					opens++
					return openSQLite(ctx, path, log)
				},
				OpenLister: func(context.Context, string, *slog.Logger) (Lister, error) {
					listerOpens++
					return lister, nil
				},
			}
			run := c.Users
			if tc.keys {
				run = c.Keys
			}
			require.Equal(t, tc.code, run(context.Background(), tc.args), errOut.String())
			if tc.lister {
				require.Equal(t, [2]int{0, 1}, [2]int{opens, listerOpens}, "Open, OpenLister calls")
				require.True(t, lister.closed, "the listing closes its handle")
			} else {
				require.Equal(t, [2]int{1, 0}, [2]int{opens, listerOpens}, "Open, OpenLister calls")
			}
			for _, w := range tc.want {
				require.Contains(t, out.String(), w)
			}
		})
	}
}

func TestUsersCLI(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "vigil.db")

	r := runCLI(t, dbPath, "adam-password\n", false, "add", "adam", "--role", "admin")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "Added adam (admin)")
	r = runCLI(t, dbPath, "rita-password", false, "add", "--role", "reviewer", "rita")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, dbPath, "", false, "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^adam\s+admin\s`, r.stdout)
	require.Regexp(t, `(?m)^rita\s+reviewer\s`, r.stdout)

	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"no role", "pw-pw-pw-pw", []string{"add", "sam"}, 2, "--role"},
		{"bad role", "pw-pw-pw-pw", []string{"add", "sam", "--role", "root"}, 2, "--role"},
		{"no password", "", []string{"add", "sam", "--role", "viewer"}, 2, "no password"},
		{"short password", "short\n", []string{"add", "sam", "--role", "viewer"}, 2, "at least 8"},
		{"taken", "whatever-pw", []string{"add", "Rita", "--role", "viewer"}, 1, "already exists"},
		{"bad name", "whatever-pw", []string{"add", "s/m", "--role", "viewer"}, 2, "name"},
		{"last admin", "", []string{"remove", "adam"}, 1, "last admin"},
		{"unknown", "", []string{"remove", "nobody"}, 1, "not found"},
		{"passwd unknown", "whatever-pw", []string{"passwd", "nobody"}, 1, "not found"},
		{"two names", "", []string{"remove", "a", "b"}, 2, "expected 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, dbPath, tt.stdin, false, tt.args...)
			require.Equal(t, tt.code, r.code, r.stderr)
			require.Contains(t, r.stderr, tt.msg)
		})
	}

	r = runCLI(t, dbPath, "new-rita-password\r\n", false, "passwd", "rita")
	require.Equal(t, 0, r.code, r.stderr)

	db, err := sqlite.Open(context.Background(), dbPath, sqlite.Options{})
	require.NoError(t, err)
	e := newEnvOn(t, db, Config{Loopback: true})
	c := newClient(t, e.server(t))
	require.Equal(t, http.StatusUnauthorized, c.login("rita", "rita-password").status)
	require.Equal(t, http.StatusOK, c.login("rita", "new-rita-password").status)
	require.NoError(t, db.Close())

	r = runCLI(t, dbPath, "", false, "remove", "rita")
	require.Equal(t, 0, r.code, r.stderr)
	// Alone, the last admin may go: the console returns to zero-config.
	r = runCLI(t, dbPath, "", false, "remove", "adam")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, dbPath, "", false, "list")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stderr, "No operator accounts")
}

// openSQLite opens the database as the vigil binary's commands do (beside a running
// guardian when one holds it).
func openSQLite(ctx context.Context, path string, log *slog.Logger) (ClosableStore, error) {
	return sqlite.Open(ctx, path, sqlite.Options{Logger: log, Readers: 1, Beside: true})
}

// promptReader is a person at the password prompt: while they type, a guardian starting on
// the same database must get it.
type promptReader struct {
	t      *testing.T
	path   string
	answer io.Reader
	opened bool
}

func (p *promptReader) Read(b []byte) (int, error) {
	if !p.opened {
		p.opened = true
		db, err := sqlite.Open(context.Background(), p.path, sqlite.Options{})
		require.NoError(p.t, err, "the database is free while the command waits for the password")
		require.NoError(p.t, db.Close())
	}
	return p.answer.Read(b)
}

func TestPasswordPromptHoldsNoDatabase(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "vigil.db")
	for _, args := range [][]string{{"add", "ann", "--role", "admin"}, {"passwd", "ann"}} {
		var out, errOut bytes.Buffer
		c := &CLI{DefaultDB: dbPath, Open: openSQLite, Stdout: &out, Stderr: &errOut, Operator: "cli:tester", BcryptCost: 4,
			Stdin: &promptReader{t: t, path: dbPath, answer: strings.NewReader("correct horse battery\n")}}
		require.Equal(t, 0, c.Users(context.Background(), args), errOut.String())
	}
}
