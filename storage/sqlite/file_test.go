package sqlite

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vigil-guardian/vigil/internal/syncbuf"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
)

func TestDatabaseFilesArePrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	save(t, db, step("s", "allow", 0))
	require.NoError(t, db.Flush(context.Background()))
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		require.NoError(t, err, p)
		require.Equal(t, fs.FileMode(0o600), st.Mode().Perm(), p)
	}
	require.NoError(t, db.Close())

	// Files an older version left readable by everyone are made private on open.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if _, err := os.Stat(p); err == nil {
			require.NoError(t, os.Chmod(p, 0o644))
		}
	}
	db, err = Open(context.Background(), path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if st, err := os.Stat(p); err == nil {
			require.Equal(t, fs.FileMode(0o600), st.Mode().Perm(), p)
		}
	}
}

// TestTightenModesNeverAddsWrite: a database file made read-only for everyone loses the
// group's and others' bits but does not get the owner's write bit back, so a guardian
// refuses it as docs/replicas.md says instead of quietly writing to it.
func TestTightenModesNeverAddsWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.db")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	require.NoError(t, os.Chmod(path, 0o444))
	require.NoError(t, tightenModes(path))
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o400), st.Mode().Perm())
}

func TestOpenRefusesAMissingDatabaseItsJournalRemembers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	save(t, db, step("s", "allow", 0))
	require.NoError(t, db.Close())

	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		_ = os.Remove(p)
	}
	_, err = Open(context.Background(), path, Options{})
	require.ErrorIs(t, err, ErrDatabaseMissing)
	require.Contains(t, err.Error(), "steplog")
	_, statErr := os.Stat(path)
	require.True(t, errors.Is(statErr, fs.ErrNotExist), "no empty database was created")

	// Removing the journal is how an operator starts over on purpose.
	for _, p := range JournalPaths(path) {
		require.NoError(t, os.Remove(p))
	}
	db, err = Open(context.Background(), path, Options{})
	require.NoError(t, err)
	require.NoError(t, db.Close())
}

func TestDeletedDatabaseIsDetectedAndWrittenBack(t *testing.T) {
	cases := []struct {
		name    string
		replace bool
	}{
		{name: "deleted"},
		{name: "replaced", replace: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "vigil.db")
			logs := &syncbuf.Buffer{}
			db, err := Open(context.Background(), path, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
			require.NoError(t, err)
			for range 20 {
				save(t, db, step("s", "allow", 0))
			}
			require.NoError(t, db.Flush(context.Background()))
			require.False(t, db.FileLost())

			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				require.NoError(t, os.Remove(p))
			}
			if tc.replace {
				require.NoError(t, os.WriteFile(path, nil, 0o600))
			}
			require.True(t, db.FileLost())
			// The watcher logs it loudly (one check now rather than wait for the ticker).
			db.checkFile(time.Now())
			require.Contains(t, logs.String(), "while Vigil is serving")

			// Steps saved after the loss are kept too.
			save(t, db, step("s", "deny", 0))
			require.NoError(t, db.Close())
			require.Contains(t, logs.String(), "written back")

			dest := path
			if tc.replace {
				m, err := filepath.Glob(path + ".recovered-*")
				require.NoError(t, err)
				require.Len(t, m, 1)
				dest = m[0]
			}
			st, err := os.Stat(dest)
			require.NoError(t, err)
			require.Equal(t, fs.FileMode(0o600), st.Mode().Perm())
			if tc.replace {
				// The file put in its place is not touched; the data is beside it.
				require.NoError(t, os.Remove(path))
				require.NoError(t, os.Rename(dest, path))
			}
			db, err = Open(context.Background(), path, Options{})
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			page, err := db.Steps(context.Background(), record.StepQuery{SessionID: "s", Limit: 100})
			require.NoError(t, err)
			require.Len(t, page, 21)
		})
	}
}

// FindDatabaseFile sees the database and the files beside it through any spelling: another
// path, symbolic and hard links, a linked directory, and for files not created yet a path.
func TestFindDatabaseFile(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "vigil.db")
	require.NoError(t, os.Mkdir(filepath.Dir(db), 0o700))
	require.NoError(t, os.WriteFile(db, []byte("db"), 0o600))
	require.NoError(t, os.WriteFile(db+"-wal", nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.db"), nil, 0o600))
	require.NoError(t, os.Symlink(db, filepath.Join(dir, "link.db")))
	require.NoError(t, os.Link(db, filepath.Join(dir, "hard.db")))
	require.NoError(t, os.Symlink(filepath.Dir(db), filepath.Join(dir, "linkdir")))
	require.NoError(t, os.Symlink("data/vigil.db-journal", filepath.Join(dir, "dangling")))

	tests := []struct {
		name, p, want string
	}{
		{"itself", db, db},
		{"another spelling", filepath.Join(dir, "data", "..", "data", "vigil.db"), db},
		{"symbolic link", filepath.Join(dir, "link.db"), db},
		{"hard link", filepath.Join(dir, "hard.db"), db},
		{"through a linked directory", filepath.Join(dir, "linkdir", "vigil.db"), db},
		{"WAL", db + "-wal", db + "-wal"},
		{"rollback journal not created yet", filepath.Join(dir, "linkdir", "vigil.db-journal"), db + "-journal"},
		{"link to a file not created yet", filepath.Join(dir, "dangling"), db + "-journal"},
		{"step journal", JournalPaths(db)[1], JournalPaths(db)[1]},
		{"lock file", LockPath(db), LockPath(db)},
		{"another file", filepath.Join(dir, "other.db"), ""},
		{"a new file", filepath.Join(dir, "new.jsonl"), ""},
		{"the directory", filepath.Dir(db), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FindDatabaseFile(db, tc.p)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestResolvePath(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "real"), 0o700))
	require.NoError(t, os.Symlink("real", filepath.Join(dir, "linkdir")))
	require.NoError(t, os.Symlink("linkdir/b", filepath.Join(dir, "a")))
	require.NoError(t, os.Symlink("loop2", filepath.Join(dir, "loop1")))
	require.NoError(t, os.Symlink("loop1", filepath.Join(dir, "loop2")))

	got, err := ResolvePath(filepath.Join(dir, "a"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "real", "b"), got, "a link to a file that does not exist leads to it")
	got, err = ResolvePath(filepath.Join(dir, "missing", "..", "linkdir", "x"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "real", "x"), got)
	got, err = ResolvePath(filepath.Join(dir, "nodir", "x"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "nodir", "x"), got, "directories that do not exist are kept")
	_, err = ResolvePath(filepath.Join(dir, "loop1"))
	require.ErrorContains(t, err, "symbolic links")
}
