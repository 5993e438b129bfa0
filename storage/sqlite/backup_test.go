package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A backup taken while agents keep writing is a consistent copy: it opens as a Vigil
// database, passes the integrity check, and holds every step committed before it started,
// each session's summary agreeing with the steps it has.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	before := saveMany(t, db, 50, func(i int) *record.StepRecord { return step(fmt.Sprint("s", i%5), "allow", time.Duration(i)) })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var written atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := db.SaveStep(ctx, step(fmt.Sprint("w", g), "deny", time.Duration(i))); err != nil {
					t.Error(err)
					return
				}
				written.Add(1)
			}
		})
	}
	require.Eventually(t, func() bool { return written.Load() > 20 }, 10*time.Second, time.Millisecond)

	dest := filepath.Join(t.TempDir(), "copy.db")
	res, err := Backup(ctx, db.Path(), dest, false)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	require.Equal(t, dest, res.Path)
	require.Equal(t, fileSize(t, dest), res.Bytes)
	require.NoError(t, IntegrityCheck(ctx, dest))
	require.NoFileExists(t, dest+"-wal", "the copy is self-contained")

	cp, err := Open(ctx, dest, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, cp.Close()) }()
	for _, rec := range before {
		_, err := cp.Step(ctx, rec.Seq)
		require.NoError(t, err)
	}
	var mismatched int
	require.NoError(t, cp.Reader().QueryRow(`SELECT count(*) FROM sessions s
		WHERE s.steps <> (SELECT count(*) FROM steps WHERE session_id = s.id)`).Scan(&mismatched))
	require.Zero(t, mismatched, "one snapshot: every session summary matches its steps")
	var maxSeq, maxEvent int64
	require.NoError(t, cp.Reader().QueryRow(`SELECT max(seq) FROM steps`).Scan(&maxSeq))
	require.NoError(t, cp.Reader().QueryRow(`SELECT max(seq) FROM events`).Scan(&maxEvent))
	require.Equal(t, maxEvent, maxSeq)
}

func TestBackupRefusesToOverwrite(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	save(t, db, step("s", "allow", 0))
	dest := filepath.Join(t.TempDir(), "copy.db")
	require.NoError(t, os.WriteFile(dest, []byte("precious"), 0o600))

	_, err := Backup(ctx, db.Path(), dest, false)
	require.ErrorIs(t, err, ErrBackupExists)
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	require.Equal(t, "precious", string(got))

	_, err = Backup(ctx, db.Path(), dest, true)
	require.NoError(t, err)
	require.NoError(t, IntegrityCheck(ctx, dest))
	entries, err := os.ReadDir(filepath.Dir(dest))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left behind")

	_, err = Backup(ctx, db.Path(), db.Path(), true)
	require.ErrorContains(t, err, "is the database itself")
}

func TestBackupFailsCleanly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dest := filepath.Join(dir, "out", "copy.db")

	_, err := Backup(ctx, filepath.Join(dir, "missing.db"), filepath.Join(dir, "copy.db"), false)
	require.Error(t, err)
	require.NoFileExists(t, filepath.Join(dir, "missing.db"))

	db := openTest(t)
	_, err = Backup(ctx, db.Path(), dest, false)
	require.Error(t, err, "the destination directory does not exist")
	require.NoDirExists(t, filepath.Dir(dest))
}

// A destination no copy can go to is refused before anything is read or written, even with
// overwrite: the database and its files however spelled (replacing one with a copy of the
// database would damage it), directories, a missing directory (and files that are not
// regular files: backup_unix_test.go).
func TestBackupRefusesBadDestinations(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	save(t, db, step("s", "allow", 0))
	require.NoError(t, db.Flush(ctx))
	dir := filepath.Dir(db.Path())
	require.NoError(t, os.Symlink(db.Path(), filepath.Join(dir, "link.db")))
	require.NoError(t, os.Link(db.Path(), filepath.Join(dir, "hard.db")))
	require.NoError(t, os.Symlink(dir, filepath.Join(dir, "linkdir")))
	before, err := os.ReadDir(dir)
	require.NoError(t, err)

	tests := []struct {
		name, dest, msg string
	}{
		{"empty", "", "empty path"},
		{"itself", db.Path(), "is the database itself"},
		{"another spelling", filepath.Join(dir, "..", filepath.Base(dir), "vigil.db"), "is the database itself"},
		{"symbolic link", filepath.Join(dir, "link.db"), "is the database itself"},
		{"hard link", filepath.Join(dir, "hard.db"), "is the database itself"},
		{"through a linked directory", filepath.Join(dir, "linkdir", "vigil.db"), "is the database itself"},
		{"WAL", db.Path() + "-wal", "belongs to the database"},
		{"rollback journal", db.Path() + "-journal", "belongs to the database"},
		{"step journal", JournalPaths(db.Path())[0], "belongs to the database"},
		{"directory", dir, "is a directory"},
		{"missing directory", filepath.Join(dir, "none", "copy.db"), "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Backup(ctx, db.Path(), tc.dest, true)
			var de *DestinationError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.dest, de.Dest)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	after, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing written, nothing replaced")
	require.NoError(t, IntegrityCheck(ctx, db.Path()))
	_, err = db.Step(ctx, 1)
	require.NoError(t, err)
}

// A backup that fails once the copy is written (a full disk, an I/O error) leaves nothing
// behind: Backup removes its copy with removeCopy, which takes the files SQLite keeps
// beside a copy while writing it too (what a failed write leaves, made here by hand: a test
// cannot make SQLite fail a write on purpose).
func TestFailedCopyLeavesNothing(t *testing.T) {
	out := t.TempDir()
	tmp := filepath.Join(out, ".copy.db.123.tmp")
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		require.NoError(t, os.WriteFile(tmp+suffix, []byte("partial"), 0o600))
	}
	removeCopy(tmp)
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	require.Empty(t, left, "left behind: %s", strings.Join(left, ", "))
}

// IntegrityCheck reports a damaged file.
func TestIntegrityCheckFindsCorruption(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "bad.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	_, err = raw.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT);
		CREATE INDEX t_v ON t (v);
		WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 2000)
		INSERT INTO t (v) SELECT printf('value %d', i) FROM k;`)
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	require.NoError(t, IntegrityCheck(ctx, path))

	// Overwrite the middle of the file (index and table pages) with junk.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	st, err := f.Stat()
	require.NoError(t, err)
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = byte(i*7 + 3)
	}
	_, err = f.WriteAt(junk, st.Size()/2/4096*4096)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	require.Error(t, IntegrityCheck(ctx, path))
	require.Error(t, IntegrityCheck(ctx, filepath.Join(t.TempDir(), "missing.db")))
}
