package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/vigil-guardian/vigil/storage"
)

// The search index is filled in the background, not as steps are stored: tokenizing a
// step's text costs about a third as much CPU again as storing it, and the guardian answers
// agents first. The indexer takes the stored steps after search_progress.upto in seq order,
// a batch per write, and rests between batches at least twice as long as the batch took, so
// it uses at most a third of one core and yields to the guardian under load; when it has
// caught up it looks again every indexPoll, and once a look has found nothing new for a
// whole poll it merges the index's segments (mergeIndex). Steps are stored in seq order, so
// every step up to the newest stored one is there to be indexed, or never will be.
//
// A batch is sized by time, not by count: each write of the index adds a segment that FTS5
// later merges, so a step like the load benchmark's cost 12.2 µs of CPU to index in batches
// of 256 and 10.4 µs in batches sized this way (BenchmarkStepCPU, 400,000 steps). Batches
// grow while they take less than indexBatchTime in the writer and shrink when they take
// more (long texts), so that a hold's decision or the journal's ingestion waits behind the
// index for at most about that.
const (
	indexBatchMin  = 128
	indexBatchMax  = 4096
	indexBatchTime = 10 * time.Millisecond
	indexPoll      = 500 * time.Millisecond
	// indexTextBytes is how much of a step's text is indexed.
	indexTextBytes = 8192
)

// indexSteps is the indexer's loop; it ends when stop is closed.
func (db *DB) indexSteps(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-stop:
			return false
		case <-t.C:
			return true
		}
	}
	limit := indexBatchMin
	// quiet: the last look found nothing to index; mergeable: segments were added since
	// the idle merging last found nothing to merge.
	quiet, mergeable := false, true
	for {
		start := time.Now()
		// Asked of a reader first, so an idle guardian sends its writer nothing.
		n, busy, more, err := 0, time.Duration(0), false, error(nil)
		switch lag, lerr := db.hasUnindexed(ctx); {
		case lerr != nil || lag:
			n, busy, err = db.indexBatch(ctx, limit)
			quiet, mergeable = false, true
			if n == limit {
				more, limit = true, nextIndexBatch(limit, busy)
			}
		case quiet && mergeable:
			// Nothing came in for a whole poll: do the merging automerge leaves for later.
			mergeable, err = db.mergeIndex(ctx)
			more = mergeable
		default:
			quiet = true
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			db.log.Warn("storage: search index", "err", err)
		}
		rest := indexPoll
		if more {
			rest = max(2*time.Since(start), time.Millisecond)
		}
		if !wait(rest) {
			return
		}
	}
}

// indexMergePages is how much one idle merge writes at most (FTS5 leaf pages of about
// 4 KB): a few milliseconds of the writer's time.
const indexMergePages = 256

