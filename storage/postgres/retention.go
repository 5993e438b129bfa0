package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// UsedBytes is what retention by size bounds: an estimate of the steps' live data (with
// their events and index entries) plus the size of every other table of the schema.
//
// Not the tables' sizes alone: PostgreSQL does not give back the space of deleted rows (it
// reuses it), so the steps' files never shrink and a bound on them would be met only by
// deleting nearly everything. The steps are counted instead by the total that migration
// 003 keeps on the seq counter row (see there), brought up to date here with the steps
// written since the last call; a deleted step leaves it by exactly what it added. The
// events table is left out (a step's event is in its estimate; the other events are
// small); the other tables, which retention does not delete from, count with their full
// size.
func (db *DB) UsedBytes(ctx context.Context) (int64, error) {
	if err := db.countStepBytes(ctx); err != nil {
		return 0, err
	}
	ctx, done := db.bound(ctx)
	var err error
	defer done(&err)
	var n int64
	if err = db.pool.QueryRow(ctx, `SELECT (SELECT step_bytes FROM vigil_seq WHERE id = 1)
		+ coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname NOT IN ('steps', 'events')`).Scan(&n); err != nil {
		return 0, fmt.Errorf("storage: used size: %w", err)
	}
	return n, nil
}

// stepBytesChunk is how many seqs one transaction of countStepBytes covers: a short hold
// of the counter's lock, which the step committers wait for (some 4 ms for 1000 steps of
// 1.5 KB on a loaded 2-core machine, as long as a retention batch).
const stepBytesChunk = 1000

// countStepBytes adds the steps committed since the last count to the total, a chunk of
// seqs per transaction. Each holds the counter row's lock: no step commits meanwhile, so
// every seq up to the counter is committed and visible to the sum, and no retention batch
// deletes (and subtracts) at the same time. A first count of a large table takes many
// short transactions, each bounded; what was counted stays counted if one fails.
func (db *DB) countStepBytes(ctx context.Context) error {
	for {
		caughtUp, err := db.countStepBytesChunk(ctx)
		if err != nil {
			return fmt.Errorf("storage: count the steps' size: %w", err)
		}
		if caughtUp {
			return nil
		}
	}
}

// countStepBytesChunk counts one chunk and reports whether the count has caught up.
func (db *DB) countStepBytesChunk(ctx context.Context) (caughtUp bool, err error) {
	if db.isClosed() {
		return false, ErrClosed
	}
	ctx, done := db.bound(ctx)
	defer done(&err)
	// READ COMMITTED whatever the server's default: the sum must take its snapshot after
	// the lock is granted.
	err = pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var seq, upto int64
		if err := tx.QueryRow(ctx, `SELECT seq, step_bytes_upto FROM vigil_seq WHERE id = 1 FOR UPDATE`).Scan(&seq, &upto); err != nil {
			return fmt.Errorf("lock seq: %w", err)
		}
		to := min(seq, upto+stepBytesChunk)
		caughtUp = to == seq
		if to <= upto {
			return nil
		}
		// A new statement, so a new snapshot: it sees every step the lock waited for.
		if _, err := tx.Exec(ctx, `UPDATE vigil_seq SET step_bytes = step_bytes + (
				SELECT coalesce(sum(vigil_step_bytes(s.request, s.response, s.matched_rules, s.text, s.search, s.peers)), 0)
				FROM steps s WHERE s.seq > $1 AND s.seq <= $2),
			step_bytes_upto = $2 WHERE id = 1`, upto, to); err != nil {
			return fmt.Errorf("count: %w", err)
		}
		return nil
	})
	return caughtUp, err
}

// Prune deletes steps (with their events) the retention policy no longer keeps, oldest
// first, in batches, and the sessions left without steps (unless paused, blocked or with a
// pending hold). The seq counter is a row of its own, so deleting the newest events never
// lets a seq be handed out twice.
//
// MaxBytes: as on SQLite, above the bound the oldest steps go a batch at a time until
// UsedBytes is back under nine tenths of it, measured again after each batch (a read of
// one row and the catalog), so a pass stops at the target and the next pass, finding the
// size under the bound, deletes nothing.
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
	return res, nil
}

// pruneBatch deletes up to limit of the oldest steps (received before cutoff when > 0).
func (db *DB) pruneBatch(ctx context.Context, cutoff int64, limit int, res *record.PruneResult) (_ int, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	var steps, sessions int64
	// The seq lock orders this batch with the step committers, which update the same
	// session rows: without it the two could lock them in opposite orders.
	err = db.writeTx(ctx, func(t *seqTx) error {
		steps, sessions = 0, 0
		cond := `TRUE`
		args := []any{limit}
		if cutoff > 0 {
			cond = `received_at < $2`
			args = append(args, cutoff)
		}
		order := "seq"
		if cutoff > 0 {
			order = "received_at"
		}
		var sids []string
		err := t.QueryRow(ctx, `WITH gone AS (
				DELETE FROM steps WHERE seq IN (SELECT seq FROM steps WHERE `+cond+` ORDER BY `+order+` LIMIT $1)
				RETURNING seq, session_id),
			ev AS (DELETE FROM events WHERE seq IN (SELECT seq FROM gone))
			SELECT count(*), coalesce(array_agg(DISTINCT session_id ORDER BY session_id), '{}') FROM gone`,
			args...).Scan(&steps, &sids)
		if err != nil {
			return fmt.Errorf("delete steps: %w", err)
		}
		if steps == 0 {
			return nil
		}
		tag, err := t.Exec(ctx, `DELETE FROM sessions s WHERE s.id = ANY($1) AND s.control = 'active'
			AND NOT EXISTS (SELECT 1 FROM steps WHERE steps.session_id = s.id)
			AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.session_id = s.id AND h.status = 'pending')`, sids)
		if err != nil {
			return fmt.Errorf("delete emptied sessions: %w", err)
		}
		sessions = tag.RowsAffected()
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

// RunRetention applies r now and then every r.Interval until ctx is done or the database
// closes. It returns at once when r bounds nothing. With replicas, every replica may run
// it: batches are transactions, and a batch another replica already deleted deletes nothing.
func (db *DB) RunRetention(ctx context.Context, r record.Retention, log *slog.Logger) {
	storage.RetentionLoop(ctx, r, cmp.Or(log, db.log), func(err error) bool {
		return errors.Is(err, ErrClosed) || db.isClosed()
	}, db.Prune)
}
