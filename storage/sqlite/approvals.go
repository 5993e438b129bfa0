package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/vigil-guardian/vigil/storage"
)

// The approvals ledger (storage.Approvals). Its writes take no seq and read no step, so
// they run alone (execAlone): they neither wait for the step journal nor split its
// ingestion batches. The writer runs them one at a time, which makes each take atomic.

// approvalRefused ends a take's transaction when a request is not answerable: its
// savepoint is rolled back, so none of the requests is marked answered.
type approvalRefused struct {
	bad   int
	state storage.ApprovalState
}

func (*approvalRefused) Error() string { return "storage: approval request not answerable" }

// RecordApproval keeps Vigil's verdict on an approval request (see storage.Approvals).
func (db *DB) RecordApproval(ctx context.Context, key []byte, allowed bool, at time.Time, maxAge time.Duration) error {
	state := storage.ApprovalDenied
	if allowed {
		state = storage.ApprovalAllowed
	}
	_, err := db.execAlone(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO approvals (key, state, at) VALUES (?1, ?2, ?3)
			ON CONFLICT (key) DO UPDATE SET at = excluded.at,
				state = CASE WHEN approvals.state = ?4 AND approvals.at > ?5 THEN approvals.state ELSE excluded.state END`,
			key, state, at.UnixNano(), storage.ApprovalDenied, at.Add(-maxAge).UnixNano()); err != nil {
			return fmt.Errorf("storage: record approval request: %w", err)
		}
		return nil
	})
	return err
}

// TakeApprovals marks approval requests answered, all or none (see storage.Approvals).
func (db *DB) TakeApprovals(ctx context.Context, keys [][]byte, now time.Time, maxAge time.Duration) (bad int, state storage.ApprovalState, ok bool, err error) {
	cutoff := now.Add(-maxAge).UnixNano()
	_, err = db.execAlone(ctx, func(tx *sql.Tx) error {
		for i, k := range keys {
			res, err := tx.Exec(`UPDATE approvals SET state = ? WHERE key = ? AND state = ? AND at > ?`,
				storage.ApprovalAnswered, k, storage.ApprovalAllowed, cutoff)
			if err != nil {
				return fmt.Errorf("storage: take approval request: %w", err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("storage: take approval request: %w", err)
			}
			if n == 1 {
				continue
			}
			// Read after the updates before it: a key given twice is answered the second time.
			var (
				st storage.ApprovalState
				at int64
			)
			err = tx.QueryRow(`SELECT state, at FROM approvals WHERE key = ?`, k).Scan(&st, &at)
			switch {
			case errors.Is(err, sql.ErrNoRows) || (err == nil && at <= cutoff):
				st = storage.ApprovalUnknown
			case err != nil:
				return fmt.Errorf("storage: read approval request: %w", err)
			}
			return &approvalRefused{bad: i, state: st}
		}
		return nil
	})
	var refused *approvalRefused
	switch {
	case errors.As(err, &refused):
		return refused.bad, refused.state, false, nil
	case err != nil:
		return 0, storage.ApprovalUnknown, false, err
	}
	return 0, storage.ApprovalUnknown, true, nil
}

// RestoreApprovals makes answered approval requests answerable again (see
// storage.Approvals).
func (db *DB) RestoreApprovals(ctx context.Context, keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := db.execAlone(ctx, func(tx *sql.Tx) error {
		for _, k := range keys {
			if _, err := tx.Exec(`UPDATE approvals SET state = ? WHERE key = ? AND state = ?`,
				storage.ApprovalAllowed, k, storage.ApprovalAnswered); err != nil {
				return fmt.Errorf("storage: restore approval request: %w", err)
			}
		}
		return nil
	})
	return err
}

// PruneApprovals deletes the approval requests recorded maxAge or longer before now.
func (db *DB) PruneApprovals(ctx context.Context, now time.Time, maxAge time.Duration) (int64, error) {
	var n int64
	_, err := db.execAlone(ctx, func(tx *sql.Tx) error {
		res, err := tx.Exec(`DELETE FROM approvals WHERE at <= ?`, now.Add(-maxAge).UnixNano())
		if err != nil {
			return fmt.Errorf("storage: prune approval requests: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
