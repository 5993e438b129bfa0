package sqlite

import (
	"cmp"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"

	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// vacuumChunk is how many free pages one incremental_vacuum write returns to the OS.
const vacuumChunk = 512

// UsedBytes is the size of the database's pages in use: page_count minus the free list,
// times the page size. Freed pages are reused by later writes, so this, not the file size,
// is what grows with new data.
func (db *DB) UsedBytes(ctx context.Context) (int64, error) {
	var n int64
	if err := db.r.QueryRowContext(ctx, `SELECT (p.page_count - f.freelist_count) * s.page_size
		FROM pragma_page_count() AS p, pragma_freelist_count() AS f, pragma_page_size() AS s`).
		Scan(&n); err != nil {
		return 0, fmt.Errorf("storage: used size: %w", err)
	}
	return n, nil
}

// Prune applies r once, as of now. It deletes in batches of r.BatchSize steps, each its own
// short write through the writer, so agents' writes go between them and nothing waits for
// the whole pass. A cancelled ctx stops it between batches; what was deleted stays deleted.
// When the database uses auto_vacuum=INCREMENTAL the freed pages are then returned to the
// file system, also in small writes; otherwise (the default) the file keeps its size and
// SQLite reuses the freed pages for new data.
func (db *DB) Prune(ctx context.Context, now time.Time, r record.Retention) (record.PruneResult, error) {
	r = r.WithDefaults()
	var res record.PruneResult
	used, err := db.UsedBytes(ctx)
	if err != nil {
		return res, err
	}
	res.UsedBefore, res.UsedAfter = used, used
	if !r.Enabled() {
		return res, nil
	}

	if r.MaxAge > 0 {
		cutoff := now.Add(-r.MaxAge).UnixNano()
		for {
			n, err := db.pruneBatch(ctx, cutoff, r.BatchSize, &res)
			if err != nil {
				return res, err
			}
			if n < r.BatchSize {
				break
			}
		}
		if res.UsedAfter, err = db.UsedBytes(ctx); err != nil {
			return res, err
		}
	}

	if r.MaxBytes > 0 && res.UsedAfter > r.MaxBytes {
		target := r.MaxBytes / 10 * 9
		for res.UsedAfter > target {
			n, err := db.pruneBatch(ctx, 0, r.BatchSize, &res)
			if err != nil {
				return res, err
			}
			if res.UsedAfter, err = db.UsedBytes(ctx); err != nil {
				return res, err
			}
			if n == 0 {
				// What is left is not steps (audit, holds, rules): nothing more to prune.
				break
			}
		}
	}

	if res.Steps > 0 {
		if err := db.incrementalVacuum(ctx, &res); err != nil {
			return res, err
		}
		if res.UsedAfter, err = db.UsedBytes(ctx); err != nil {
			return res, err
		}
	}
	return res, nil
}

// pruneBatch deletes up to limit steps in one write: those received before cutoff (unix
// nanoseconds), oldest first, or, with cutoff 0, the lowest seqs. It returns how many it
// deleted and adds them to res.
func (db *DB) pruneBatch(ctx context.Context, cutoff int64, limit int, res *record.PruneResult) (int, error) {
	var steps, sessions int64
	// The summaries whole first: a session whose steps all go loses its row, which a
	// summary written after would bring back.
	err := db.execSummaries(ctx, func(tx *sql.Tx) error {
		steps, sessions = 0, 0 // a retried batch runs this again
		var (
			rows *sql.Rows
			err  error
		)
		if cutoff > 0 {
			rows, err = tx.QueryContext(ctx, `SELECT seq, session_id FROM steps
				WHERE received_at < ? ORDER BY received_at LIMIT ?`, cutoff, limit)
		} else {
			rows, err = tx.QueryContext(ctx, `SELECT seq, session_id FROM steps ORDER BY seq LIMIT ?`, limit)
		}
		if err != nil {
			return fmt.Errorf("select steps to prune: %w", err)
		}
		seqs := make([]int64, 0, limit)
		var sids []string
		seen := make(map[string]bool)
		for rows.Next() {
			var (
				seq int64
				sid string
			)
			if err := rows.Scan(&seq, &sid); err != nil {
				rows.Close()
				return fmt.Errorf("select steps to prune: %w", err)
			}
			seqs = append(seqs, seq)
			if !seen[sid] {
				seen[sid] = true
				sids = append(sids, sid)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("select steps to prune: %w", err)
		}
		if len(seqs) == 0 {
			return nil
		}
		seqList, err := json.Marshal(seqs)
		if err != nil {
			return fmt.Errorf("encode seqs: %w", err)
		}
		sidList, err := json.Marshal(sids)
		if err != nil {
			return fmt.Errorf("encode session ids: %w", err)
		}
		// A new seq is max(seq)+1 (see 001_foundation.sql): when this batch takes the newest
		// event, a retention marker takes a newer seq first, so no seq is ever reused.
		var newest int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events`).Scan(&newest); err != nil {
			return fmt.Errorf("read newest seq: %w", err)
		}
		if slices.Contains(seqs, newest) {
			marker, _ := json.Marshal(map[string]int{"prunedSteps": len(seqs)})
			if _, err := db.NextSeqTx(tx, "retention", "", time.Now(), marker); err != nil {
				return fmt.Errorf("keep the seq sequence: %w", err)
			}
		}
		// The step rows first: the events' foreign key then finds no child to check.
		if _, err := tx.ExecContext(ctx, `DELETE FROM steps
			WHERE seq IN (SELECT value FROM json_each(?))`, string(seqList)); err != nil {
			return fmt.Errorf("delete steps: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM events
			WHERE seq IN (SELECT value FROM json_each(?))`, string(seqList)); err != nil {
			return fmt.Errorf("delete step events: %w", err)
		}
		// A paused or blocked session keeps its row (it holds the control), as does one with
		// a pending hold (the review queue shows its session).
		out, err := tx.ExecContext(ctx, `DELETE FROM sessions
			WHERE id IN (SELECT value FROM json_each(?)) AND control = 'active'
			AND NOT EXISTS (SELECT 1 FROM steps WHERE steps.session_id = sessions.id)
			AND NOT EXISTS (SELECT 1 FROM session_pending_holds p WHERE p.session_id = sessions.id)`,
			string(sidList))
		if err != nil {
			return fmt.Errorf("delete emptied sessions: %w", err)
		}
		if sessions, err = out.RowsAffected(); err != nil {
			return fmt.Errorf("delete emptied sessions: %w", err)
		}
		steps = int64(len(seqs))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("storage: prune: %w", err)
	}
	if steps > 0 {
		res.Batches++
	}
	res.Steps += steps
	res.Sessions += sessions
	return int(steps), nil
}

// incrementalVacuum returns free pages to the file system when the database was created
// with auto_vacuum=INCREMENTAL. Vigil's own databases use the default (none), where freed
// pages stay in the file for reuse; switching an existing file needs a full VACUUM, which
// a backup (VACUUM INTO) of a database set up that way also preserves.
func (db *DB) incrementalVacuum(ctx context.Context, res *record.PruneResult) error {
	var mode int
	if err := db.r.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return fmt.Errorf("storage: read auto_vacuum: %w", err)
	}
	const incremental = 2
	if mode != incremental {
		return nil
	}
	for {
		var free int64
		if err := db.r.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free); err != nil {
			return fmt.Errorf("storage: read freelist_count: %w", err)
		}
		if free == 0 {
			return nil
		}
		n := min(free, vacuumChunk)
		if err := db.Exec(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", n))
			return err
		}); err != nil {
			return fmt.Errorf("storage: incremental vacuum: %w", err)
		}
		res.VacuumedPages += n
	}
}

// RunRetention applies r now and then every r.Interval until ctx is done, logging what
// each pass pruned. It returns at once when r bounds nothing, and when the database is
// closed. Run it in its own goroutine and stop it (cancel ctx, wait for the return) before
// closing the database.
func (db *DB) RunRetention(ctx context.Context, r record.Retention, log *slog.Logger) {
	storage.RetentionLoop(ctx, r, cmp.Or(log, db.log), func(err error) bool {
		return errors.Is(err, ErrClosed) || db.isClosed()
	}, db.Prune)
}

func (db *DB) isClosed() bool {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return db.closed
}
