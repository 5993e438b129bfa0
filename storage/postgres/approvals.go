package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vigil-guardian/vigil/storage"
)

// The approvals ledger (storage.Approvals), shared by the replicas: a request one replica
// let through may be answered through another. A take locks the rows of its requests
// (SELECT … FOR UPDATE) before it reads their states: a concurrent take of the same
// request waits for it to commit and then, at READ COMMITTED, reads the row as committed,
// answered, so exactly one of them succeeds.

// RecordApproval keeps Vigil's verdict on an approval request (see storage.Approvals).
func (db *DB) RecordApproval(ctx context.Context, key []byte, allowed bool, at time.Time, maxAge time.Duration) (err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	state := storage.ApprovalDenied
	if allowed {
		state = storage.ApprovalAllowed
	}
	return db.plainTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO approvals (key, state, at) VALUES ($1, $2, $3)
			ON CONFLICT (key) DO UPDATE SET at = excluded.at,
				state = CASE WHEN approvals.state = $4 AND approvals.at > $5 THEN approvals.state ELSE excluded.state END`,
			key, int16(state), at.UnixNano(), int16(storage.ApprovalDenied), at.Add(-maxAge).UnixNano()); err != nil {
			return fmt.Errorf("storage: record approval request: %w", err)
		}
		return nil
	})
}

// TakeApprovals marks approval requests answered, all or none (see storage.Approvals).
func (db *DB) TakeApprovals(ctx context.Context, keys [][]byte, now time.Time, maxAge time.Duration) (bad int, state storage.ApprovalState, ok bool, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	if len(keys) == 0 {
		return 0, storage.ApprovalUnknown, true, nil
	}
	cutoff := now.Add(-maxAge).UnixNano()
	err = db.plainTx(ctx, func(tx pgx.Tx) error {
		bad, state, ok = 0, storage.ApprovalUnknown, true
		// Locked in the order of their keys, whatever order each take gives them in, so
		// that two takes sharing requests never deadlock: the second waits for the first
		// to end and then reads the rows as it left them.
		rows, err := tx.Query(ctx, `SELECT key, state, at FROM approvals WHERE key = ANY($1) ORDER BY key FOR UPDATE`, keys)
		if err != nil {
			return fmt.Errorf("storage: read approval requests: %w", err)
		}
		known := map[string]storage.ApprovalState{}
		var (
			key []byte
			st  int16
			at  int64
		)
		_, err = pgx.ForEachRow(rows, []any{&key, &st, &at}, func() error {
			if at > cutoff {
				known[string(key)] = storage.ApprovalState(st)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("storage: read approval requests: %w", err)
		}
		for i, k := range keys {
			if s := known[string(k)]; s != storage.ApprovalAllowed {
				bad, state, ok = i, s, false
				return nil
			}
			known[string(k)] = storage.ApprovalAnswered // a key given twice is answered the second time
		}
		if _, err := tx.Exec(ctx, `UPDATE approvals SET state = $1 WHERE key = ANY($2)`,
			int16(storage.ApprovalAnswered), keys); err != nil {
			return fmt.Errorf("storage: take approval requests: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, storage.ApprovalUnknown, false, err
	}
	return bad, state, ok, nil
}

// RestoreApprovals makes answered approval requests answerable again (see
// storage.Approvals).
func (db *DB) RestoreApprovals(ctx context.Context, keys [][]byte) (err error) {
	if len(keys) == 0 {
		return nil
	}
	ctx, done := db.bound(ctx)
	defer done(&err)
	return db.plainTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE approvals SET state = $1 WHERE key = ANY($2) AND state = $3`,
			int16(storage.ApprovalAllowed), keys, int16(storage.ApprovalAnswered)); err != nil {
			return fmt.Errorf("storage: restore approval requests: %w", err)
		}
		return nil
	})
}

// PruneApprovals deletes the approval requests recorded maxAge or longer before now.
func (db *DB) PruneApprovals(ctx context.Context, now time.Time, maxAge time.Duration) (_ int64, err error) {
	ctx, done := db.bound(ctx)
	defer done(&err)
	var n int64
	err = db.plainTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM approvals WHERE at <= $1`, now.Add(-maxAge).UnixNano())
		if err != nil {
			return fmt.Errorf("storage: prune approval requests: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return n, err
}
