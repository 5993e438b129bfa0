package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-guardian/vigil/record"
)

// writeJournal writes recs to the first journal file of the database at path, as a crash
// leaves them: answered, not stored yet.
func writeJournal(t *testing.T, path string, recs ...*record.StepRecord) {
	t.Helper()
	var journal []byte
	for _, rec := range recs {
		payload := rec.AppendJSON(nil)
		journal = appendRecordHeader(journal, payload)
		journal = append(journal, payload...)
	}
	require.NoError(t, os.WriteFile(JournalPaths(path)[0], journal, 0o600))
}

// vigil backup reads a database without migrating it, so a database an older Vigil wrote
// (before summary_mark, whose summaries are written with their steps) is copied as it is:
// the copy before an upgrade, or beside an older guardian still running with steps in its
// journal.
func TestBackupOfDatabaseBeforeSummaryMark(t *testing.T) {
	for _, journaled := range []bool{false, true} {
		t.Run(fmt.Sprint("journaled=", journaled), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, "vigil.db")
			db, err := Open(ctx, path, Options{ManualIndex: true})
			require.NoError(t, err)
			stored := save(t, db, step("s", "allow", 0))
			require.NoError(t, db.Close())

			// The schema as the version before migration 013 left it.
			raw, err := sql.Open("sqlite", fileURI(path, nil))
			require.NoError(t, err)
			var version int
			require.NoError(t, raw.QueryRow("PRAGMA user_version").Scan(&version))
			for _, q := range []string{"DROP TABLE summary_mark", fmt.Sprintf("PRAGMA user_version = %d", version-1)} {
				_, err := raw.Exec(q)
				require.NoError(t, err, q)
			}
			require.NoError(t, raw.Close())
			want := int64(1)
			if journaled {
				next := step("s", "deny", time.Second)
				next.Seq = stored.Seq + 1
				writeJournal(t, path, next)
				want = 2
			}

			dest := filepath.Join(dir, "copy.db")
			_, err = Backup(ctx, path, dest, false)
			require.NoError(t, err)
			cp, err := Open(ctx, dest, Options{ManualIndex: true})
			require.NoError(t, err)
			defer func() { require.NoError(t, cp.Close()) }()
			require.Equal(t, want, storedRows(t, cp)["s"].Steps)
		})
	}
}

// Steps a crash left in the journal are stored at the next start with their summaries
// owed: those are written once the delay has passed, as any others, without waiting for
// something else to wake the writer.
func TestSummariesOwedByReplayAreWrittenAfterDelay(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{ManualIndex: true})
	require.NoError(t, err)
	stored := save(t, db, step("s", "allow", 0))
	require.NoError(t, db.Close())
	next := step("s", "deny", time.Second)
	next.Seq = stored.Seq + 1
	writeJournal(t, path, next)

	db, err = Open(ctx, path, Options{ManualIndex: true, SummaryDelay: 50 * time.Millisecond})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.Eventually(t, func() bool { return storedRows(t, db)["s"].Steps == 2 }, 5*time.Second, 10*time.Millisecond,
		"the replayed step's summary is written once due")
	require.Zero(t, db.owed.n.Load())
}

// Session, read while the writer writes the rows it reads and adds to what is owed, counts
// every step saved before it, exactly once: a session's goroutine saves a step and reads
// its session back, with rows due almost at once so that writes and reads cross.
func TestSessionWhileSummariesAreWritten(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), Options{
		ManualIndex: true, SummaryDelay: time.Millisecond, IngestDelay: time.Millisecond})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 6 {
		wg.Go(func() {
			id := fmt.Sprint("s", g)
			var steps []*record.StepRecord
			for i := range 60 {
				rec := step(id, []string{"allow", "deny"}[i%2], time.Duration(i)*time.Second)
				if err := db.SaveStep(ctx, rec); err != nil {
					errs <- err
					return
				}
				steps = append(steps, rec)
				if g%2 == 0 && i%7 == 0 {
					// Steps stored, their summaries owed.
					if _, err := db.Step(ctx, rec.Seq); err != nil {
						errs <- err
						return
					}
				}
				got, err := db.Session(ctx, id)
				if err != nil {
					errs <- err
					return
				}
				if want := summaryOf(steps); !sessionsEqual(want, got) {
					errs <- fmt.Errorf("session %s after %d steps: got %+v, want %+v", id, len(steps), got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func sessionsEqual(a, b record.Session) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}
