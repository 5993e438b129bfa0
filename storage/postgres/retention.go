package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// UsedBytes is the size of the backend's tables and indexes.
func (db *DB) UsedBytes(ctx context.Context) (int64, error) {
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'r'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("storage: used size: %w", err)
	}
	return n, nil
}

// Prune deletes steps (with their events) the retention policy no longer keeps, oldest
// first, in batches, and the sessions left without steps (unless paused, blocked or with a
// pending hold). The seq counter is a row of its own, so deleting the newest events never
// lets a seq be handed out twice.
//
// MaxBytes: PostgreSQL does not shrink tables when rows are deleted (vacuum makes the space
// reusable), so the used size cannot be watched going down as SQLite's is. Above MaxBytes,
// Prune deletes the share of the oldest steps that brings the size to nine tenths of it
// pro rata (a step's share of the size taken as the average), and leaves the space to
// autovacuum.
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
	}
	if r.MaxBytes > 0 && used > r.MaxBytes {
		var steps int64
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM steps`).Scan(&steps); err != nil {
			return res, fmt.Errorf("storage: prune: count steps: %w", err)
		}
		target := r.MaxBytes / 10 * 9
		excess := steps - int64(float64(steps)*float64(target)/float64(used))
		for excess > 0 {
			n, err := db.pruneBatch(ctx, 0, int(min(excess, int64(r.BatchSize))), &res)
			if err != nil {
				return res, err
			}
			if n == 0 {
				break
			}
			excess -= int64(n)
		}
	}
	if res.UsedAfter, err = db.UsedBytes(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// pruneBatch deletes up to limit of the oldest steps (received before cutoff when > 0).
func (db *DB) pruneBatch(ctx context.Context, cutoff int64, limit int, res *record.PruneResult) (int, error) {
	var steps, sessions int64
	// The seq lock orders this batch with the step committers, which update the same
	// session rows: without it the two could lock them in opposite orders.
	err := db.writeTx(ctx, func(t *seqTx) error {
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
