package sqlite

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// Two processes must not run one database the same way: each would replay and empty the
// other's step journal and hand out the same seqs (answered steps lost). The lock is per
// open file description, so a second Open in this process stands in for a second process.
func TestSecondOpenIsRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	a, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err)
	_, err = Open(ctx, path, Options{ManualIndex: true})
	require.ErrorIs(t, err, ErrInUse)
	require.ErrorContains(t, err, "process "+strconv.Itoa(os.Getpid()))
	require.NoError(t, a.Close())

	b, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err, "closing releases the lock")
	require.NoError(t, b.Close())
}

// The keys and users commands write beside a running guardian: their audit entries wait
// for the guardian, which stores them after the steps it has journaled, and its journal is
// left as it was.
func TestBesideWritesLeaveTheHoldersStepsAlone(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	holder, err := Open(ctx, path, Options{ManualIndex: true, IngestDelay: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, holder.Close()) })
	var last int64
	for i := range 50 {
		last = save(t, holder, step("s1", "allow", time.Duration(i)*time.Millisecond)).Seq
	}
	journal := func() (n int64) {
		for _, p := range JournalPaths(path) {
			st, err := os.Stat(p)
			require.NoError(t, err)
			n += st.Size()
		}
		return n
	}
	before := journal()
	require.Positive(t, before, "the steps wait in the journal")

	beside, err := Open(ctx, path, Options{Beside: true, Readers: 1})
	require.NoError(t, err)
	k := &record.APIKey{ID: "key_1", Name: "bot", Hash: keyHash("one"), Prefix: "vgl_abcd", CreatedAt: t0}
	_, err = beside.CreateAPIKey(ctx, k, &record.AuditEntry{Type: record.AuditKeyCreated, Operator: "root",
		Detail: json.RawMessage(`{"keyId":"key_1"}`)})
	require.NoError(t, err)
	keys, err := beside.APIKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.NoError(t, beside.Close())
	require.Equal(t, before, journal(), "the holder's journal is untouched")

	n, err := holder.StoreOutbox(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, holder.Flush(ctx))
	require.Equal(t, 50, countRows(t, holder, "steps"), "every journaled step is stored")
	entries, err := holder.ListAudit(ctx, record.AuditQuery{Type: record.AuditKeyCreated})
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "root", entries[0].Operator)
	require.Greater(t, entries[0].Seq, last, "its seq comes after the journaled steps'")
	require.Equal(t, 0, countRows(t, holder, "audit_outbox"))
	n, err = holder.StoreOutbox(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = os.Stat(path + "-rejected.jsonl")
	require.ErrorIs(t, err, os.ErrNotExist, "no step was refused")
}

// A path that is not a database is refused before anything changes it.
func TestNotADatabaseIsLeftAlone(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("my notes\n"), 0o644))
	sub := filepath.Join(dir, "data")
	require.NoError(t, os.Mkdir(sub, 0o755))
	for _, tc := range []struct{ path, want string }{
		{notes, "is not a SQLite database"},
		{sub, "is a directory, not a database file"},
	} {
		before, err := os.Stat(tc.path)
		require.NoError(t, err)
		_, err = Open(context.Background(), tc.path, Options{})
		require.ErrorContains(t, err, tc.want)
		after, err := os.Stat(tc.path)
		require.NoError(t, err)
		require.Equal(t, before.Mode(), after.Mode(), "its mode is unchanged")
		_, err = os.Stat(JournalPaths(tc.path)[0])
		require.ErrorIs(t, err, os.ErrNotExist, "no journal was made beside it")
	}
}

// Two names for one file find the same lock: a symbolic link to the database (or to its
// directory) is the database.
func TestALinkToTheDatabaseIsTheDatabase(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "vigil.db")
	a, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	link := filepath.Join(dir, "link.db")
	require.NoError(t, os.Symlink("vigil.db", link))
	_, err = Open(ctx, link, Options{ManualIndex: true})
	require.ErrorIs(t, err, ErrInUse)
	_, err = os.Stat(LockPath(link))
	require.ErrorIs(t, err, os.ErrNotExist, "no lock or journal beside the link")

	// The export's check of its destination knows the companions of the file behind --db.
	file, err := FindDatabaseFile(link, path+"-wal")
	require.NoError(t, err)
	require.Equal(t, link+"-wal", file, "named as the caller spelled the database")
}
