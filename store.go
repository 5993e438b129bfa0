package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
	"github.com/vigil-guardian/vigil/storage/postgres"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// openStore opens the storage backend --db names: a postgres:// or postgresql:// URL opens
// the PostgreSQL backend (shared by replicas); anything else is a SQLite file path.
func openStore(ctx context.Context, dsn string, log *slog.Logger) (storage.Backend, error) {
	if postgres.IsURL(dsn) {
		db, err := postgres.Open(ctx, dsn, postgres.Options{Logger: log})
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return db, nil
	}
	db, err := sqlite.Open(ctx, dsn, sqlite.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	return db, nil
}

// redactDSN is dsn fit for messages and logs: a URL loses its passwords (in the user info
// or the password and sslpassword parameters), a path stays as it is.
func redactDSN(dsn string) string {
	if !postgres.IsURL(dsn) {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	// The password and sslpassword parameters, and any other that holds a password (one
	// typed into the wrong parameter), are masked.
	q := u.Query()
	masked := false
	for k, vs := range q {
		for i, v := range vs {
			if r := postgres.Redact(dsn, v); r != v || k == "password" || k == "sslpassword" {
				vs[i], masked = "xxxxx", true
			}
		}
	}
	if masked {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// exporter is what `vigil export` reads from: SQLite's read-only view of a file (safe
// beside a running guardian) or PostgreSQL's read-only handle.
type exporter interface {
	Export(ctx context.Context, w io.Writer, opts record.ExportOptions) (record.ExportResult, error)
	Close() error
}

// openExporter opens the database `vigil export` reads. Neither backend creates or migrates
// a database here: export only reads, also as a role that may only SELECT, and must not
// upgrade a schema that older guardians still run on. Each refuses a database without
// Vigil's schema or with one newer than this binary's (PostgreSQL also an older one, which
// its guardian must upgrade first).
func openExporter(ctx context.Context, dsn string) (exporter, error) {
	if postgres.IsURL(dsn) {
		// A small pool: export reads one snapshot through one connection.
		db, err := postgres.OpenReadOnly(ctx, dsn, postgres.Options{MaxConns: 2})
		if err != nil {
			return nil, err
		}
		return db, nil
	}
	ro, err := sqlite.OpenReadOnly(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return ro, nil
}

// openAuthDB opens the database the keys and users commands change, with a small pool:
// they run a handful of queries. A running guardian may hold the database: the commands
// then work beside it (sqlite.Options.Beside), and it stores their audit entries.
func openAuthDB(ctx context.Context, dsn string, log *slog.Logger) (storage.Backend, error) {
	if postgres.IsURL(dsn) {
		db, err := postgres.Open(ctx, dsn, postgres.Options{Logger: log, MaxConns: 2, Committers: 1})
		if err != nil {
			return nil, err
		}
		return db, nil
	}
	db, err := sqlite.Open(ctx, dsn, sqlite.Options{Logger: log, Readers: 1, Beside: true})
	if err != nil {
		return nil, err
	}
	return db, nil
}

// errPGBackup is what `vigil backup` says for a PostgreSQL database: its backups are
// PostgreSQL's own tools' job.
var errPGBackup = errors.New("vigil backup copies SQLite files; back up a PostgreSQL database with its own tools, " +
	"e.g. pg_dump --format=custom --file=vigil.dump 'postgres://…' (restore with pg_restore --dbname='postgres://…' vigil.dump), " +
	"or continuous archiving (pg_basebackup and WAL archiving) for point-in-time recovery")
