package systest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeletedDatabaseSurvivesTheRestart deletes the database file (and its -wal and -shm)
// under a serving guardian. The guardian notices and says so in its log, stores the steps
// that follow, writes the database back when it stops, and the next start serves every
// step. With the database and its journal both gone, a start is a deliberate fresh start;
// with only the database gone, the start is refused instead of beginning an empty one.
func TestDeletedDatabaseSurvivesTheRestart(t *testing.T) {
	bin := vigilBin(t)
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "vigil.db")
	client := newClient(1)
	defer client.CloseIdleConnections()
	ctx := context.Background()

	p := startVigil(t, bin, dbPath)
	for i := range 10 {
		require.NoError(t, postStep(ctx, client, p.URL, stepBody("kept", fmt.Sprintf("before-%d", i), i)))
	}
	st, err := os.Stat(dbPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the database is private to its owner")
	for _, f := range []string{dbPath, dbPath + "-wal", dbPath + "-shm"} {
		require.NoError(t, os.Remove(f))
	}
	// The guardian checks its file every two seconds and says so in its log.
	require.Eventually(t, func() bool {
		logs, err := os.ReadFile(p.logs)
		return err == nil && strings.Contains(string(logs), "was deleted while Vigil is serving")
	}, 20*time.Second, 100*time.Millisecond, "no log of the deletion\n%s", p.tail())
	for i := range 10 {
		require.NoError(t, postStep(ctx, client, p.URL, stepBody("kept", fmt.Sprintf("after-%d", i), i)))
	}
	p.stop()
	logs, err := os.ReadFile(p.logs)
	require.NoError(t, err)
	require.Contains(t, string(logs), "written back")

	p = startVigil(t, bin, dbPath)
	require.Len(t, sessionStepIDs(t, client, p.URL, "kept"), 20)
	p.stop()

	// Gone for good while stopped: the journal beside it remembers, and the start refuses.
	for _, f := range []string{dbPath, dbPath + "-wal", dbPath + "-shm"} {
		_ = os.Remove(f)
	}
	out, err := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", dbPath).CombinedOutput()
	require.Error(t, err, "a start over a missing database must fail\n%s", out)
	require.True(t, strings.Contains(string(out), "database file is missing"), "%s", out)
	_, err = os.Stat(dbPath)
	require.True(t, os.IsNotExist(err), "no empty database was created")
}
