package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	// A missing parent directory is created; odd characters must survive the file: URI.
	path := filepath.Join(t.TempDir(), "nested dir", "a?b#c%d", "vigil.db")
	db, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	rec := save(t, db, step("s1", "deny", 0))
	ev := &record.Event{Type: "audit", SessionID: "s1", Payload: json.RawMessage(`{"note":"x"}`)}
	require.NoError(t, db.AppendEvent(ctx, ev))
	require.NoError(t, db.Close())

	_, err = os.Stat(path)
	require.NoError(t, err)
	// Close checkpoints: the WAL is empty (or gone) once the database is closed.
	if fi, err := os.Stat(path + "-wal"); err == nil {
		require.Zero(t, fi.Size())
	}

	db, err = Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	got, err := db.Step(ctx, rec.Seq)
	require.NoError(t, err)
	require.Equal(t, *rec, got)
	s, err := db.Session(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, int64(1), s.Steps)

	// The sequence continues after the restart.
	next := save(t, db, step("s1", "allow", 1))
	require.Greater(t, next.Seq, ev.Seq)
}

func TestWritesAfterCloseFail(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), Options{})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, db.Close(), "Close is idempotent")

	require.ErrorIs(t, db.SaveStep(ctx, step("s", "allow", 0)), ErrClosed)
	require.ErrorIs(t, db.AppendEvent(ctx, &record.Event{Type: "audit"}), ErrClosed)
	require.ErrorIs(t, db.Exec(ctx, func(*sql.Tx) error { return nil }), ErrClosed)
	_, err = db.Step(ctx, 1)
	require.Error(t, err, "reads fail too, without panicking")
}

func TestReaderIsReadOnly(t *testing.T) {
	db := openTest(t)
	_, err := db.Reader().Exec(`INSERT INTO events (type, at) VALUES ('x', 0)`)
	require.Error(t, err)
	require.Zero(t, countRows(t, db, "events"))
}

func TestOpenRejectsEmptyPath(t *testing.T) {
	_, err := Open(context.Background(), "", Options{})
	require.Error(t, err)
}

// A new database gets Vigil's page size; one created elsewhere keeps its own and works.
func TestPageSize(t *testing.T) {
	ctx := context.Background()
	pageSizeOf := func(db *DB) int {
		var n int
		require.NoError(t, db.Reader().QueryRow(`PRAGMA page_size`).Scan(&n))
		return n
	}
	db := openTest(t)
	require.Equal(t, pageSize, pageSizeOf(db))

	path := filepath.Join(t.TempDir(), "old.db")
	raw, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = raw.Exec(`PRAGMA page_size = 4096; CREATE TABLE x (a)`)
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	old, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, old.Close()) }()
	require.Equal(t, 4096, pageSizeOf(old))
	save(t, old, step("s", "allow", 0))
	require.Equal(t, 1, countRows(t, old, "steps"))
}

func TestIngestStatsCountsTheJournal(t *testing.T) {
	// An ingestion delay longer than the test keeps the step in the journal until Flush.
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), Options{ManualIndex: true, IngestDelay: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.Zero(t, db.IngestStats().JournalBytes)
	save(t, db, step("s1", "allow", 0))
	st := db.IngestStats()
	require.Positive(t, st.JournalBytes)
	require.EqualValues(t, 1, st.PendingSteps)
	require.Positive(t, st.PendingBytes)
	require.NoError(t, db.Flush(context.Background()))
	st = db.IngestStats()
	require.Zero(t, st.PendingSteps)
	require.Zero(t, st.JournalBytes, "an ingested journal is emptied")
}
