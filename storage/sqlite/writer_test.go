package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-guardian/vigil/internal/syncbuf"

	"github.com/stretchr/testify/require"
	"github.com/vigil-guardian/vigil/record"
	"modernc.org/sqlite"
)

func TestGroupCommitConcurrentWriters(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	const writers, perWriter = 64, 8

	var (
		mu   sync.Mutex
		seqs []int64
		wg   sync.WaitGroup
	)
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			sid := fmt.Sprint("w", w)
			last := int64(0)
			for i := range perWriter {
				rec := step(sid, []string{"allow", "deny"}[i%2], time.Duration(i))
				if err := db.SaveStep(ctx, rec); err != nil {
					errs <- err
					return
				}
				// One writer's steps commit in the order it sent them.
				if rec.Seq <= last {
					errs <- fmt.Errorf("writer %d: seq %d after %d", w, rec.Seq, last)
					return
				}
				last = rec.Seq
				mu.Lock()
				seqs = append(seqs, rec.Seq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	require.Len(t, seqs, writers*perWriter)
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i := 1; i < len(seqs); i++ {
		require.Equal(t, seqs[i-1]+1, seqs[i], "seqs unique and without gaps")
	}
	require.Equal(t, writers*perWriter, countRows(t, db, "steps"))
	require.Equal(t, writers*perWriter, countRows(t, db, "events"))
	for w := range writers {
		s, err := db.Session(ctx, fmt.Sprint("w", w))
		require.NoError(t, err)
		require.Equal(t, int64(perWriter), s.Steps)
		require.Equal(t, map[string]int64{"allow": perWriter / 2, "deny": perWriter / 2}, s.Decisions)
	}
}

// A batch mixes good writes with ones that fail or panic; only the bad ones fail, and
// their partial changes are undone.
func TestFailingOpDoesNotFailItsBatch(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	release := blockWriter(t, db)

	boom := errors.New("boom")
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 16)
	run := func(name string, f func() error) {
		go func() { results <- result{name, f()} }()
	}
	queued := 0
	queue := func(name string, f func() error) {
		run(name, f)
		queued++
		waitQueued(t, db, queued) // fixes the order within the batch
	}

	goodSteps := map[string]*record.StepRecord{}
	for i := range 3 {
		name := fmt.Sprint("good step ", i)
		rec := step(fmt.Sprint("g", i), "allow", 0)
		goodSteps[name] = rec
		queue(name, func() error { return db.SaveStep(ctx, rec) })
		queue(fmt.Sprint("failing exec ", i), func() error {
			return db.Exec(ctx, func(tx *sql.Tx) error {
				// Writes something first: the savepoint must roll it back.
				if _, err := db.NextSeqTx(tx, "audit", "bad", t0, nil); err != nil {
					return err
				}
				return boom
			})
		})
	}
	queue("panicking exec", func() error {
		return db.Exec(ctx, func(tx *sql.Tx) error {
			if _, err := db.NextSeqTx(tx, "audit", "bad", t0, nil); err != nil {
				return err
			}
			panic("bad op")
		})
	})
	queue("sql error", func() error {
		return db.Exec(ctx, func(tx *sql.Tx) error {
			_, err := tx.Exec(`INSERT INTO no_such_table VALUES (1)`)
			return err
		})
	})
	goodEvent := &record.Event{Type: "audit", SessionID: "ok"}
	queue("good event", func() error { return db.AppendEvent(ctx, goodEvent) })

	release()
	for range queued {
		r := <-results
		switch {
		case r.name == "panicking exec":
			require.ErrorContains(t, r.err, "panicked: bad op")
		case r.name == "sql error":
			require.ErrorContains(t, r.err, "no_such_table")
		case goodSteps[r.name] != nil, r.name == "good event":
			require.NoError(t, r.err, r.name)
		default:
			require.ErrorIs(t, r.err, boom, r.name)
		}
	}

	for _, rec := range goodSteps {
		got, err := db.Step(ctx, rec.Seq)
		require.NoError(t, err)
		require.Equal(t, *rec, got)
	}
	var bad int
	require.NoError(t, db.Reader().QueryRow(`SELECT count(*) FROM events WHERE session_id = 'bad'`).Scan(&bad))
	require.Zero(t, bad, "failed ops left no rows")
	require.Equal(t, 4, countRows(t, db, "events"))
}

// An op that ends the transaction itself fails alone: the ops before it in the batch run
// again in a new transaction, those after it run there too.
func TestBrokenTransactionFailsOnlyTheCulprit(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	release := blockWriter(t, db)

	before := step("before", "allow", 0)
	beforeDone := make(chan error, 1)
	go func() { beforeDone <- db.SaveStep(ctx, before) }()
	waitQueued(t, db, 1)
	brokeDone := make(chan error, 1)
	go func() {
		brokeDone <- db.Exec(ctx, func(tx *sql.Tx) error { return tx.Rollback() })
	}()
	waitQueued(t, db, 2)
	after := step("after", "allow", 0)
	afterDone := make(chan error, 1)
	go func() { afterDone <- db.SaveStep(ctx, after) }()
	waitQueued(t, db, 3)
	release()

	require.ErrorIs(t, <-brokeDone, sql.ErrTxDone)
	require.NoError(t, <-beforeDone)
	require.NoError(t, <-afterDone)
	for _, rec := range []*record.StepRecord{before, after} {
		got, err := db.Step(ctx, rec.Seq)
		require.NoError(t, err)
		require.Equal(t, *rec, got)
	}
	require.Equal(t, 2, countRows(t, db, "events"))
}

// A step SQLite refuses was already answered (it is durable in the journal), so it cannot
// fail its caller; it must not keep the steps journaled with it out either. It is set
// aside in the rejected file, and everything else commits.
func TestRefusedStepIsSetAside(t *testing.T) {
	db := openTest(t)
	ctx := context.Background()
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TRIGGER refuse_bad BEFORE INSERT ON steps
			WHEN NEW.session_id = 'bad' BEGIN SELECT RAISE(ABORT, 'bad step refused'); END`)
		return err
	}))
	release := blockWriter(t, db)

	results := make(map[string]chan error)
	queue := func(name string, f func() error) {
		ch := make(chan error, 1)
		results[name] = ch
		go func() { ch <- f() }()
		waitQueued(t, db, len(results))
	}
	good1, good2, bad := step("good", "allow", 0), step("good", "deny", 1), step("bad", "allow", 0)
	var execSeq int64
	queue("good1", func() error { return db.SaveStep(ctx, good1) })
	queue("exec", func() error {
		return db.Exec(ctx, func(tx *sql.Tx) error {
			var err error
			execSeq, err = db.NextSeqTx(tx, "audit", "x", t0, []byte(`{}`))
			return err
		})
	})
	queue("bad", func() error { return db.SaveStep(ctx, bad) })
	queue("good2", func() error { return db.SaveStep(ctx, good2) })
	release()

	for name, ch := range results {
		require.NoError(t, <-ch, name)
	}
	// Released together, the steps and the Exec may take their seqs in any order, but each
	// takes one, and nothing is skipped.
	all := []int64{good1.Seq, bad.Seq, good2.Seq, execSeq}
	slices.Sort(all)
	require.Equal(t, []int64{1, 2, 3, 4}, all)

	events, err := db.EventsAfter(ctx, 0, 100)
	require.NoError(t, err)
	var seqs []int64
	for _, ev := range events {
		seqs = append(seqs, ev.Seq)
		if ev.Seq == bad.Seq {
			// The refused step's seq is kept by a marker, not by a step event.
			require.Equal(t, record.EventStepRejected, ev.Type)
			require.Equal(t, "bad", ev.SessionID)
			require.Contains(t, string(ev.Payload), "bad step refused")
		}
	}
	require.Equal(t, all, seqs, "every seq given is in the log, once")
	s, err := db.Session(ctx, "good")
	require.NoError(t, err)
	require.Equal(t, int64(2), s.Steps)
	_, err = db.Session(ctx, "bad")
	require.ErrorIs(t, err, record.ErrNotFound)

	set, err := os.ReadFile(db.Path() + "-rejected.jsonl")
	require.NoError(t, err)
	var got record.StepRecord
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(set), &got))
	require.Equal(t, bad.Seq, got.Seq)
	require.Equal(t, "bad", got.SessionID)
	require.JSONEq(t, string(bad.Request), string(got.Request))

	// The writer goes on: later steps are stored.
	save(t, db, step("good", "allow", 2))
	require.Equal(t, 3, countRows(t, db, "steps"))
}

// A new seq is max(seq)+1: when the refused step is the newest, the next event must not
// take its seq again (its agent and the live stream already have it).
func TestRefusedNewestStepKeepsItsSeq(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TRIGGER refuse_bad BEFORE INSERT ON steps
			WHEN NEW.session_id = 'bad' BEGIN SELECT RAISE(ABORT, 'bad step refused'); END`)
		return err
	}))
	good, bad := step("good", "allow", 0), step("bad", "allow", 0)
	save(t, db, good)
	save(t, db, bad)
	ev := record.Event{Type: record.EventAudit, Payload: []byte(`{}`)}
	require.NoError(t, db.AppendEvent(ctx, &ev))
	require.Equal(t, []int64{1, 2, 3}, []int64{good.Seq, bad.Seq, ev.Seq})

	// And after a restart, when the next seq is read back from the log.
	require.NoError(t, db.Close())
	db2, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db2.Close() })
	next := step("good", "allow", 1)
	save(t, db2, next)
	require.Equal(t, int64(4), next.Seq)
}

func TestCloseDrainsQueuedWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	release := blockWriter(t, db)

	const n = 50
	results := make(chan error, n)
	for i := range n {
		go func() { results <- db.SaveStep(ctx, step(fmt.Sprint("s", i), "allow", 0)) }()
	}
	waitQueued(t, db, n)
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	// Close must not return while writes are still queued behind the blocked writer.
	require.Eventually(t, func() bool {
		db.mu.RLock()
		defer db.mu.RUnlock()
		return db.closed
	}, 10*time.Second, time.Millisecond)
	select {
	case err := <-closed:
		t.Fatalf("Close returned before the queue drained: %v", err)
	default:
	}
	require.ErrorIs(t, db.SaveStep(ctx, step("late", "allow", 0)), ErrClosed)
	release()
	require.NoError(t, <-closed)
	for range n {
		require.NoError(t, <-results)
	}

	db, err = Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.Equal(t, n, countRows(t, db, "steps"))
}

func TestContextCancellation(t *testing.T) {
	db := openTest(t)
	release := blockWriter(t, db)

	// Already cancelled: nothing is queued.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, db.SaveStep(cancelled, step("never", "allow", 0)), context.Canceled)
	require.Zero(t, len(db.ops))

	// An Exec cancelled while waiting behind the writer returns at once, and since the
	// writer had not started it, it never runs. (A step waits for the journal, not the
	// writer, and is never abandoned half-way: once it has started it is stored.)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ran := false
	go func() {
		done <- db.Exec(ctx, func(*sql.Tx) error {
			ran = true
			return nil
		})
	}()
	waitQueued(t, db, 1)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	// Deadline while waiting.
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	require.ErrorIs(t, db.Exec(dctx, func(*sql.Tx) error { return nil }), context.DeadlineExceeded)

	release()
	// A write queued after them proves the writer moved past them.
	require.NoError(t, db.Exec(context.Background(), func(*sql.Tx) error { return nil }))
	require.False(t, ran, "the cancelled Exec never ran")
}

