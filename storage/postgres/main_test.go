package postgres

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/internal/pgtest"
	"github.com/vigil-guardian/vigil/storage"
	"github.com/vigil-guardian/vigil/storage/storetest"
)

var srv *pgtest.Server

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &srv)) }

// openTest opens a fresh database and closes it when the test ends.
func openTest(t testing.TB) *DB {
	t.Helper()
	db, err := Open(context.Background(), pgtest.Need(t, srv), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storage.Backend { return openTest(t) })
}
