package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/storage"
)

// Secret returns the secret named name, made on its first use (see storage.Secrets). A
// secret already made is read alone. The first use inserts one unless a replica did
// (ON CONFLICT DO NOTHING waits for a concurrent insert of the name to commit), then reads
// the one stored: at READ COMMITTED that read sees the other replica's committed row, so
// replicas starting together agree.
func (db *DB) Secret(ctx context.Context, name string, size int) (value []byte, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if db.isClosed() {
		return nil, ErrClosed
	}
	err = db.pool.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, name).Scan(&value)
	switch {
	case err == nil:
		return value, storage.CheckSecret(name, value, size)
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("storage: read secret %q: %w", name, err)
	}
	made, err := storage.NewSecret(size)
	if err != nil {
		return nil, err
	}
	err = db.plainTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, made); err != nil {
			return fmt.Errorf("storage: store secret %q: %w", name, err)
		}
		if err := tx.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, name).Scan(&value); err != nil {
			return fmt.Errorf("storage: read secret %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return value, storage.CheckSecret(name, value, size)
}
