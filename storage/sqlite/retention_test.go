package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"

	_ "modernc.org/sqlite"
)

// Steps older than MaxAge go with their events; newer steps, the audit log, holds and the
// rows of sessions that must stay (paused, blocked, pending hold, steps left) remain.
func TestPruneByAge(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	now := t0.Add(48 * time.Hour)

	// "old" has only old steps: its row goes. "mixed" keeps its newest step and its
	// lifetime summary. "blocked" and "held" have only old steps but must keep their rows.
	for i := range 3 {
		save(t, db, step("old", "allow", time.Duration(i)*time.Second))
		save(t, db, step("mixed", "deny", time.Duration(i)*time.Second))
		save(t, db, step("blocked", "allow", time.Duration(i)*time.Second))
		save(t, db, step("held", "allow", time.Duration(i)*time.Second))
	}
	kept := save(t, db, step("mixed", "allow", 47*time.Hour))
	_, err := db.SetSessionControl(ctx, record.SessionControl{SessionID: "blocked", Control: record.ControlBlock, Operator: "ann"},
		&record.AuditEntry{Type: record.AuditSessionBlock, Operator: "ann", SessionID: "blocked"})
	require.NoError(t, err)
	_, err = db.CreateHold(ctx, newTestHold("h1", "held", 0), &record.AuditEntry{Type: record.AuditHoldCreated, SessionID: "held", HoldID: "h1"})
	require.NoError(t, err)
	auditBefore := countRows(t, db, "audit")
	eventsBefore := countRows(t, db, "events")

	res, err := db.Prune(ctx, now, record.Retention{MaxAge: 24 * time.Hour, BatchSize: 5})
	require.NoError(t, err)
	require.EqualValues(t, 12, res.Steps)
	require.EqualValues(t, 1, res.Sessions, "only the session with nothing else to keep")
	require.Equal(t, 3, res.Batches, "12 steps in batches of at most 5")

	require.Equal(t, 1, countRows(t, db, "steps"))
	require.Equal(t, eventsBefore-12, countRows(t, db, "events"), "step events go, the others stay")
	require.Equal(t, auditBefore, countRows(t, db, "audit"))
	require.Equal(t, 1, countRows(t, db, "holds"))
	_, err = db.Step(ctx, kept.Seq)
	require.NoError(t, err)

	_, err = db.Session(ctx, "old")
	require.ErrorIs(t, err, record.ErrNotFound)
	mixed, err := db.Session(ctx, "mixed")
	require.NoError(t, err)
	require.EqualValues(t, 4, mixed.Steps, "the summary covers the session's whole life")
	require.Equal(t, map[string]int64{"deny": 3, "allow": 1}, mixed.Decisions)
	blocked, err := db.Session(ctx, "blocked")
	require.NoError(t, err)
	require.Equal(t, record.ControlBlocked, blocked.Control)
	held, err := db.Session(ctx, "held")
	require.NoError(t, err)
	require.EqualValues(t, 1, held.PendingHolds)
	controls, err := db.SessionControls(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"blocked": record.ControlBlocked}, controls)

	// The live log skips the pruned seqs; what is left still replays.
	for _, ev := range storedEvents(t, db, 0) {
		if ev.Type == record.EventStep {
			require.Equal(t, kept.Seq, ev.Seq)
		}
	}

	// A second pass finds nothing, and a new step of a pruned session starts a new row.
	res, err = db.Prune(ctx, now, record.Retention{MaxAge: 24 * time.Hour})
	require.NoError(t, err)
	require.Zero(t, res.Steps)
	require.Zero(t, res.Batches)
	save(t, db, step("old", "allow", 47*time.Hour+time.Minute))
	old, err := db.Session(ctx, "old")
	require.NoError(t, err)
	require.EqualValues(t, 1, old.Steps)
}

func TestPruneDisabledDeletesNothing(t *testing.T) {
	db := openTest(t)
	save(t, db, step("s", "allow", 0))
	res, err := db.Prune(context.Background(), t0.Add(1000*time.Hour), record.Retention{})
	require.NoError(t, err)
	require.Zero(t, res.Steps)
	require.Equal(t, 1, countRows(t, db, "steps"))
	require.False(t, record.Retention{Interval: time.Second}.Enabled())
}

