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
)

// runKeys implements `vigil keys create|list|revoke`: the API keys agents send to /aos.
func runKeys(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return authCLI(stdout, stderr).Keys(ctx, args)
}

// authCLI is the keys and users commands' setup: the same database as `vigil serve`
// (--db, else VIGIL_DB, else the default file) and the invoking OS user as the operator
// the audit log names.
func authCLI(stdout, stderr io.Writer) *auth.CLI {
	db := defaultDBPath()
	if v := os.Getenv("VIGIL_DB"); v != "" {
		db = v
	}
	operator := "cli"
	if u, err := user.Current(); err == nil && u.Username != "" {
		operator = "cli:" + u.Username
	}
	return &auth.CLI{DefaultDB: db, Open: openAuthStore, Stdin: os.Stdin, Stdout: stdout, Stderr: stderr, Operator: operator}
}

// openAuthStore opens the database the keys and users commands change, with one reader:
// they run a handful of queries.
func openAuthStore(ctx context.Context, db string, log *slog.Logger) (auth.ClosableStore, error) {
	return openAuthDB(ctx, db, log)
}
