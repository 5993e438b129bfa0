package sqlite

import (
	"github.com/vigil-guardian/vigil/record"

	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// openTest opens a fresh database in the test's temporary directory and closes it at the end.
func openTest(t testing.TB) *DB {
	t.Helper()
	// The tests that count the writer's queue must not see the background indexer's writes;
	// those that search index first (IndexComplete).
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), Options{ManualIndex: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

var t0 = time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC)

// step builds a valid record for session sid received at t0+offset.
func step(sid, decision string, offset time.Duration) *record.StepRecord {
	return &record.StepRecord{
		SessionID:  sid,
		Method:     "steps/toolCallRequest",
		Kind:       "toolCall",
		Decision:   decision,
		ReceivedAt: t0.Add(offset),
		Request:    json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest"}`),
		Response:   json.RawMessage(`{"jsonrpc":"2.0","id":1,"result":{"decision":"` + decision + `"}}`),
	}
}

func save(t testing.TB, db *DB, rec *record.StepRecord) *record.StepRecord {
	t.Helper()
	require.NoError(t, db.SaveStep(context.Background(), rec))
	return rec
}

// blockWriter parks the writer goroutine inside a write until release is called, so tests
// can queue ops and have them land in one batch.
func blockWriter(t *testing.T, db *DB) (release func()) {
	t.Helper()
	started, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- db.Exec(context.Background(), func(*sql.Tx) error {
			close(started)
			<-unblock
			return nil
		})
	}()
	<-started
	return func() {
		close(unblock)
		require.NoError(t, <-done)
	}
}

// waitQueued waits until n writes wait: ops in the writer's queue and steps for the journal
// (which a blocked writer holds).
func waitQueued(t *testing.T, db *DB, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(db.ops)+int(db.waiting.Load()) >= n }, 10*time.Second, time.Millisecond,
		"expected %d queued writes", n)
}

// saveMany saves n records built by mk from concurrent goroutines and returns them.
func saveMany(t testing.TB, db *DB, n int, mk func(i int) *record.StepRecord) []*record.StepRecord {
	t.Helper()
	recs := make([]*record.StepRecord, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		recs[i] = mk(i)
		wg.Go(func() { errs <- db.SaveStep(context.Background(), recs[i]) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return recs
}

// bulkSteps inserts n steps of session sid (and their events) in one SQL statement each,
// much faster than n SaveSteps, for tests of queries over many rows. Step i (from 1) has
// latency i microseconds, the given tool, and receivedAt t0 + i ns. The session summary
// is not updated.
func bulkSteps(t testing.TB, db *DB, sid, tool string, n int) {
	t.Helper()
	require.NoError(t, db.Exec(context.Background(), func(tx *sql.Tx) error {
		var last int64
		if err := tx.QueryRow(`SELECT coalesce(max(seq), 0) FROM events`).Scan(&last); err != nil {
			return err
		}
		if _, err := tx.Exec(`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?)
			INSERT INTO events (type, session_id, at) SELECT 'step', ?, ? + i FROM k`,
			n, sid, t0.UnixNano()); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO steps (seq, session_id, method, kind, decision,
			received_at, request, response, tool, latency_micros)
			SELECT seq, session_id, 'steps/toolCallRequest', 'toolCall', 'allow', at, '{}', 'null', ?, seq - ?
			FROM events WHERE seq > ? ORDER BY seq`, tool, last, last)
		return err
	}))
}

func countRows(t testing.TB, db *DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Flush(context.Background()))
	require.NoError(t, db.Reader().QueryRow(fmt.Sprintf("SELECT count(*) FROM %s", table)).Scan(&n))
	return n
}
