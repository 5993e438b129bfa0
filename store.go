package main

import (
	"context"
	"log/slog"

	"github.com/vigil-guardian/vigil/storage"
	"github.com/vigil-guardian/vigil/storage/sqlite"
)

// openStore opens the storage backend --db names: a SQLite file path.
func openStore(ctx context.Context, dsn string, log *slog.Logger) (storage.Backend, error) {
	return sqlite.Open(ctx, dsn, sqlite.Options{Logger: log})
}
