//go:build unix

package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A FIFO at the destination (like a device or a socket: anything not a regular file) is
// refused, with overwrite too: renaming the copy over it would replace it with a file.
func TestBackupRefusesAFIFO(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	save(t, db, step("s", "allow", 0))
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))

	_, err := Backup(ctx, db.Path(), fifo, true)
	var de *DestinationError
	require.ErrorAs(t, err, &de)
	require.ErrorContains(t, err, "is not a regular file")
	st, err := os.Lstat(fifo)
	require.NoError(t, err)
	require.Equal(t, os.ModeNamedPipe, st.Mode().Type())
}
