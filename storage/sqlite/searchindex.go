package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/vigil-guardian/vigil/storage"
)

// The search index is filled in the background, not as steps are stored: tokenizing a
// step's text costs about half as much CPU again as storing it, and the guardian answers
// agents first. The indexer takes the stored steps after search_progress.upto in seq order,
// a batch per write, and rests between batches at least twice as long as the batch took,
// so it uses at most a third of one core and yields to the guardian under load; when it
// has caught up it looks again every indexPoll. Steps are stored in seq order, so every
// step up to the newest stored one is there to be indexed, or never will be.
const (
	indexBatch = 256
	indexPoll  = 500 * time.Millisecond
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
	for {
		start := time.Now()
		// Asked of a reader first, so an idle guardian sends its writer nothing.
		n, err := 0, error(nil)
		if lag, lerr := db.hasUnindexed(ctx); lerr != nil || lag {
			n, err = db.IndexBatch(ctx, indexBatch)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			db.log.Warn("storage: search index", "err", err)
		}
		rest := indexPoll
		if n == indexBatch {
			rest = max(2*time.Since(start), time.Millisecond)
		}
		if !wait(rest) {
			return
		}
	}
}

// IndexBatch adds up to limit stored steps to the search index and reports how many it
// looked at. It is the indexer's unit of work, also for tests and tools that need the
// index complete now.
func (db *DB) IndexBatch(ctx context.Context, limit int) (int, error) {
	var n int
	// Alone: it indexes what is stored, and must not hurry the journal's ingestion.
	err := db.execAlone(ctx, func(tx *sql.Tx) error {
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
				(SELECT group_concat(coalesce(j.value ->> 'ruleId', '') || ' ' ||
					coalesce(j.value ->> 'reasonCode', ''), ' ') FROM json_each(steps.matched_rules) AS j),
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
		return 0, fmt.Errorf("storage: search index: %w", err)
	}
	return n, nil
}

// IndexComplete indexes every stored step now (tests, tools).
func (db *DB) IndexComplete(ctx context.Context) error {
	if err := db.Flush(ctx); err != nil {
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
	expr := col
	for _, c := range storage.IDSeparators {
		expr = "replace(" + expr + ", '" + string(c) + "', '')"
	}
	return expr
}

// indexLag counts the stored steps the index has not reached yet.
func indexLag(ctx context.Context, q querier) (int64, error) {
	var lag int64
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM steps
		WHERE seq > (SELECT upto FROM search_progress WHERE id = 1)`).Scan(&lag)
	return lag, err
}
