package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/storage"
	"github.com/vigil-guardian/vigil/storage/storetest"
)

// TestConformance runs the storage.Backend conformance suite against SQLite, with the
// background search indexer on, as the guardian runs it.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storage.Backend {
		db, err := Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		return db
	})
}
