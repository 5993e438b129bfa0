package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/testfs"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// A database file SQLite can only read still opens, and would store no write: CheckWritable
// says so, where a health check can see it.
func TestCheckWritableReadOnlyFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err)
	save(t, db, step("s1", "allow", 0))
	require.NoError(t, db.CheckWritable(ctx))
	require.NoError(t, db.Close())

	testfs.WriteProtect(t, path)
	db, err = Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err, "a read-only file opens")
	defer func() { require.NoError(t, db.Close()) }()
	err = db.CheckWritable(ctx)
	require.ErrorIs(t, err, storage.ErrReadOnly)
	require.Contains(t, err.Error(), path)
	_, werr := db.AppendAudit(ctx, &record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "s1"})
	require.ErrorContains(t, werr, "readonly database", "the check tells what a write finds")
	got, err := db.Session(ctx, "s1")
	require.NoError(t, err, "reads still work")
	require.Equal(t, "s1", got.ID)
}
