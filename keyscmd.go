package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"syscall"

	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/storage/postgres"
)

// runKeys implements `vigil keys create|list|revoke`: the API keys agents send to /aos.
func runKeys(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return authCLI(stdout, stderr).Keys(ctx, args)
}

// authCLI is the keys and users commands' setup: the same database as `vigil serve`
// (--db, else VIGIL_DB, else the default file) and the invoking OS user as the operator
// the audit log names. The listings open the database with openAuthLister.
func authCLI(stdout, stderr io.Writer) *auth.CLI {
	db := defaultDBPath()
	if v := os.Getenv("VIGIL_DB"); v != "" {
		db = v
	}
	operator := "cli"
	if u, err := user.Current(); err == nil && u.Username != "" {
		operator = "cli:" + u.Username
	}
	return &auth.CLI{DefaultDB: db, Open: openAuthStore, OpenLister: openAuthLister,
		Stdin: os.Stdin, Stdout: stdout, Stderr: stderr, Operator: operator}
}

// openAuthStore opens the database the keys and users commands change, with one reader:
// they run a handful of queries.
func openAuthStore(ctx context.Context, db string, log *slog.Logger) (auth.ClosableStore, error) {
	return openAuthDB(ctx, db, log)
}

// openAuthLister opens the database `vigil keys list` and `vigil users list` read. On
// PostgreSQL it opens read-only, as `vigil export` does: a listing must not create Vigil's
// tables in an empty (or mistyped) database, nor migrate a schema older replicas still run
// on, nor take the migration lock, and a role that may only SELECT can run it; a database
// without Vigil's schema, or with one older or newer than this binary's, is refused with
// what to do. A SQLite file is opened as the commands that change it do (openAuthDB):
// beside a running guardian, creating a missing file as it always has, and replaying the
// step journal a crashed guardian left.
func openAuthLister(ctx context.Context, db string, log *slog.Logger) (auth.Lister, error) {
	if !postgres.IsURL(db) {
		return openAuthDB(ctx, db, log)
	}
	ro, err := postgres.OpenReadOnly(ctx, db, postgres.Options{Logger: log, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	return ro, nil
}
