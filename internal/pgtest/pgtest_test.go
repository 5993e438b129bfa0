package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

var srv *Server

func TestMain(m *testing.M) { os.Exit(Main(m, &srv)) }

func TestServerAnswers(t *testing.T) {
	dsn := Need(t, srv)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "select 40 + 2").Scan(&n))
	require.Equal(t, 42, n)
	// Two databases are distinct.
	other := Need(t, srv)
	require.NotEqual(t, dsn, other)
}