// After a failed ingestion, a Flush stores both the steps of the failed attempt and the
// steps journaled since: a read that follows sees every answered step.
func TestFlushAfterFailedIngestStoresEverything(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	db, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	// json('x') fails with a plain error, not a constraint: the whole ingestion fails.
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TRIGGER fail_boom BEFORE INSERT ON steps
			WHEN NEW.session_id = 'boom' BEGIN SELECT json('x'); END`)
		return err
	}))
	save(t, db, step("boom", "allow", 0))
	require.Error(t, db.Flush(ctx))
	save(t, db, step("later", "allow", 1))

	other, err := sql.Open("sqlite", dsn(path, 5*time.Second, roleWriter))
	require.NoError(t, err)
	_, err = other.Exec(`DROP TRIGGER fail_boom`)
	require.NoError(t, err)
	require.NoError(t, other.Close())

	require.NoError(t, db.Flush(ctx))
	require.Equal(t, 2, rawCount(t, db, "steps"), "the failed attempt's step and the later one")
}

// A full disk makes SQLite roll back the whole transaction, savepoints included, so undoing
// the failed write's savepoint fails too. The error returned (and logged at every retry)
// must name the full disk, not only the rollback that could not run. The answered step is
// not lost: it waits in the journal, and the next start stores it.
func TestFullDiskIsNamed(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vigil.db")
	logs := &syncbuf.Buffer{}
	db, err := Open(ctx, path, Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), IngestDelay: time.Hour})
	require.NoError(t, err)
	// max_page_count belongs to the connection: set on the writer's, the database is full
	// for every later write that needs a new page, as on a full disk.
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		var pages int
		if err := tx.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
			return err
		}
		_, err := tx.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages))
		return err
	}))
	big := step("s", "allow", 0)
	big.Request = json.RawMessage(`{"pad":"` + strings.Repeat("x", 256<<10) + `"}`)
	save(t, db, big)

	const sqliteFull = 13
	err = db.Flush(ctx)
	var se *sqlite.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, sqliteFull, se.Code()&0xff, "the first SQLite error in the chain is the cause: %v", err)
	require.ErrorContains(t, err, "database or disk is full")
	require.ErrorContains(t, err, "rollback to savepoint", "what failed after it is kept too")
	require.Contains(t, logs.String(), "database or disk is full")
	require.NoError(t, db.Close())

	db, err = Open(ctx, path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	got, err := db.Step(ctx, big.Seq)
	require.NoError(t, err)
	require.Equal(t, *big, got)
}

// While SQLite cannot take steps (a full disk), the journaled ones wait in memory with their
// requests: the backlog is bounded by bytes as well as by count, and past it a step is
// refused (the agent gets an error) rather than held.
func TestBacklogIsBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), Options{IngestDelay: time.Hour, ManualIndex: true})
	require.NoError(t, err)
	require.NoError(t, db.Exec(ctx, func(tx *sql.Tx) error {
		var pages int
		if err := tx.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
			return err
		}
		_, err := tx.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages))
		return err
	}))
	big := func(i int) *record.StepRecord {
		s := step("s", "allow", time.Duration(i))
		s.Request = json.RawMessage(`{"pad":"` + strings.Repeat("x", 4<<20) + `"}`)
		return s
	}
	save(t, db, big(0))
	require.Error(t, db.Flush(ctx), "the disk is full: storing fails")
	saved, refused := 1, false
	for ; saved < 2*maxBacklogBytes/(4<<20); saved++ {
		if err := db.SaveStep(ctx, big(saved)); err != nil {
			require.ErrorIs(t, err, ErrBacklog)
			refused = true
			break
		}
	}
	require.True(t, refused, "refused by size (%d steps), long before the count (%d)", saved, maxPending)
	require.LessOrEqual(t, db.backlogBytes.Load(), int64(maxBacklogBytes+(5<<20)))
	// Closing keeps the journaled steps for the next start (the disk is still full).
	_ = db.Close()
}