// Above MaxBytes the oldest steps go until the used size is under nine tenths of it.
func TestPruneBySize(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	const total = 6000 // enough steps that they, not the empty tables' pages, fill the file
	bulkSteps(t, db, "big", "search", total)
	before, err := db.UsedBytes(ctx)
	require.NoError(t, err)
	limit := before / 2

	res, err := db.Prune(ctx, t0, record.Retention{MaxBytes: limit, BatchSize: 250})
	require.NoError(t, err)
	require.Equal(t, before, res.UsedBefore)
	require.LessOrEqual(t, res.UsedAfter, limit/10*9)
	require.Greater(t, res.Steps, int64(1000))
	require.Greater(t, res.Batches, 1)
	used, err := db.UsedBytes(ctx)
	require.NoError(t, err)
	require.Equal(t, res.UsedAfter, used)

	// The oldest went: what is left is one contiguous run up to the newest step.
	var lo, hi, n int64
	require.NoError(t, db.Reader().QueryRow(`SELECT min(seq), max(seq), count(*) FROM steps`).Scan(&lo, &hi, &n))
	require.Equal(t, int64(total), hi)
	require.Equal(t, hi-lo+1, n)
	require.EqualValues(t, total-res.Steps, n)

	// Under the bound, a pass deletes nothing.
	res, err = db.Prune(ctx, t0, record.Retention{MaxBytes: limit})
	require.NoError(t, err)
	require.Zero(t, res.Steps)
}

// When only non-step data is left over the bound, the pass stops instead of looping.
func TestPruneBySizeStopsWhenNoStepsLeft(t *testing.T) {
	db := openTest(t)
	bulkSteps(t, db, "s", "", 100)
	res, err := db.Prune(context.Background(), t0, record.Retention{MaxBytes: 1})
	require.NoError(t, err)
	require.EqualValues(t, 100, res.Steps)
	require.Zero(t, countRows(t, db, "steps"))
}

// A database created with auto_vacuum=INCREMENTAL gives the pruned pages back to the file
// system; the file shrinks.
func TestPruneIncrementalVacuumShrinksFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	_, err = raw.Exec(`PRAGMA auto_vacuum = INCREMENTAL`)
	require.NoError(t, err)
	_, err = raw.Exec(`PRAGMA journal_mode = WAL`)
	require.NoError(t, err)
	require.NoError(t, raw.Close())

	db, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	bulkSteps(t, db, "s", "search", 4000)
	checkpoint(t, db)
	sizeBefore := fileSize(t, path)

	res, err := db.Prune(ctx, t0.Add(time.Hour), record.Retention{MaxAge: time.Minute})
	require.NoError(t, err)
	require.EqualValues(t, 4000, res.Steps)
	require.Positive(t, res.VacuumedPages)
	var free int64
	require.NoError(t, db.Reader().QueryRow(`PRAGMA freelist_count`).Scan(&free))
	require.Zero(t, free)
	checkpoint(t, db)
	require.Less(t, fileSize(t, path), sizeBefore/2)
}

// With the default auto_vacuum (none) the file keeps its size and the freed pages are
// reused by new steps: the used size, not the file, reflects the data.
func TestPruneWithoutAutoVacuumReusesPages(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	bulkSteps(t, db, "s", "search", 2000)
	full, err := db.UsedBytes(ctx)
	require.NoError(t, err)
	checkpoint(t, db)
	size := fileSize(t, db.Path())

	res, err := db.Prune(ctx, t0.Add(time.Hour), record.Retention{MaxAge: time.Minute})
	require.NoError(t, err)
	require.Zero(t, res.VacuumedPages)
	require.Less(t, res.UsedAfter, full)
	var free int64
	require.NoError(t, db.Reader().QueryRow(`PRAGMA freelist_count`).Scan(&free))
	require.Positive(t, free)
	checkpoint(t, db)
	require.Equal(t, size, fileSize(t, db.Path()), "the file keeps its pages")

	bulkSteps(t, db, "s", "search", 1000)
	checkpoint(t, db)
	require.Equal(t, size, fileSize(t, db.Path()), "new steps fill the freed pages")
}

