package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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

// TestOrphansAreReaped: a server whose test process is gone (killed before Stop) is stopped
// and removed by the next Start's reaping; a server whose process runs is left alone.
func TestOrphansAreReaped(t *testing.T) {
	Need(t, srv)
	ctx := context.Background()
	orphan, err := Start(ctx, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = orphan.Stop() })
	// A process that has ended stands for the killed test binary.
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	require.NoError(t, os.WriteFile(filepath.Join(orphan.dir, ownerFile), []byte(fmt.Sprintf("%d 1", gone.Process.Pid)), 0o644))

	reapOrphans(ctx, os.TempDir(), orphan.bin)

	require.NoDirExists(t, orphan.dir)
	_, err = net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", orphan.Port()), time.Second)
	require.Error(t, err, "the orphan's server still answers")
	require.DirExists(t, srv.dir, "the running tests' own server was reaped")
	conn, err := pgx.Connect(ctx, Need(t, srv))
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
}
