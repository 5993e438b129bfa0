package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"syscall"
	"time"

	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage/postgres"
)

// runKeys implements `vigil keys create|list|revoke`: the API keys agents send to /aos.
func runKeys(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return authCLI(stdout, stderr, readsOnly(args)).Keys(ctx, args)
}

// readsOnly reports whether the keys or users subcommand args name only reads the
// database: list.
func readsOnly(args []string) bool {
	return len(args) > 0 && args[0] == "list"
}

// authCLI is the keys and users commands' setup: the same database as `vigil serve`
// (--db, else VIGIL_DB, else the default file) and the invoking OS user as the operator
// the audit log names. A command that only reads opens the database read-only
// (openAuthReader).
func authCLI(stdout, stderr io.Writer, readOnly bool) *auth.CLI {
	db := defaultDBPath()
	if v := os.Getenv("VIGIL_DB"); v != "" {
		db = v
	}
	operator := "cli"
	if u, err := user.Current(); err == nil && u.Username != "" {
		operator = "cli:" + u.Username
	}
	open := openAuthStore
	if readOnly {
		open = openAuthReader
	}
	return &auth.CLI{DefaultDB: db, Open: open, Stdin: os.Stdin, Stdout: stdout, Stderr: stderr, Operator: operator}
}

// openAuthStore opens the database the keys and users commands change, with one reader:
// they run a handful of queries.
func openAuthStore(ctx context.Context, db string, log *slog.Logger) (auth.ClosableStore, error) {
	return openAuthDB(ctx, db, log)
}

// openAuthReader opens the database `vigil keys list` and `vigil users list` read. On
// PostgreSQL it opens read-only, as `vigil export` does: a listing must not create Vigil's
// tables in an empty (or mistyped) database, nor migrate a schema older replicas still run
// on, nor take the migration lock, and a role that may only SELECT can run it; a database
// without Vigil's schema, or with one older or newer than this binary's, is refused with
// what to do. A SQLite file is opened as the commands that change it do (openAuthDB):
// beside a running guardian, creating a missing file as it always has, and replaying the
// step journal a crashed guardian left.
func openAuthReader(ctx context.Context, db string, log *slog.Logger) (auth.ClosableStore, error) {
	if !postgres.IsURL(db) {
		return openAuthDB(ctx, db, log)
	}
	ro, err := postgres.OpenReadOnly(ctx, db, postgres.Options{Logger: log, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	return readOnlyAuth{ro}, nil
}

// authReader is what the listings read: postgres.ReadOnly.
type authReader interface {
	APIKeys(ctx context.Context) ([]record.APIKey, error)
	Users(ctx context.Context) ([]record.User, error)
	Close() error
}

// errReadOnlyAuth is what readOnlyAuth answers to anything but a listing: the listings need
// nothing else, and nothing else may reach a database opened to be read.
var errReadOnlyAuth = errors.New("the database was opened read-only, for a listing")

// readOnlyAuth is the store of the listings: their reads go to the read-only handle,
// everything else fails with errReadOnlyAuth.
type readOnlyAuth struct{ authReader }

func (readOnlyAuth) CreateAPIKey(context.Context, *record.APIKey, *record.AuditEntry) (record.Event, error) {
	return record.Event{}, errReadOnlyAuth
}

func (readOnlyAuth) APIKey(context.Context, string) (record.APIKey, error) {
	return record.APIKey{}, errReadOnlyAuth
}

func (readOnlyAuth) APIKeyByHash(context.Context, []byte) (record.APIKey, error) {
	return record.APIKey{}, errReadOnlyAuth
}

func (readOnlyAuth) HasAPIKeys(context.Context) (bool, error) { return false, errReadOnlyAuth }

func (readOnlyAuth) RevokeAPIKey(context.Context, string, time.Time, *record.AuditEntry) (record.APIKey, record.Event, error) {
	return record.APIKey{}, record.Event{}, errReadOnlyAuth
}

func (readOnlyAuth) TouchAPIKeys(context.Context, map[string]time.Time) error { return errReadOnlyAuth }

func (readOnlyAuth) CreateUser(context.Context, *record.User, *record.AuditEntry) (record.Event, error) {
	return record.Event{}, errReadOnlyAuth
}

func (readOnlyAuth) User(context.Context, string) (record.User, error) {
	return record.User{}, errReadOnlyAuth
}

func (readOnlyAuth) HasUsers(context.Context) (bool, error) { return false, errReadOnlyAuth }

func (readOnlyAuth) SetUserPassword(context.Context, string, []byte, time.Time, *record.AuditEntry) (record.Event, error) {
	return record.Event{}, errReadOnlyAuth
}

func (readOnlyAuth) DeleteUser(context.Context, string, *record.AuditEntry) (record.User, record.Event, error) {
	return record.User{}, record.Event{}, errReadOnlyAuth
}

func (readOnlyAuth) CreateAuthSession(context.Context, *record.AuthSession, *record.AuditEntry) (record.Event, error) {
	return record.Event{}, errReadOnlyAuth
}

func (readOnlyAuth) AuthSession(context.Context, []byte) (record.AuthSession, error) {
	return record.AuthSession{}, errReadOnlyAuth
}

func (readOnlyAuth) DeleteAuthSession(context.Context, []byte, *record.AuditEntry) (bool, record.Event, error) {
	return false, record.Event{}, errReadOnlyAuth
}

func (readOnlyAuth) DeleteExpiredAuthSessions(context.Context, time.Time) (int64, error) {
	return 0, errReadOnlyAuth
}