// Pruning goes through the writer in small batches: agents' steps saved meanwhile commit
// between the batches, long before the pass ends, and none is lost or pruned by mistake.
func TestPruneInterleavesWithWrites(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	bulkSteps(t, db, "old", "search", 300)

	pruned := make(chan record.PruneResult, 1)
	go func() {
		res, err := db.Prune(ctx, t0.Add(time.Hour), record.Retention{MaxAge: time.Minute, BatchSize: 1})
		if err != nil {
			t.Error(err)
		}
		pruned <- res
	}()
	require.Eventually(t, func() bool { return countRows(t, db, "steps") < 300 }, 10*time.Second, time.Millisecond)

	// New steps are received now, so the age bound keeps them.
	fresh := saveMany(t, db, 20, func(i int) *record.StepRecord {
		return step(fmt.Sprint("new", i%4), "allow", time.Hour+time.Duration(i))
	})
	select {
	case <-pruned:
		t.Fatal("the prune pass finished before the agents' writes: they waited for it")
	default:
	}
	res := <-pruned
	require.EqualValues(t, 300, res.Steps)
	require.Equal(t, 300, res.Batches)
	require.Equal(t, len(fresh), countRows(t, db, "steps"))
	for _, rec := range fresh {
		_, err := db.Step(ctx, rec.Seq)
		require.NoError(t, err)
	}
}

func TestPruneStopsOnCancel(t *testing.T) {
	db := openTest(t)
	bulkSteps(t, db, "s", "", 100)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := db.Prune(ctx, t0.Add(time.Hour), record.Retention{MaxAge: time.Minute})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 100, countRows(t, db, "steps"))
}

// RunRetention prunes at once and then every interval, and returns when its context ends.
func TestRunRetention(t *testing.T) {
	db := openTest(t)
	// Received long ago relative to the wall clock RunRetention uses.
	save(t, db, step("s", "allow", 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.RunRetention(ctx, record.Retention{MaxAge: time.Hour, Interval: 10 * time.Millisecond}, slog.New(slog.DiscardHandler))
	}()
	require.Eventually(t, func() bool { return countRows(t, db, "steps") == 0 }, 10*time.Second, time.Millisecond)
	// A step that arrives later goes on a later pass.
	save(t, db, step("s", "allow", time.Second))
	require.Eventually(t, func() bool { return countRows(t, db, "steps") == 0 }, 10*time.Second, time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RunRetention did not return after cancel")
	}
}

func TestRunRetentionReturnsWhenDisabledOrClosed(t *testing.T) {
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), Options{})
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)

	var wg sync.WaitGroup
	wg.Go(func() { db.RunRetention(context.Background(), record.Retention{}, log) })
	wg.Wait()

	require.NoError(t, db.Close())
	wg.Go(func() {
		db.RunRetention(context.Background(), record.Retention{MaxAge: time.Hour, Interval: time.Millisecond}, log)
	})
	wg.Wait()
}

func checkpoint(t *testing.T, db *DB) {
	t.Helper()
	var busy, frames, copied int
	require.NoError(t, db.ckpt.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &copied))
	require.Zero(t, busy)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// BenchmarkPruneBatch measures one default-size batch (500 steps of about 1.5 KB in 64
// sessions) on the writer: how long the agents' writes queued behind it may wait.
//
//	go test -run '^$' -bench PruneBatch ./storage/
func BenchmarkPruneBatch(b *testing.B) {
	ctx := context.Background()
	db := openTest(b)
	fill := func(n int64) {
		recs := make([]*record.StepRecord, n)
		for i := range recs {
			recs[i] = benchStep(int64(i))
			recs[i].ReceivedAt = t0
		}
		saveMany(b, db, int(n), func(i int) *record.StepRecord { return recs[i] })
	}
	var res record.PruneResult
	for b.Loop() {
		b.StopTimer()
		fill(record.DefaultPruneBatch)
		b.StartTimer()
		n, err := db.pruneBatch(ctx, t0.Add(time.Second).UnixNano(), record.DefaultPruneBatch, &res)
		require.NoError(b, err)
		require.Equal(b, record.DefaultPruneBatch, n)
	}
}
