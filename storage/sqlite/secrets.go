package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/vigil-guardian/vigil/storage"
)

// Secret returns the secret named name, made on its first use (see storage.Secrets). A
// secret already made is read without the writer; the first use inserts it unless it is
// there (the writer runs one write at a time) and reads back the one stored.
func (db *DB) Secret(ctx context.Context, name string, size int) ([]byte, error) {
	var value []byte
	err := db.r.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = ?`, name).Scan(&value)
	switch {
	case err == nil:
		return value, storage.CheckSecret(name, value, size)
	case !errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("storage: read secret %q: %w", name, err)
	}
	made, err := storage.NewSecret(size)
	if err != nil {
		return nil, err
	}
	_, err = db.execAlone(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`, name, made); err != nil {
			return fmt.Errorf("storage: store secret %q: %w", name, err)
		}
		if err := tx.QueryRow(`SELECT value FROM secrets WHERE name = ?`, name).Scan(&value); err != nil {
			return fmt.Errorf("storage: read secret %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return value, storage.CheckSecret(name, value, size)
}
