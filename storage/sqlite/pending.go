package sqlite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"modernc.org/sqlite"
)

// pendingStep is a journaled step not yet in SQLite.
type pendingStep struct {
	seq  int64
	args *stepArgs
	json []byte
}

type rejectedStep struct {
	pendingStep
	err error
}

// Flush returns once every step saved before the call is in SQLite, and counted in its
// session's summary, so that a query made after it sees them. The store's own queries do
// this themselves; it is for code that reads the tables directly.
func (db *DB) Flush(ctx context.Context) error {
	if db.pendingN.Load() == 0 && db.owed.n.Load() == 0 {
		return nil
	}
	return db.submit(ctx, &op{flush: true, summaries: true})
}

// flushSteps is Flush for queries of steps: they need the steps stored, not the summaries.
func (db *DB) flushSteps(ctx context.Context) error {
	if db.pendingN.Load() == 0 {
		return nil
	}
	return db.submit(ctx, &op{flush: true})
}

// flushSession is flushSteps for reads of one session: it waits only when steps of that
// session are in the journal, so the first step of a new session does not wait for a commit.
func (db *DB) flushSession(ctx context.Context, id string) error {
	db.jmu.Lock()
	n := db.pendSessions[id]
	db.jmu.Unlock()
	if n == 0 {
		return nil
	}
	return db.flushSteps(ctx)
}

// isConstraint reports whether err is SQLite refusing one row (a constraint or a trigger),
// as opposed to a failure of the database as a whole.
func isConstraint(err error) bool {
	const sqliteConstraint = 19
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqliteConstraint
}

// reject sets aside steps SQLite refused: each is appended, as the JSON it was published
// with, to the rejected file next to the database, and logged.
func (db *DB) reject(steps []rejectedStep) {
	if len(steps) == 0 {
		return
	}
	path := db.path + "-rejected.jsonl"
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		db.log.Error("storage: open rejected steps file", "path", path, "err", err)
	}
	for _, r := range steps {
		db.log.Error("storage: step refused by the database; set aside",
			"seq", r.seq, "session", r.args.SessionID, "file", path, "err", r.err)
		if f != nil {
			if _, err := f.Write(append(r.json[:len(r.json):len(r.json)], '\n')); err != nil {
				db.log.Error("storage: write rejected step", "seq", r.seq, "err", err)
			}
		}
	}
	if f != nil {
		if err := f.Close(); err != nil {
			db.log.Error("storage: close rejected steps file", "path", path, "err", err)
		}
	}
}

// lastSeq is the newest seq stored (0 for none): journaled steps with a seq up to it are
// in the tables already.
func lastSeq(ctx context.Context, q querier) (int64, error) {
	var last int64
	if err := q.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM events`).Scan(&last); err != nil {
		return 0, fmt.Errorf("storage: read last seq: %w", err)
	}
	return last, nil
}

// replayJournal runs at Open, before the writer starts: it copies into SQLite the steps a
// crash left in the journal (those after the newest stored seq) and sets the next seq.
func (db *DB) replayJournal(ctx context.Context, recs [][]byte) error {
	for _, j := range db.journals {
		if d := j.damage; d != nil {
			// Answered steps may be among the dropped bytes: say so loudly, with the copy
			// that holds them, before the journal is emptied.
			db.log.Error("storage: step journal damaged; the damaged records are dropped, "+
				"the intact ones recovered, and the journal as it was kept beside it "+
				"(droppedBytes is exact; droppedRecords is a lower bound when the damage hit their lengths)",
				"journal", j.path, "copy", d.copy, "droppedRecords", d.records,
				"droppedBytes", d.bytes, "intactRecords", d.intact)
		}
	}
	last, err := lastSeq(ctx, db.w)
	if err != nil {
		return err
	}
	db.nextSeq = last + 1
	var steps []pendingStep
	for _, payload := range recs {
		rec, err := decodeJournaled(payload)
		if err != nil {
			return err
		}
		if rec.Seq <= last {
			continue // stored before the crash; the journal was not emptied yet
		}
		a, err := newStepArgs(&rec)
		if err != nil {
			return err
		}
		steps = append(steps, pendingStep{seq: rec.Seq, args: a, json: payload})
		db.nextSeq = max(db.nextSeq, rec.Seq+1)
	}
	// The two files may interleave: store in seq order.
	slices.SortFunc(steps, func(a, b pendingStep) int { return cmp.Compare(a.seq, b.seq) })
	if len(steps) > 0 {
		if err := db.commit(steps, nil); err != nil {
			return err
		}
		db.log.Info("storage: recovered steps from the journal", "steps", len(steps))
	}
	for _, j := range db.journals {
		if err := j.reset(); err != nil {
			return err
		}
	}
	return nil
}