// mergeIndex merges segments of the search index where a level has four or more (FTS5's
// usermerge), writing about indexMergePages pages, and reports whether there was anything
// to merge. The indexer calls it when no step has come in for a poll: FTS5 merges a level
// only at 16 segments while steps are indexed (see migration 009), which keeps indexing
// cheap under load, and searches read fewer segments once the guardian is idle.
func (db *DB) mergeIndex(ctx context.Context) (bool, error) {
	var did bool // the writer's to set, as indexBatch's n
	_, err := db.execAlone(ctx, func(tx *sql.Tx) error {
		// FTS5's own test for work done: its merge changes at least two rows.
		var before, after int64
		if err := tx.QueryRow(`SELECT total_changes()`).Scan(&before); err != nil {
			return fmt.Errorf("count changes: %w", err)
		}
		if _, err := tx.Exec(`INSERT INTO step_search (step_search, rank) VALUES ('merge', ?)`,
			indexMergePages); err != nil {
			return fmt.Errorf("merge: %w", err)
		}
		if err := tx.QueryRow(`SELECT total_changes()`).Scan(&after); err != nil {
			return fmt.Errorf("count changes: %w", err)
		}
		did = after-before >= 2
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("storage: search index: %w", err)
	}
	return did, nil
}

// nextIndexBatch sizes the batch after a full one of limit steps that kept the writer busy
// for busy: towards indexBatchTime, at most doubling or halving at a time.
func nextIndexBatch(limit int, busy time.Duration) int {
	next := 2 * limit
	if busy > 0 {
		next = min(next, max(limit/2, int(int64(limit)*int64(indexBatchTime)/int64(busy))))
	}
	return min(max(next, indexBatchMin), indexBatchMax)
}

// IndexBatch adds up to limit stored steps to the search index and reports how many it
// looked at. It is the indexer's unit of work, also for tests and tools that need the
// index complete now.
func (db *DB) IndexBatch(ctx context.Context, limit int) (int, error) {
	n, _, err := db.indexBatch(ctx, limit)
	return n, err
}

// indexBatch is IndexBatch that also reports how long its transaction kept the writer busy,
// commit included (not its wait for the writer).
func (db *DB) indexBatch(ctx context.Context, limit int) (int, time.Duration, error) {
	// n is the writer's to set, and read only once it has: when ctx ends first, the writer
	// may still be running the function.
	var n int
	// Alone: it indexes what is stored, and must not hurry the journal's ingestion.
	busy, err := db.execAlone(ctx, func(tx *sql.Tx) error {
		var upto, last int64
		if err := tx.QueryRow(`SELECT upto FROM search_progress WHERE id = 1`).Scan(&upto); err != nil {
			return fmt.Errorf("read progress: %w", err)
		}
		if err := tx.QueryRow(`SELECT coalesce(max(seq), 0), count(*) FROM
			(SELECT seq FROM steps WHERE seq > ? ORDER BY seq LIMIT ?)`, upto, limit).Scan(&last, &n); err != nil {
			return fmt.Errorf("find steps: %w", err)
		}
		if n == 0 {
			return nil
		}
		if _, err := tx.Exec(`INSERT INTO step_search (rowid, session, agent, user, tool, decision, rules, body)
			SELECT seq, `+squashSQL("session_id")+` || ' ' || session_id,
				`+squashSQL("agent_id")+` || ' ' || agent_id || ' ' || agent_name,
				`+squashSQL("user_id")+` || ' ' || user_id, `+squashSQL("tool")+` || ' ' || tool,
				decision || CASE WHEN held THEN ' held' ELSE '' END,
				CASE WHEN matched_rules = '[]' THEN NULL ELSE
					(SELECT group_concat(coalesce(j.value ->> 'ruleId', '') || ' ' ||
					coalesce(j.value ->> 'reasonCode', ''), ' ') FROM json_each(steps.matched_rules) AS j) END,
				substr(text, 1, ?)
			FROM steps WHERE seq > ? AND seq <= ?`, indexTextBytes, upto, last); err != nil {
			return fmt.Errorf("index steps: %w", err)
		}
		if _, err := tx.Exec(`UPDATE search_progress SET upto = ? WHERE id = 1`, last); err != nil {
			return fmt.Errorf("save progress: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("storage: search index: %w", err)
	}
	return n, busy, nil
}

// IndexComplete indexes every stored step now (tests, tools).
func (db *DB) IndexComplete(ctx context.Context) error {
	if err := db.flushSteps(ctx); err != nil {
		return err
	}
	for {
		n, err := db.IndexBatch(ctx, 4096)
		if err != nil || n == 0 {
			return err
		}
	}
}

// hasUnindexed reports whether a stored step waits for the index.
func (db *DB) hasUnindexed(ctx context.Context) (bool, error) {
	var more bool
	err := db.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM steps
		WHERE seq > (SELECT upto FROM search_progress WHERE id = 1))`).Scan(&more)
	return more, err
}

// squashSQL is the SQL expression that drops storage.IDSeparators from col.
func squashSQL(col string) string {
	return squashFunc + "(" + col + ")"
}

// squashFunc is the SQL function squashSQL calls. It is SQLite's replace() once per
// separator, done in one pass in Go: the chain of six replace() calls on each of four ids
// cost a third of the index's CPU per step (2.7 µs of 8).
const squashFunc = "vigil_squash"

// The function is registered with the driver, which gives it to every connection it opens
// from then on; a registration is the driver's configuration, made once before any Open.
func init() {
	sqlite.MustRegisterFunction(squashFunc, &sqlite.FunctionImpl{
		NArgs: 1, Deterministic: true,
		// The text is read in place, whole: the copying mode stops at a NUL byte, which an
		// id may hold ("\u0000" in JSON). The answer never shares the argument's memory.
		VolatileArgs: true,
		Scalar: func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			switch v := args[0].(type) {
			case string:
				return squashBytes(v), nil
			case []byte:
				return []byte(squashBytes(string(v))), nil
			default:
				return v, nil // NULL stays NULL; ids are never numbers
			}
		},
	})
}

// squashBytes is storage.SquashID byte by byte, as replace() works: the separators are
// ASCII, and an id with invalid UTF-8 keeps its other bytes as they are.
func squashBytes(id string) string {
	if !strings.ContainsAny(id, storage.IDSeparators) {
		return strings.Clone(id)
	}
	b := make([]byte, 0, len(id))
	for i := range len(id) {
		if strings.IndexByte(storage.IDSeparators, id[i]) < 0 {
			b = append(b, id[i])
		}
	}
	return string(b)
}

// indexLag counts the stored steps the index has not reached yet.
func indexLag(ctx context.Context, q querier) (int64, error) {
	var lag int64
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM steps
		WHERE seq > (SELECT upto FROM search_progress WHERE id = 1)`).Scan(&lag)
	return lag, err
}
